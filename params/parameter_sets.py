"""Named, versioned cryptographic parameter sets.

A session names one set; the key server compiles its circuits from it and records its name
and version in every release, so a published table says exactly which arithmetic produced it.

Design concern: **one place for every width and error probability**, each with the reason it
has the value it has.

* ``count_bits`` (k): masks and masked counts live in [0, 2^k). Released values are decoded
  centred in [-2^(k-1), 2^(k-1)), so a k of 20 serves unions of up to ~500,000 rows with room
  for noise; a larger table needs a larger k (checked at session creation).
* ``chunk_cells``: cells per aggregation-circuit call. Releases are cut into chunks of this
  size (the last one padded with unselected cells), so one compiled circuit serves every
  release shape.
* ``p_error``: concrete's per-operation error probability. P1 is leveled (no bootstrapping),
  so this only steers the parameter optimiser's noise margin; results here are decrypted and
  published, so we ask for 2^-40 instead of concrete's default 1e-5.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ParameterSet:
    name: str
    version: int
    count_bits: int
    chunk_cells: int
    p_error: float

    def to_dict(self) -> dict:
        return asdict(self)


PARAMETER_SETS: dict[str, ParameterSet] = {
    p.name: p
    for p in [
        ParameterSet(name="default", version=1, count_bits=20, chunk_cells=256,
                     p_error=2.0 ** -40),
        # For tests: narrower chunks keep the circuits and their keys tiny.
        ParameterSet(name="test-small", version=1, count_bits=16, chunk_cells=32,
                     p_error=2.0 ** -40),
    ]
}


def get_parameter_set(name: str) -> ParameterSet:
    try:
        return PARAMETER_SETS[name]
    except KeyError:
        raise ValueError(f"unknown parameter set {name!r}; known: {sorted(PARAMETER_SETS)}") from None
