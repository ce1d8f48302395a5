"""Adult's selection module compiled with different P2 chunk-size sets: per function, its
bootstraps per bootstrap key, and each key's FFT work, from concrete's compilation feedback
(compile only, no keys generated; a few minutes per set).

Why: a bootstrap's cost follows the key it runs on, and in a composed module the widest
lookup of a partition sets that key for every function in it. Adult's 32-cell chunks (plane
sums up to 96) put P2's bit extractions on a level-9 key (GLWE 5 x 256); without them the
same partition takes a level-3 key. The work per key is the external products' FFT work,
n_in x levels x (k + 1)^2 x N log2 N: a model of cost, not a timing.

Run: .venv/bin/python experiments/p2_chunk_sizes/bench_p2_partitions.py 8,16,32 8,16 16
"""

import collections
import json
import math
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale.bench_scaleout import adult_plan  # noqa: E402
from feddpsyn.crypto.private_selection import PrivateSelectionShape, compile_private_selection  # noqa: E402
from feddpsyn.crypto.tfhe_permute_and_flip import thresholds  # noqa: E402


def key_work(p: dict) -> float:
    n, levels, k, size = (p["inputLweDimension"], p["levelCount"], p["glweDimension"],
                          p["polynomialSize"])
    return n * levels * (k + 1) ** 2 * size * math.log2(size)


def main() -> None:
    sel = adult_plan().selection
    sets = [tuple(int(x) for x in s.split(",")) for s in sys.argv[1:]] or [(8, 16, 32), (8, 16)]
    for sizes in sets:
        shape = PrivateSelectionShape(count_bits=sel.indif_bits, chunk_sizes=sizes,
                                      selection=sel.shape)
        started = time.perf_counter()
        module = compile_private_selection(shape, thresholds(sel.shape, sel.step.epsilon),
                                           sel.p_error)
        seconds = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as tmp:
            module.server.save(Path(tmp) / "server.zip")
            saved = zipfile.ZipFile(Path(tmp) / "server.zip")
            feedback = json.loads(saved.read("compilation_feedback.json"))
            specs = json.loads(saved.read("client.specs.json"))
        keys = {b["id"]: b["params"] for b in specs["keyset"]["lweBootstrapKeys"]}
        print(f"== chunk sizes {sizes}: compiled in {seconds:.0f} s; bootstrap keys "
              f"{feedback['totalBootstrapKeysSize'] / 1e6:.0f} MB")
        for i, p in keys.items():
            print(f"   key {i}: n={p['inputLweDimension']} GLWE {p['glweDimension']} x "
                  f"{p['polynomialSize']} level {p['levelCount']} base {p['baseLog']}: work "
                  f"{key_work(p) / 1e6:.0f}M")
        for circuit in feedback["circuitFeedbacks"]:
            count = collections.Counter()
            for s in circuit["statistics"]:
                if s.get("operation") == "PBS":
                    count[s["keys"][0][1]] += s.get("count", 1)
            work = sum(key_work(keys[i]) * n for i, n in count.items())
            print(f"   {circuit['name']}: bootstraps by key {dict(count)}, work {work / 1e9:.1f}G")


if __name__ == "__main__":
    main()
