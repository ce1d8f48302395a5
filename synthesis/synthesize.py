"""Released noisy marginals -> synthetic records -> CSV rows in the original values."""

from __future__ import annotations

from typing import Literal

import numpy as np

from params.schema import Schema
from params.table_codec import decode_records
from synthesis.consistency import make_consistent
from synthesis.marginals import NoisyMarginal

Method = Literal["pgm", "gum"]


def synthesize_records(schema: Schema, marginals: list[NoisyMarginal], method: Method,
                       rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """Encoded synthetic records (bin indices); ``rows`` defaults to the estimated total."""
    consistent, total = make_consistent(marginals, schema.domain_sizes)
    n = int(rows) if rows else max(1, int(round(total)))
    if method == "pgm":
        from synthesis.pgm import fit_pgm

        return fit_pgm(marginals, schema.domain_sizes, n, rng)
    if method == "gum":
        from synthesis.gum import fit_gum

        return fit_gum(consistent, schema.domain_sizes, n, rng)
    raise ValueError(f"unknown synthesis method {method!r} (pgm or gum)")


def synthesize(schema: Schema, marginals: list[NoisyMarginal], method: Method,
               rows: int | None, seed: int | None = None) -> tuple[np.ndarray, list[list[str]]]:
    """Synthetic records and their decoded CSV rows (header: ``schema.names``)."""
    rng = np.random.default_rng(seed)
    records = synthesize_records(schema, marginals, method, rows, rng)
    return records, decode_records(records, schema, rng)
