"""The joint noise through both servers as real processes on 127.0.0.1: a session at eps 1
whose releases carry one noise neither server knows; the published counts minus the true
union's follow the stated shape exactly (chi-square against its exact pmf, alpha 1e-6), with
the stated per-count variance, half of what two servers' Gaussians would add."""

import csv
from fractions import Fraction
from itertools import accumulate
from pathlib import Path

import httpx
import numpy as np
import pytest
from scipy import stats

from feddpsyn.common import wire
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import encode_csv
from tests.served import serve

# Five 6-valued columns: 30 one-way cells, 10 pairs x 36 = 360 two-way cells.
COLUMNS = [f"c{i}" for i in range(5)]
VALUES = ["a", "b", "c", "d", "e", "f"]
SCHEMA = {"name": "joint", "columns": [{"name": c, "type": "categorical", "i2s": VALUES}
                                       for c in COLUMNS]}
CLIENTS = ["alice", "bob", "carol"]
ALPHA = 1e-6


def write_csvs(directory: Path) -> dict[str, Path]:
    rng = np.random.default_rng(7)  # the data only; every noise comes from the servers' CSPRNG
    paths = {}
    for i, client in enumerate(CLIENTS):
        path = directory / f"{client}.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(COLUMNS)
            for _ in range(60 + 20 * i):
                w.writerow(rng.choice(VALUES, size=len(COLUMNS)))
        paths[client] = path
    return paths


def session_request(noise: str = "auto") -> wire.SessionCreate:
    return wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6),
                              max_rows=1000, noise=noise,
                              selection=wire.SelectionRequest(mode="none"))


@pytest.fixture(scope="module")
def joint_session(tmp_path_factory):
    csvs = write_csvs(tmp_path_factory.mktemp("csv"))
    with serve(tmp_path_factory, session_request(), csvs, timeout=600) as (
            ks, state, created, document):
        peer = (state / "peer.token").read_text().strip()
        yield ks, peer, created, csvs, document


def truth(csvs) -> np.ndarray:
    schema = Schema.from_dict(SCHEMA)
    records = np.concatenate([encode_csv(p, schema).records for p in csvs.values()])
    return MarginalLayout.build(schema.domain_sizes).counts(records)


def errors_by_release(document, csvs) -> dict[str, np.ndarray]:
    schema = Schema.from_dict(SCHEMA)
    layout = MarginalLayout.build(schema.domain_sizes)
    exact = truth(csvs)
    index = {n: i for i, n in enumerate(schema.names)}
    out = {}
    for release in document.releases:
        errs = []
        for marginal in release.marginals.values():
            slot = layout.slot(tuple(index[a] for a in marginal.attrs))
            errs.append(np.array(marginal.counts) - exact[slot.offset:slot.offset + slot.size])
        out[release.release] = np.concatenate(errs)
    return out


def chi_square_against_shape(errors: np.ndarray, shape: JointNoiseShape) -> float:
    """p-value of the errors against the shape's exact pmf, in bins of >= 5 expected."""
    counts = shape.counts()
    total = sum(counts)
    pmf = np.array(counts, dtype=float) / total
    support = np.arange(len(counts)) - shape.span // 2
    cdf = np.array(list(accumulate(pmf)))
    bins = max(2, min(8, len(errors) // 10))
    edges = [support[int(np.searchsorted(cdf, q))] for q in np.arange(1, bins) / bins]
    edges = sorted(set(edges))
    expected = []
    observed = []
    lo = -np.inf
    for edge in edges + [np.inf]:
        mask = (support > lo) & (support <= edge)
        expected.append(pmf[mask].sum() * len(errors))
        observed.append(np.sum((errors > lo) & (errors <= edge)))
        lo = edge
    assert min(expected) >= 5
    return float(stats.chisquare(observed, expected).pvalue)


def test_both_releases_carry_one_joint_noise_and_say_so(joint_session):
    _, _, created, _, document = joint_session
    assert document.noise["kind"] == "joint"
    for plan, release in zip(created.session.releases, document.releases):
        assert plan.noise == release.noise == "joint"
        shape = JointNoiseShape(release.joint.uniforms, release.joint.bits)
        assert Fraction(release.per_count_variance) == shape.variance
        assert document.noise["per_count_variance"][release.release] == float(shape.variance)
        # Half the two-server noise or better, by construction of the rule.
        assert shape.variance < 2 * Fraction(plan.sigma2)
        assert release.sigma2_per_server == "0"
    accounting = document.accounting
    assert created.session.joint_delta > 0
    assert accounting.delta_total <= accounting.delta


def test_published_minus_true_follows_the_stated_shape_exactly(joint_session):
    _, _, _, csvs, document = joint_session
    errors = errors_by_release(document, csvs)
    for release in document.releases:
        shape = JointNoiseShape(release.joint.uniforms, release.joint.bits)
        e = errors[release.release]
        assert np.abs(e).max() <= shape.span // 2  # a hard bound: no wrap, no mask left in
        assert chi_square_against_shape(e, shape) > ALPHA
    # The variance test on the larger release: Var(published - true) = per_count_variance
    # within the 1e-6 band of the sample variance (4th moment of the exact pmf), and far
    # from what two servers' Gaussians would give.
    two = next(r for r in document.releases if r.release == "two_way")
    shape = JointNoiseShape(two.joint.uniforms, two.joint.bits)
    e = errors["two_way"].astype(float)
    counts = np.array(shape.counts(), dtype=float)
    pmf = counts / counts.sum()
    support = np.arange(len(counts)) - shape.span // 2
    var = float(shape.variance)
    mu4 = float(np.sum(pmf * support.astype(float) ** 4))
    sd_of_var = np.sqrt((mu4 - var ** 2) / len(e))
    z = stats.norm.isf(ALPHA / 2)
    assert abs(np.mean(e ** 2) - var) <= z * sd_of_var
    plan_sigma2 = float(Fraction(next(r for r in joint_session[2].session.releases
                                      if r.name == "two_way").sigma2))
    assert abs(np.mean(e ** 2) - 2 * plan_sigma2) > z * sd_of_var


def test_the_key_servers_bits_are_one_set_per_chunk(joint_session):
    ks, peer, created, _, _ = joint_session
    sid = created.session.session_id
    headers = {"Authorization": f"Bearer {peer}"}
    base = f"{ks.url}/peer/sessions/{sid}/releases"
    first = httpx.get(f"{base}/one_way/coins/0", headers=headers, timeout=120)
    again = httpx.get(f"{base}/one_way/coins/0", headers=headers, timeout=120)
    assert first.status_code == 200 and first.content == again.content
    assert httpx.get(f"{base}/one_way/coins/999", headers=headers).status_code == 404
    assert httpx.get(f"{base}/nope/coins/0", headers=headers).status_code == 404
    assert httpx.get(f"{base}/one_way/coins/0").status_code in (401, 403)


def test_a_large_eps_session_stays_two_server(joint_session, tmp_path):
    """At eps 50 a matching joint shape is tiny: its conditioning mass would take far more
    than its share of delta (or its variance would not be lower); the rule keeps the two
    servers' Gaussians."""
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.session_plan import SessionPlan

    plan = SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), 50.0, 1e-6, 1000,
                                         parameter_set="test-small", noise="auto",
                                         selection="none"))
    assert [r.noise_kind for r in plan.releases] == ["two-server", "two-server"]
    assert plan.joint_columns == 0
    with pytest.raises(ValueError, match="cannot carry the joint noise"):
        SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), 50.0, 1e-6, 1000,
                                      parameter_set="test-small", noise="joint", selection="none"))


def test_synthesis_weighs_each_count_by_its_stated_variance(joint_session):
    from feddpsyn.synthesis import marginals_from_release

    _, _, _, _, document = joint_session
    _, noisy = marginals_from_release(document)
    stated = {r.release: float(Fraction(r.per_count_variance)) for r in document.releases}
    assert {m.variance for m in noisy if len(m.attrs) == 1} == {stated["one_way"]}
    assert {m.variance for m in noisy if len(m.attrs) == 2} == {stated["two_way"]}
