"""Three real DistAIM server processes on 127.0.0.1: admission, AIM in MPC, identical opens."""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from feddpsyn.distaim.party import session_modulus, write_client_upload
from feddpsyn.distaim.plan import schedule_of
from feddpsyn.distaim.protocol import Layout, client_vector
from tests.ports import loopback_port

ROOT = Path(__file__).resolve().parents[2]


def _run_parties(session_dir, timeout=150):
    ports = [loopback_port() for _ in range(3)]
    parties = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = [subprocess.Popen([sys.executable, "-m", "feddpsyn.distaim.party", "--pid", str(pid),
                               "--parties", parties, "--session-dir", str(session_dir),
                               "--out", str(session_dir / f"party{pid}.json"), "--timeout",
                               "60"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for pid in range(3)]
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, out.decode()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [json.loads((session_dir / f"party{pid}.json").read_text()) for pid in range(3)]


def test_three_party_distaim_on_loopback(tmp_path):
    rng = np.random.default_rng(3)
    sizes = [3, 4, 2]
    workload = [(0, 1), (0, 2), (1, 2)]
    layout = Layout.for_workload(sizes, workload)
    modulus = session_modulus()
    session = {"session_id": "s1", "domain_sizes": sizes, "workload": workload,
               "modulus": modulus, "epsilon": 1.0, "rho": "1/10", "max_rounds": 3,
               "round_iters": 20, "final_iters": 20, "rows_bound": 1 << 16}
    (tmp_path / "session.json").write_text(json.dumps(session))
    union = []
    for i in range(3):
        a = rng.integers(0, 3, 300)
        records = np.stack([a, (a + rng.integers(0, 2, 300)) % 4, rng.integers(0, 2, 300)], 1)
        union.append(records)
        write_client_upload(tmp_path, "s1", f"c{i}", client_vector(records, layout), modulus)
    # a partial client (missing at party 3) and a tampered one (party 2's share altered)
    write_client_upload(tmp_path, "s1", "partial", client_vector(union[0], layout), modulus,
                        parties=(1, 2))
    write_client_upload(tmp_path, "s1", "tampered", client_vector(union[1], layout), modulus)
    blob = bytearray((tmp_path / "uploads" / "tampered" / "share2.bin").read_bytes())
    blob[0] ^= 1
    (tmp_path / "uploads" / "tampered" / "share2.bin").write_bytes(bytes(blob))

    reports = _run_parties(tmp_path)
    for r in reports:
        assert r["admitted"] == ["c0", "c1", "c2"]
        assert r["excluded"]["partial"].startswith("partial")
        assert r["excluded"]["tampered"].startswith("inconsistent")
        assert r["measurements"] == reports[0]["measurements"]
        assert r["selected"] == reports[0]["selected"]
        assert Fraction(r["rho_spent"]) == Fraction(1, 10)
    truth = np.concatenate(union)
    for m in reports[0]["measurements"]:
        if len(m["clique"]) == 1:
            exact = np.bincount(truth[:, m["clique"][0]], minlength=sizes[m["clique"][0]])
            assert np.all(np.abs(np.array(m["values"]) - exact) < 6 * np.sqrt(m["sigma2"]))


def _certificates(folder: Path) -> dict:
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    for pid in range(3):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=MPyC party {pid}",
            "-keyout", f"p{pid}.key", "-out", f"p{pid}.csr")
        run("x509", "-req", "-in", f"p{pid}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-out", f"p{pid}.crt")
    return {"ca": str(folder / "ca.crt"), "cert": str(folder / "p{pid}.crt"),
            "key": str(folder / "p{pid}.key")}


def test_three_parties_over_mutual_tls(tmp_path):
    sizes, workload = [2, 3], [(0, 1)]
    layout = Layout.for_workload(sizes, workload)
    modulus = session_modulus()
    session = {"session_id": "t1", "domain_sizes": sizes, "workload": workload,
               "modulus": modulus, "epsilon": 1.0, "rho": "1/10", "max_rounds": 1,
               "round_iters": 10, "final_iters": 10, "mpc_tls": _certificates(tmp_path)}
    (tmp_path / "session.json").write_text(json.dumps(session))
    records = np.stack([np.arange(50) % 2, np.arange(50) % 3], 1)
    write_client_upload(tmp_path, "t1", "c0", client_vector(records, layout), modulus)
    reports = _run_parties(tmp_path)
    assert all(r["admitted"] == ["c0"] for r in reports)
    assert all(r["measurements"] == reports[0]["measurements"] for r in reports)


def test_a_lost_peer_aborts_the_others_at_once(tmp_path):
    sizes, workload = [4, 5, 3], [(0, 1), (0, 2), (1, 2)]
    layout = Layout.for_workload(sizes, workload)
    modulus = session_modulus()
    session = {"session_id": "k1", "domain_sizes": sizes, "workload": workload,
               "modulus": modulus, "epsilon": 1.0, "rho": "1/10", "rounds": 200,
               "max_rounds": 200, "round_iters": 10, "final_iters": 10}
    (tmp_path / "session.json").write_text(json.dumps(session))
    rng = np.random.default_rng(5)
    a = rng.integers(0, 4, 20000)
    records = np.stack([a, (a + rng.integers(0, 2, 20000)) % 5, rng.integers(0, 3, 20000)], 1)
    write_client_upload(tmp_path, "k1", "c0", client_vector(records, layout), modulus)
    ports = [loopback_port() for _ in range(3)]
    parties = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = [subprocess.Popen([sys.executable, "-m", "feddpsyn.distaim.party", "--pid", str(pid),
                               "--parties", parties, "--session-dir", str(tmp_path),
                               "--out", str(tmp_path / f"party{pid}.json")],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for pid in range(3)]
    try:
        for proc in procs:  # every party connected: the run is under way
            line = proc.stderr.readline()
            assert b"connected" in line, line
        procs[2].kill()
        for proc in procs[:2]:
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 5, err.decode()[-2000:]
            assert b"disconnected" in err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def _joined(report, round_index):
    arrival = report["participation"]["arrival_round"]
    return [c for c in report["admitted"] if arrival[c] is not None
            and arrival[c] <= round_index]


@pytest.mark.parametrize("rate,schedule", [("1", "deferred"), ("1/2", "deferred"),
                                           ("1/2", "interleaved")])
def test_three_parties_with_sampled_clients(tmp_path, rate, schedule):
    """Participation p < 1 over three real processes: the session completes, the three
    servers open the same values, every measurement is of the clients its round reads (the
    clients joined by round T, deferred; by the round itself, interleaved, after undoing the
    engine's rescaling by the reported noisy sizes), and the ledger ends at exactly rho (the
    noisy sizes included). At p = 1 every round reads every client and no size is taken."""
    rng = np.random.default_rng(11)
    sizes, workload, rounds = [3, 4, 2], [(0, 1), (0, 2), (1, 2)], 2
    layout = Layout.for_workload(sizes, workload)
    modulus = session_modulus()
    session = {"session_id": "p1", "domain_sizes": sizes, "workload": workload,
               "modulus": modulus, "epsilon": 1.0, "rho": "1/4", "rounds": rounds,
               "max_rounds": rounds, "round_iters": 20, "final_iters": 20,
               "rows_bound": 1 << 12, "participation": rate, "schedule": schedule}
    if schedule_of({k: v for k, v in session.items() if k != "schedule"}) == schedule:
        del session["schedule"]  # as a server's plan mapping writes it (distaim.plan)
    (tmp_path / "session.json").write_text(json.dumps(session))
    data = {}
    for i in range(3):  # attribute 0 names the client: a 1-way of it shows who was read
        other = rng.integers(0, 4, 1000)
        data[f"c{i}"] = np.stack([np.full(1000, i), other, (other + rng.integers(0, 2, 1000))
                                  % 2], 1)
        write_client_upload(tmp_path, "p1", f"c{i}", client_vector(data[f"c{i}"], layout),
                            modulus)

    reports = _run_parties(tmp_path)
    first = reports[0]
    for r in reports:
        assert r["admitted"] == ["c0", "c1", "c2"] and r["excluded"] == {}
        assert r["measurements"] == first["measurements"]
        assert r["noisy_sizes"] == first["noisy_sizes"]
        assert r["participation"] == first["participation"]
        assert Fraction(r["rho_spent"]) == Fraction(1, 4)
    assert first["participation"]["schedule"] == schedule
    assert first["participation"]["window"] == rounds
    assert len(first["selected"]) == rounds
    measurements = first["measurements"]
    one_ways = len(sizes)
    assert len(measurements) == one_ways + rounds
    grows = rate != "1" and schedule == "interleaved"
    noisy_sizes = first["noisy_sizes"]
    if grows:
        union = max(noisy_sizes[0], 1.0)
        assert abs(noisy_sizes[0] - 3000) < 200
    else:
        assert noisy_sizes == []
    current = 1  # the index of the noisy size of the data being read
    for k, m in enumerate(measurements):
        round_index = max(0, k - one_ways + 1)  # the 1-ways are round 0
        if rate == "1":
            read = ["c0", "c1", "c2"]
        elif schedule == "deferred":
            read = _joined(first, rounds)
        else:
            read = _joined(first, round_index)
            if round_index > 0 and read != _joined(first, round_index - 1):
                current += 1
        values, sigma2 = np.array(m["values"], dtype=float), m["sigma2"]
        if grows:  # undo the engine's rescaling to the union's noisy size (post-processing)
            assert abs(noisy_sizes[current] - sum(len(data[c]) for c in read)) < 200
            scale = union / max(noisy_sizes[current], 1.0)
            values, sigma2 = values / scale, sigma2 / scale ** 2
        records = (np.concatenate([data[c] for c in read]) if read
                   else np.zeros((0, 3), dtype=np.int64))
        from feddpsyn.synthesis.graphical_model import marginal_counts
        exact = marginal_counts(records, tuple(m["clique"]), sizes).ravel()
        assert np.all(np.abs(values - exact) < 6 * np.sqrt(sigma2)), (k, read)
    if grows:
        assert len(noisy_sizes) == current + 1
