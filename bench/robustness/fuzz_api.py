"""The long API fuzz: the suite's schemathesis tests with many more examples per operation.

Run: .venv/bin/python bench/robustness/fuzz_api.py [--examples 500]
Prints the pytest summary; any 5xx or schema violation fails with a reproducing curl line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=500)
    args = parser.parse_args()
    env = {**os.environ, "FEDDPSYN_FUZZ_EXAMPLES": str(args.examples)}
    started = time.time()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                             "tests/servers/test_api_fuzz.py"], cwd=ROOT, env=env, timeout=7200)
    print(f"{args.examples} examples per operation and credential: "
          f"{'no failures' if result.returncode == 0 else 'FAILURES'} in {time.time() - started:.0f} s")
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
