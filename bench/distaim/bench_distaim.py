"""DistAIM on Adult (all 2-way workload): bytes per client upload and per-round time per party.

    .venv/bin/python bench/distaim/bench_distaim.py --clients 4 --rounds 3 --out /tmp/distaim-bench

Splits Adult uniformly over the clients, writes each client's seed-compressed shares into a
session directory, runs the three servers as processes on 127.0.0.1 for ``--rounds`` AIM
rounds (after the 1-way initialisation) and prints the upload size and the per-step times of
every party (select: secure L1 scores of all candidates + in-MPC exponential mechanism;
measure: in-MPC Gaussian on the chosen marginal + opening).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.distaim.distaim_common import adult, all_pairs, free_port  # noqa: E402
from feddpsyn.distaim.party import session_modulus, write_client_upload  # noqa: E402
from feddpsyn.distaim.protocol import Layout, client_vector  # noqa: E402
from feddpsyn.dp.accounting import eps_delta_to_rho  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/distaim-bench"))
    args = parser.parse_args()
    records, domain = adult()
    sizes = list(domain)
    workload = all_pairs(len(sizes))
    layout = Layout.for_workload(sizes, workload)
    modulus = session_modulus()
    args.out.mkdir(parents=True, exist_ok=True)
    rho = eps_delta_to_rho(args.epsilon, args.delta)
    session = {"session_id": "bench", "domain_sizes": sizes, "workload": workload,
               "modulus": modulus, "epsilon": args.epsilon, "rho": str(rho),
               "max_rounds": args.rounds, "rounds": args.rounds, "round_iters": 100,
               "final_iters": 300,
               "rows_bound": 1 << 17}
    (args.out / "session.json").write_text(json.dumps(session))
    assignment = np.random.default_rng(0).integers(0, args.clients, len(records))
    upload = []
    t = time.time()
    for i in range(args.clients):
        vec = client_vector(records[assignment == i], layout)
        upload.append(write_client_upload(args.out, "bench", f"c{i}", vec, modulus))
    share_seconds = (time.time() - t) / args.clients
    print(f"Adult: {len(records)} rows, {len(sizes)} attributes, {len(layout.cliques)} marginals, "
          f"{layout.length} cells per client vector")
    print(f"upload per client: {upload[0]} bytes ({upload[0] / 1e6:.2f} MB; explicit 3-share "
          f"form would be {3 * layout.length * ((modulus.bit_length() + 7) // 8)} bytes); "
          f"sharing {share_seconds:.2f} s per client")
    ports = [free_port() for _ in range(3)]
    parties = ",".join(f"127.0.0.1:{p}" for p in ports)
    t = time.time()
    procs = [subprocess.Popen([sys.executable, "-m", "feddpsyn.distaim.party", "--pid", str(pid),
                               "--parties", parties, "--session-dir", str(args.out),
                               "--out", str(args.out / f"party{pid}.json"),
                               "--timeout", "600"], cwd=ROOT)
             for pid in range(3)]
    for proc in procs:
        proc.wait(timeout=3600)
        if proc.returncode:
            raise SystemExit(f"party exited with {proc.returncode}")
    print(f"three parties finished in {time.time() - t:.1f} s")
    for pid in range(3):
        rep = json.loads((args.out / f"party{pid}.json").read_text())
        sel = [x for x in rep["timings"] if x["step"] == "select"]
        mea = [x for x in rep["timings"] if x["step"] == "measure"]
        print(f"party {pid}: phases {{{', '.join(f'{k}: {v:.1f}' for k, v in rep['phases'].items())}}} s; "
              f"select {np.mean([x['seconds'] for x in sel]):.2f} s wall / "
              f"{np.mean([x['cpu_seconds'] for x in sel]):.2f} s CPU per round "
              f"({sel[0]['candidates']} candidates, {sel[0]['cells']} cells); measure "
              f"{1e3 * sum(x['seconds'] for x in mea) / sum(x['cells'] for x in mea):.2f} ms "
              f"wall / {1e3 * sum(x['cpu_seconds'] for x in mea) / sum(x['cells'] for x in mea):.2f}"
              f" ms CPU per noisy cell ({sum(x['cells'] for x in mea)} cells)")
    print("selected:", rep["selected"], "rho spent", rep["rho_spent"],
          "extra delta", rep["selection_extra_delta"] + rep["measurement_extra_delta"])
    from feddpsyn.synthesis.aim import PlainOracle, aim
    from feddpsyn.synthesis.evaluate import workload_error
    from feddpsyn.synthesis.graphical_model import GraphicalModel
    from feddpsyn.synthesis.marginals import NoisyMarginal
    model = GraphicalModel(sizes)
    model.fit([NoisyMarginal(tuple(m["clique"]), np.asarray(m["values"], dtype=float).reshape(
        [sizes[a] for a in m["clique"]]), m["sigma2"]) for m in rep["measurements"]], 1000)
    distaim_error = workload_error(records, model.sample(len(records),
                                                         np.random.default_rng(0)), sizes)
    t = time.time()
    central = aim(PlainOracle(records, sizes), sizes, workload, rho, rounds=args.rounds,
                  max_rounds=args.rounds, round_iters=100, final_iters=300,
                  rng=np.random.default_rng(0))
    central_error = workload_error(records, central.synthesize(len(records)), sizes)
    print(f"workload error DistAIM {distaim_error} ({len(rep['selected'])} rounds) vs central "
          f"AIM {central_error} ({len(central.selected)} rounds, {time.time() - t:.1f} s "
          "in plaintext)")


if __name__ == "__main__":
    main()
