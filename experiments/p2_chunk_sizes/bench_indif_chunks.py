"""P2 with mixed chunk sizes against 16-cell chunks only, in the same run: 8/16/32 (the
selection sets' version 1) and 8/16/24/32 (version 2, ``CHUNK_SIZES``).

Both configurations are the service's own module (``crypto.noisy_scores``: ``indif_<s>`` per
chunk size and ``add``), compiled for the data set's widths (Fed-Heart-Disease: k = 11, 11
score digits; Adult: 16, 16).
A deterministic sample of the data set's pairs is scored under encryption with each: every
pair cut by ``params.selection_plan.chunk_sizes_for`` (sizes 8/16/32) or into 16-cell
chunks, every chunk's P2 run and the chunk scores added, and every decrypted score checked
against the plaintext model. Printed: the optimiser's complexity over all pairs (machine
independent), the measured seconds on the sample (ratio to the baseline of the same run) and
the full pass extrapolated from seconds per modelled complexity.

Run: .venv/bin/python experiments/p2_chunk_sizes/bench_indif_chunks.py [--every 6] [--dataset adult]

8/16/24/32 against 8/16/32 (quiet 2-core machine, ``experiments/p2_chunk_sizes/README.md``): the
Fed-Heart-Disease sample in x0.84 of the time (41.7 s against 49.7 s), all pairs modelled
at x0.94, every score exact; compile and keys 20 s against 19 s.

Measured (2 cores shared with a two-process benchmark): 11 of the 66 pairs, 234
cells; 16-cell chunks 142.7 s, mixed 95.5 s: x0.669 measured, x0.766 modelled; every score
exact. Full P2 extrapolated 15.3 -> 10.1 min under that load.
Adult (`--dataset adult --every 15`: 7 pairs, 1,299 cells, k = 16): mixed chunks 0.279
s/cell on a quiet machine, every score exact (after the add-width fix), full P2 extrapolated
56.4 min; the 16-cell baseline of that run shared the machine with the test suite, so its
ratio (x0.462) overstates the gain (modelled: x0.799).
With P2's XORs packed two bits a lookup (``crypto.indif.XOR_PACK``): every score
exact at Fed-Heart's widths in both configurations (modelled x0.835; the run shared the 2 cores
with about six other processes, so its seconds are not comparable). Since P2 takes M's base-4
digits (``crypto.indif``), ``experiments/replaced_constructions/bench_p2_digits.py`` times
it against the one-ciphertext form in one run.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from feddpsyn.crypto.indif import (  # noqa: E402
    ADD_COMPLEXITY,
    CHUNK_COMPLEXITY,
    digits_of,
    indif_exact,
    indif_offset,
)
from feddpsyn.crypto.noisy_scores import NoisyScoreShape, compile_noisy_scores  # noqa: E402
from feddpsyn.crypto.private_selection import indif_name  # noqa: E402
from feddpsyn.demo import dataset  # noqa: E402
from feddpsyn.params.layout import MarginalLayout  # noqa: E402
from feddpsyn.params.parameter_sets import CHUNK_SIZES  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.selection_plan import chunk_sizes_for  # noqa: E402

WIDTHS = {  # (k, score digits) as the session plan derives them from the union's rows
    "fed_heart_disease": (11, 11),   # 740 rows
    "adult": (16, 16),               # 32,561 rows
}


def modelled(pair_cells: list[int], sizes: tuple[int, ...]) -> float:
    total = 0.0
    for cells in pair_cells:
        chunks = chunk_sizes_for(cells, sizes)
        total += sum(CHUNK_COMPLEXITY[c] for c in chunks) + ADD_COMPLEXITY * (len(chunks) - 1)
    return total


def score_pairs(module, pair_cells: list[int], sizes: tuple[int, ...], k: int,
                rng: np.random.Generator) -> float:
    """Seconds of encrypted work to score every pair; asserts every decrypted score."""
    seconds = 0.0
    for cells in pair_cells:
        counts = rng.integers(0, 60, cells)
        expected = np.clip(counts + rng.integers(-20, 21, cells), 0, None)
        mask = rng.integers(0, 2 ** k, cells)
        total, start = None, 0
        for size in chunk_sizes_for(cells, sizes):
            part = slice(start, min(start + size, cells))
            used = part.stop - part.start
            masked = np.zeros(size, dtype=np.int64)
            offset = np.full(size, 1 << (k - 1), dtype=np.int64)  # padding: |C - K| = 0
            masked[:used] = (counts[part] + mask[part]) % 2 ** k
            offset[:used] = indif_offset(mask[part], expected[part], k)
            function = getattr(module, indif_name(size))
            encrypted, _ = function.encrypt(digits_of(masked, k), None)
            started = time.perf_counter()
            score = function.run(encrypted, digits_of(offset, k))
            if total is not None:
                score = module.add.run(total, score)
            seconds += time.perf_counter() - started
            total, start = score, start + size
        digits = module.add.decrypt(total)
        value = sum(int(d) << j for j, d in enumerate(digits))
        assert value == indif_exact(counts, expected), "P2 disagrees with its model"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=6, help="score every n-th pair")
    parser.add_argument("--dataset", default="fed_heart_disease", choices=sorted(WIDTHS))
    args = parser.parse_args()
    k, digits = WIDTHS[args.dataset]
    schema = Schema.load(dataset(args.dataset).schema)
    pair_cells = [s.size for s in MarginalLayout.build(schema.domain_sizes).two_way]
    sample = pair_cells[::args.every]
    configs = {"16 only": (16,), "8/16/32": (8, 16, 32), "8/16/24/32": CHUNK_SIZES}
    print(f"{args.dataset}: {len(pair_cells)} pairs, {sum(pair_cells)} cells; sample of "
          f"{len(sample)} pairs, {sum(sample)} cells; k = {k}")
    results = {}
    for name, sizes in configs.items():
        used = tuple(sorted({c for cells in pair_cells for c in chunk_sizes_for(cells, sizes)}))
        started = time.perf_counter()
        module = compile_noisy_scores(NoisyScoreShape(k, used, digits, 4), 2.0 ** -40)
        module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
        setup = time.perf_counter() - started
        seconds = score_pairs(module, sample, sizes, k, np.random.default_rng(1))
        results[name] = (modelled(pair_cells, sizes), modelled(sample, sizes), seconds)
        print(f"{name:8s}: compile+keygen {setup:.0f} s; sample {seconds:.1f} s "
              f"({seconds / sum(sample):.3f} s/cell); all scores exact", flush=True)
    base_full, base_sample, base_seconds = results["16 only"]
    for name, (full, part, seconds) in results.items():
        print(f"{name:8s}: complexity (all pairs) x{full / base_full:.3f}; measured (sample) "
              f"x{seconds / base_seconds:.3f}; full P2 extrapolated "
              f"{seconds * full / part / 60:.1f} min (seconds per unit of modelled complexity "
              "on the sample, times all pairs')")


if __name__ == "__main__":
    main()
