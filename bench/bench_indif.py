"""Benchmark Primitive 2 (InDif by bit planes): cost per cell, against one table lookup of the
same input width measured in the same run, and the extrapolated full pass for a data set.

Run: .venv/bin/python bench/bench_indif.py [--bits 16] [--cells 64] [--total-cells 11926]
(11,926 = Adult's two-way cells at 10 bins; Fed-Heart-Disease has 1,601 with --bits 11.)
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from concrete import fhe  # noqa: E402

from crypto.indif import compile_indif_chunk, indif_from_planes  # noqa: E402


def timed_run(circuit, *args) -> tuple[float, object]:
    encrypted = circuit.encrypt(*args)
    started = time.perf_counter()
    out = circuit.run(encrypted)
    return time.perf_counter() - started, circuit.decrypt(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bits", type=int, default=16)
    parser.add_argument("--cells", type=int, default=64)
    parser.add_argument("--total-cells", type=int, default=11926)
    parser.add_argument("--p-error", type=float, default=2.0 ** -40)
    args = parser.parse_args()
    k, cells = args.bits, args.cells

    t = time.perf_counter()
    circuit = compile_indif_chunk(cells, k, args.p_error)
    circuit.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    setup = time.perf_counter() - t
    rng = np.random.default_rng(0)
    d = rng.integers(-(2 ** (k - 2)), 2 ** (k - 2), cells)
    c = rng.integers(0, 2 ** k, cells)
    m = (d + 2 ** (k - 1) - c) % 2 ** k
    seconds, planes = timed_run(circuit, m, c)
    exact = indif_from_planes(planes) == int(np.abs(d).sum())
    pbs = circuit.statistics.get("programmable_bootstrap_count", 0)

    # Baseline: one lookup on a k-bit encrypted value per cell, same run, same p_error.
    table = fhe.LookupTable([abs(v - 2 ** (k - 1)) for v in range(2 ** k)])
    baseline = fhe.Compiler(lambda x: table[x], {"x": "encrypted"})
    try:
        t = time.perf_counter()
        lookup = baseline.compile([np.zeros(cells, dtype=np.int64),
                                   np.full(cells, 2 ** k - 1, dtype=np.int64)],
                                  fhe.Configuration(p_error=args.p_error, show_progress=False))
        lookup.keygen(seed=secrets.randbits(64))
        lookup_setup = time.perf_counter() - t
        lookup_seconds, _ = timed_run(lookup, (m + c) % 2 ** k)
        baseline_text = (f"one {k}-bit lookup per cell: {lookup_seconds / cells * 1e3:.1f} ms/cell "
                         f"(setup {lookup_setup:.1f} s); P2 / lookup = "
                         f"{seconds / lookup_seconds:.2f}x")
    except RuntimeError as exc:
        baseline_text = f"one {k}-bit lookup per cell: does not compile here ({exc})"

    per_cell = seconds / cells
    print(f"P2 at k={k}: {pbs / cells:.0f} bootstraps/cell, setup (compile+keygen) {setup:.1f} s, "
          f"{per_cell * 1e3:.0f} ms/cell, exact: {exact}")
    print(baseline_text)
    print(f"extrapolated to {args.total_cells} cells: {per_cell * args.total_cells / 60:.1f} min "
          f"(linear in cells; measured on {cells}); FedDPSyn anchor: 260 s for P2 on an RTX A6000")


if __name__ == "__main__":
    main()
