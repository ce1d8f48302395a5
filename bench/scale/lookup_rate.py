"""This machine's speed in the unit the encrypted selection spends: one core's milliseconds per
3-bit table lookup (a programmable bootstrap) at the default selection set's p_error.

Why: the demo's wall time is mostly Primitive 2's lookups (11-12 a cell at Fed-Heart-Disease's
width), and the same code on the same VM took 328 s one day and 438 s another, key
generation 29 s against 44 s (``bench/results/demo_time/``). A wall time is only comparable
across days next to the machine's rate on that day, measured the same way just before.

What runs: one circuit of ``LOOKUPS`` independent lookups, 3 bits wide unless asked (the
width of P2's carries and sign lookups), compiled and keyed once, then run ``REPEATS`` times
with one thread; the rate is the best run over the lookups (the least disturbed). Run it in
a process whose OpenMP and Rayon threads are pinned to one (``rate_in_subprocess`` does), so
that the figure is a core's.

    .venv/bin/python bench/scale/lookup_rate.py       # prints {"ms_per_lookup": ...}
    .venv/bin/python bench/scale/lookup_rate.py 3 4 5 6   # one line per lookup width

The second form answers a design question of Primitive 2: its digits are base 4 so that every
lookup is 3 bits wide; wider digits need fewer lookups a cell but wider ones, each dearer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from feddpsyn.params.parameter_sets import DEFAULT_SELECTION_SET, get_selection_set  # noqa: E402

LOOKUPS = 64
REPEATS = 3
BITS = 3
# The p_error P2's module is compiled at (the default selection set's), so that the rate is
# the one a session's lookups run at.
P_ERROR = get_selection_set(DEFAULT_SELECTION_SET).p_error


def measure(bits: int = BITS) -> dict:
    """The best of ``REPEATS`` runs of ``LOOKUPS`` lookups of ``bits`` bits, in ms a lookup."""
    import numpy as np
    from concrete import fhe

    table = fhe.LookupTable([(7 * i + 3) % (1 << bits) for i in range(1 << bits)])

    def lookups(x):
        return table[x]

    values = np.arange(LOOKUPS) % (1 << bits)
    configuration = fhe.Configuration(p_error=P_ERROR, global_p_error=None,
                                      show_progress=False, compress_evaluation_keys=True)
    circuit = fhe.Compiler(lookups, {"x": "encrypted"}).compile([values], configuration)
    circuit.keygen()
    argument = circuit.encrypt(values)
    keys = circuit.client.evaluation_keys
    out = circuit.server.run(argument, evaluation_keys=keys)  # the first run loads the keys
    if not np.array_equal(circuit.decrypt(out), [table[int(v)] for v in values]):
        raise RuntimeError("the calibration circuit decrypted to wrong values")
    runs = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        circuit.server.run(argument, evaluation_keys=keys)
        runs.append(time.perf_counter() - started)
    return {"ms_per_lookup": round(1000 * min(runs) / LOOKUPS, 2), "lookup_bits": bits,
            "p_error": f"2^{math.log2(P_ERROR):.0f}", "lookups": LOOKUPS,
            "runs_s": [round(r, 3) for r in runs]}


def rate_in_subprocess() -> dict:
    """:func:`measure` in a fresh process with one OpenMP and one Rayon thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", RAYON_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(Path(__file__).resolve())], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the lookup-rate calibration failed: {done.stderr[-1000:]}")
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bits", nargs="*", type=int, default=[BITS],
                        help="lookup widths to measure (default 3)")
    for bits in parser.parse_args().bits:
        if not 1 <= bits <= 8:
            raise SystemExit(f"lookup width {bits}: choose 1 to 8 bits")
        print(json.dumps(measure(bits)), flush=True)


if __name__ == "__main__":
    main()
