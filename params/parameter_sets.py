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
  release shape. It also bounds a joint release's memory: concrete expands every
  encrypted bit of a call at run time (about 36 KB each at k = 20), so at the envelope's 256
  bits a count a 256-cell call held 2.4 GB and the compute server's two concurrent calls
  4.9 GB (measured); 128 cells hold half (two calls 2.5 GB). Version 2 halved it for that.
* ``envelope_bits``: the most encrypted bits a count that noisy-greedy's split 2-way release
  may carry (``params.noise_rules.dominated_envelope``). Its groups' shapes are sums of
  uniforms dominated by the Gaussian they are accounted as; more uniforms bring a group's
  variance closer to that Gaussian's (the central limit), so the width buys accuracy with
  bits. Version 3 widened it from 256 to 384 and halved ``chunk_cells`` to 64 so that one
  call still holds at most ``JOINT_MAX_BITS_PER_CALL`` bits (64 x 384 = 24,576). At 384 the
  groups' cell-weighted variance over their Gaussians' falls from 1.07-1.17 to 1.04-1.10
  (half the pairs kept, six tables at eps 0.3, 1 and 4,
  ``experiments/split_release_shapes/bench_group_shapes.py --envelope-bits``), for 1.1-1.6x
  the release's encrypted bits. The default's 2-way error fell 1-3% where the groups were
  furthest from their Gaussians (computers at eps 1: 0.0873 to 0.0846; Adult at eps 0.3:
  0.0768 to 0.0759; ``experiments/split_release_shapes/results/envelope_384/``) and is level
  at eps 4.
* ``p_error``: concrete's per-operation error probability. P1 is leveled (no bootstrapping),
  so this only steers the parameter optimiser's noise margin; results here are decrypted and
  published, so we ask for 2^-40 instead of concrete's default 1e-5.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction


@dataclass(frozen=True)
class ParameterSet:
    name: str
    version: int
    count_bits: int
    chunk_cells: int
    p_error: float
    envelope_bits: int = 256

    def to_dict(self) -> dict:
        return asdict(self)


PARAMETER_SETS: dict[str, ParameterSet] = {
    p.name: p
    for p in [
        ParameterSet(name="default", version=3, count_bits=20, chunk_cells=64,
                     p_error=2.0 ** -40, envelope_bits=384),
        # For tests: narrower chunks keep the circuits and their keys tiny.
        ParameterSet(name="test-small", version=1, count_bits=16, chunk_cells=32,
                     p_error=2.0 ** -40, envelope_bits=256),
    ]
}


def get_parameter_set(name: str) -> ParameterSet:
    try:
        return PARAMETER_SETS[name]
    except KeyError:
        raise ValueError(f"unknown parameter set {name!r}; known: "
                         f"{sorted(PARAMETER_SETS)}") from None


@dataclass(frozen=True)
class SelectionParameterSet:
    """The rules that fix Primitives 2 and 3's widths for a session (``params.selection_plan``).

    FedDPSyn fixes n_b, kappa and lambda once (n_b = 17, kappa = kappa'_j = 13 in its Table 2);
    fixed widths cannot serve every budget (at a small epsilon per round a 13-bit kappa'_j
    rounds the high bits' weights to 0, an unbounded loss), so a set here fixes the *rules*
    and the session derives the widths from its budget and row bound, deterministically:

    * ``lam`` (lambda): weights exp(-eps 2^(j - lambda)) per bit j of A; lambda = 1 is
      exp(-eps A / 2), the exponential mechanism for a sensitivity-1 score (InDif against
      public expected counts, add/remove neighbours, ``crypto.indif``);
    * ``relative_loss``: kappa'_j is the least width with 4 eta <= relative_loss * eps, eta the
      exact worst-case |ln W(A) + eps A / 2| of the fixed-point weights (charged in full);
    * ``clamp_exponent``: n_b is the least width at which A's clamp only touches weights below
      e^-clamp_exponent (utility only: clamping is 1-Lipschitz, privacy is unaffected);
    * ``p_error``: every bootstrap of P2 and P3; the union bound bootstraps x p_error is
      added to the session's delta (``fhe_delta``);
    * ``chunk_sizes``: the P2 chunk sizes a pair may be cut into (the cut of least measured
      cost, ``params.selection_plan.chunk_sizes_for``; chunk scores are added encrypted).

    The stated cost of a set for a given session (epsilon per round with its numerical part,
    rho charged, fhe_delta, bootstraps) is what ``feddpsyn params`` prints and what every
    release records, with the set's name and version.
    """

    name: str
    version: int
    lam: int
    relative_loss: Fraction
    clamp_exponent: int
    p_error: float
    chunk_sizes: tuple[int, ...]

    def to_dict(self) -> dict:
        out = asdict(self)
        out["relative_loss"] = str(self.relative_loss)
        out["chunk_sizes"] = list(self.chunk_sizes)
        return out


# P2's chunk sizes. Version 1 had 8, 16 and 32: a pair of 20-24 cells then took a padded
# 32-cell chunk or two chunks and an encrypted sum. With 24, Fed-Heart-Disease's 66 pairs
# (1,601 cells) take 85 chunks instead of 103 and 26,682 bootstraps instead of 28,074, Adult's
# 105 pairs 265,932 instead of 269,257 (``experiments/p2_chunk_sizes/bench_indif_chunks.py``
# times both in one run). Every 4 cells from 8 to 32 saves more (25,193 and 261,036) but
# Fed-Heart's module then compiles 7 functions instead of 4: its key server prepared in 38 s
# against 28 (25 with 8/16/32), more than the demo's P2 saved on 2 cores.
CHUNK_SIZES = (8, 16, 24, 32)

SELECTION_SETS: dict[str, SelectionParameterSet] = {
    p.name: p
    for p in [
        # The numerical loss at 1% of each round's epsilon and weights cut only below e^-12.
        SelectionParameterSet(name="precise", version=2, lam=1,
                              relative_loss=Fraction(1, 100), clamp_exponent=12,
                              p_error=2.0 ** -40, chunk_sizes=CHUNK_SIZES),
        # 5% and e^-8: about 2 random bits fewer per trial and one bit of A fewer.
        SelectionParameterSet(name="lean", version=2, lam=1,
                              relative_loss=Fraction(5, 100), clamp_exponent=8,
                              p_error=2.0 ** -40, chunk_sizes=CHUNK_SIZES),
    ]
}
# Chosen by measurement (experiments/selection_sets/bench_selection_sets.py, eps = 1, PrivSyn's
# 10% for the selection): on Fed-Heart-Disease (66 pairs, 4 rounds) lean's P3 costs x0.84 of
# precise's time (x0.83 complexity, 134 vs 161 bootstraps a candidate) for the same first-round
# quality (expected score gap 60.7 vs 59.8, each equal to its ideal exp weights'); on Adult
# (105 pairs, 52 rounds, InDif in the tens of thousands) lean's e^-8 clamp moves 8.7e-4 of
# every round's probability to far-off pairs (expected gap 40 vs 0; precise: TV 1.3e-8 to the
# ideal). P3 is under a third of the selection's time, so the ~5% saved does not pay for that:
# precise is the default, lean an option for small domains.
DEFAULT_SELECTION_SET = "precise"


def get_selection_set(name: str) -> SelectionParameterSet:
    try:
        return SELECTION_SETS[name]
    except KeyError:
        raise ValueError(f"unknown selection parameter set {name!r}; known: "
                         f"{sorted(SELECTION_SETS)}") from None
