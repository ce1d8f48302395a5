"""Malicious clients against three real DistAIM server processes on 127.0.0.1.

Each bad upload is well formed (its three shares pass the degree check) but does not hold a
table's counts: a negative count, a count near 2^80 (beyond the comparisons' range), and
marginals that disagree on the row count. Each must be excluded with its own record by the
in-MPC validation, the session must complete with the honest clients, and every opened
measurement must be the honest clients' counts plus the planned noise.
"""

import json
from pathlib import Path

import numpy as np

from feddpsyn.distaim.party import session_modulus, write_client_upload
from feddpsyn.distaim.protocol import Layout, client_vector
from feddpsyn.synthesis.graphical_model import marginal_counts
from tests.distaim.test_distaim_loopback import _run_parties

ROOT = Path(__file__).resolve().parents[2]
SIZES = [3, 4, 2]
WORKLOAD = [(0, 1), (0, 2), (1, 2)]


def _records(rng, n):
    a = rng.integers(0, 3, n)
    return np.stack([a, (a + rng.integers(0, 2, n)) % 4, rng.integers(0, 2, n)], 1)


def test_malicious_client_shares_are_excluded_and_the_release_is_the_honest_counts(tmp_path):
    rng = np.random.default_rng(11)
    layout = Layout.for_workload(SIZES, WORKLOAD)
    modulus = session_modulus()
    session = {"session_id": "m1", "domain_sizes": SIZES, "workload": WORKLOAD,
               "modulus": modulus, "epsilon": 1.0, "rho": "1/10", "rounds": 3,
               "max_rounds": 3, "rows_bound": 1000, "delta_reserve": "1/100000000"}
    (tmp_path / "session.json").write_text(json.dumps(session))
    honest = [_records(rng, 300) for _ in range(3)]
    for i, records in enumerate(honest):
        write_client_upload(tmp_path, "m1", f"h{i}", client_vector(records, layout), modulus)
    offsets = layout.offsets
    base = client_vector(_records(rng, 200), layout).astype(object)
    start, _ = offsets[(0, 1)]
    # negative: one 2-way cell -1 and its neighbour +1 (every marginal still sums to 200)
    negative = base.copy()
    negative[start + 1] += negative[start] + 1
    negative[start] = -1
    # out of range: + 2^80 in one cell and - 2^80 in another of the same marginal (sums kept)
    huge = base.copy()
    huge[start] += 1 << 80
    huge[start + 1] -= 1 << 80
    # inconsistent: the (1, 2) marginal counts one row more than the others
    inconsistent = base.copy()
    inconsistent[offsets[(1, 2)][0]] += 1
    bad = {"negative": negative, "out-of-range": huge, "inconsistent": inconsistent}
    for cid, vector in bad.items():
        write_client_upload(tmp_path, "m1", cid, [int(v) % modulus for v in vector], modulus)

    reports = _run_parties(tmp_path, timeout=300)
    truth = np.concatenate(honest)
    for r in reports:
        assert r["admitted"] == ["h0", "h1", "h2"]
        assert r["excluded"]["negative"].startswith("invalid: a count outside")
        assert r["excluded"]["out-of-range"].startswith("invalid: a count outside")
        assert r["excluded"]["inconsistent"].startswith("invalid: its marginals do not")
        assert r["measurements"] == reports[0]["measurements"]
        assert r["within_reserve"] is True
        assert 0 < r["validation_extra_delta"] < 1e-15
    measured = reports[0]["measurements"]
    assert len(measured) == 3 + 3  # the 1-ways, then exactly T = 3 rounds (fixed-T mode)
    for m in measured:
        exact = marginal_counts(truth, tuple(m["clique"]), SIZES)
        z = (np.array(m["values"]) - exact) / np.sqrt(m["sigma2"])
        # each cell: honest counts + N_Z(0, sigma2); |z| >= 6 has probability < 2e-9 a cell
        assert np.all(np.abs(z) < 6), (m["clique"], z)
