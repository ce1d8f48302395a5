"""Upload layout, participation sampling and the MPC oracle driving synthesis.aim in-process."""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime
from feddpsyn.distaim.oracle import MpcOracle, score_penalty
from feddpsyn.distaim.protocol import Layout, Participation, aggregate, client_vector
from feddpsyn.synthesis.aim import aim
from feddpsyn.synthesis.graphical_model import marginal_counts

ALPHA = 1e-6


def test_layout_covers_the_completed_workload():
    layout = Layout.for_workload([3, 4, 2], [(0, 1), (1, 2)])
    assert layout.cliques == ((0,), (1,), (2,), (0, 1), (1, 2))
    assert layout.length == 3 + 4 + 2 + 12 + 8
    records = np.array([[0, 1, 1], [2, 3, 0], [2, 3, 1]])
    vec = client_vector(records, layout)
    start, n = layout.offsets[(0, 1)]
    assert vec[start:start + n].tolist() == marginal_counts(records, (0, 1), [3, 4, 2]).tolist()
    assert aggregate({"a": [1, 2], "b": [5, 6], "c": [9, 9]}, ["a", "b"], 7, 2) == [6, 1]


def test_participation_is_deterministic_and_has_rate_p():
    clients = [f"c{i}" for i in range(4000)]
    half = Participation(b"s" * 32, Fraction(1, 2))
    first = [half.arrival(c) for c in clients]
    assert first == [Participation(b"s" * 32, Fraction(1, 2)).arrival(c) for c in clients]
    joined0 = sum(a == 0 for a in first)
    assert stats.binomtest(joined0, len(clients), 0.5).pvalue > ALPHA
    assert half.joined_by(clients, 10_000) == clients
    assert all(Participation(b"x" * 32, Fraction(1)).arrival(c) == 0 for c in clients[:10])


@pytest.mark.parametrize("k", [1, 4, 7])
def test_the_range_test_is_zero_exactly_on_its_range(k):
    """distaim.validation's per-value test: its residual is zero iff the value lies in
    [0, 2^k) as an integer, at and around both ends, for field elements near p and 2^80,
    over several draws of the secret bits (a wrong bitwise comparison would make some
    in-range value's residual non-zero)."""
    from feddpsyn.distaim.validation import _range_residuals
    values = list(range(-(1 << k) - 3, (1 << (k + 1)) + 4)) + [1 << 80, -(1 << 80)]
    for seed in (b"a", b"b", b"c"):
        rt = local_runtime(prss_seed=seed)
        secint = rt.SecInt(SECINT_BITS)
        p = secint.field.modulus
        shared = secint.array(secint.field.array(np.array([v % p for v in values],
                                                          dtype=object)))
        residuals = rt.run(rt.output(rt.run(_range_residuals(rt, secint, shared, k))))
        assert [int(r) == 0 for r in residuals] == [0 <= v < (1 << k) for v in values]


def test_mpc_oracle_runs_aim_and_spends_exactly_rho():
    rng = np.random.default_rng(0)
    sizes, workload = [3, 4, 2], [(0, 1), (0, 2), (1, 2)]
    a = rng.integers(0, 3, 3000)
    records = np.stack([a, (a + rng.integers(0, 2, 3000)) % 4, rng.integers(0, 2, 3000)], 1)
    layout = Layout.for_workload(sizes, workload)
    rt = local_runtime(prss_seed=b"oracle")
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    vec = client_vector(records, layout)
    seen = []

    def totals_at_round(t):
        seen.append(t)
        return secint.array(secint.field.array(vec.astype(object)))

    oracle = MpcOracle(rt, secint, em, None, layout, 1.0, totals_at_round=totals_at_round,
                       grows=True)
    result = aim(oracle, sizes, workload, Fraction(1, 2), rounds=4, max_rounds=4)
    assert result.rho_spent == Fraction(1, 2)
    # round 0's data, the union's (its noisy size), then one data set per round, each with
    # its noisy size (a new array every call: the data "changed" every round)
    assert seen == [0, None, 1, 2, 3, 4]
    assert len(result.notes["noisy_sizes"]) == 2 + 4
    assert all(abs(n - 3000) < 6 * 40 for n in result.notes["noisy_sizes"])
    assert 0 < oracle.measure_tv < Fraction(1, 10**12)
    assert 0 < result.delta_spent < Fraction(1, 10**10)
    # the 1-way measurements are the counts plus noise of the planned sigma, rescaled by
    # the union's noisy size over round 0's (post-processing)
    union, current = result.notes["noisy_sizes"][:2]
    for m in result.measurements[:3]:
        exact = marginal_counts(records, m.attrs, sizes)
        raw, sd = m.counts.ravel() * current / union, np.sqrt(m.variance) * current / union
        assert np.all(np.abs(raw - exact) < 6 * sd)


@pytest.mark.parametrize("grid_bits", [8, 0])
def test_secure_scores_equal_the_plaintext_integer_scores(grid_bits):
    rng = np.random.default_rng(1)
    sizes, workload = [3, 4, 2], [(0, 1), (1, 2)]
    layout = Layout.for_workload(sizes, workload)
    records = rng.integers(0, 2, (500, 3))
    vec = client_vector(records, layout)
    rt = local_runtime(prss_seed=b"scores")
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    oracle = MpcOracle(rt, secint, em, secint.array(secint.field.array(vec.astype(object))),
                       layout, 1.0, score_grid_bits=grid_bits)
    cands = list(layout.cliques)
    scale = 1 << grid_bits
    answers = [np.rint(rng.random(layout.offsets[c][1]) * 80 * scale).astype(np.int64)
               for c in cands]
    weights = [1, 2, 3, 4, 5]
    secret, cells = oracle.secure_scores(cands, answers, weights, Fraction(900))
    opened = [int(v) for v in rt.run(rt.output(secret))]
    expected = []
    for c, m, w in zip(cands, answers, weights):
        x = marginal_counts(records, c, sizes)
        expected.append(w * int(np.abs(x * scale - m).sum())
                        - score_penalty(w, 30.0, len(x), grid_bits))
    assert opened == expected and cells == layout.length



def _fixed_oracle(seed: bytes, grid_bits: int = 8):
    rng = np.random.default_rng(1)
    sizes, workload = [3, 4, 2], [(0, 1), (1, 2)]
    layout = Layout.for_workload(sizes, workload)
    records = rng.integers(0, 2, (500, 3))
    vec = client_vector(records, layout)
    rt = local_runtime(prss_seed=seed)
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    oracle = MpcOracle(rt, secint, em, secint.array(secint.field.array(vec.astype(object))),
                       layout, 1.0, score_grid_bits=grid_bits)
    return rt, secint, em, oracle, records, sizes, layout


def test_measure_opens_exact_counts_plus_the_same_noise_bit_for_bit():
    """Where the randomness is fixed (the PRSS key), the opened measurement equals the
    plaintext reference: the exact counts plus the noise the same randomness draws."""
    from feddpsyn.distaim.secure_noise import GaussianPlan, secure_discrete_gaussian
    rt, _, _, oracle, records, sizes, _ = _fixed_oracle(b"same-randomness")
    opened = oracle.measure((0, 1), Fraction(400))
    ref_rt = local_runtime(prss_seed=b"same-randomness")
    noise = ref_rt.run(ref_rt.output(secure_discrete_gaussian(
        ref_rt, ref_rt.SecInt(SECINT_BITS), GaussianPlan.for_sigma2(Fraction(400)), 12)))
    reference = marginal_counts(records, (0, 1), sizes) + np.array([int(v) for v in noise])
    assert opened.tolist() == reference.tolist()


@pytest.mark.parametrize("grid_bits", [8, 0])
def test_select_equals_the_mechanism_on_the_plaintext_scores(grid_bits):
    """The in-MPC selection's opened index equals the same sampler run on the plaintext
    integer scores with the same randomness (the scores' own random bits consumed first)."""
    from feddpsyn.distaim.secure_selection import SelectionPlan, secure_exponential_mechanism
    rng = np.random.default_rng(5)
    for trial in range(3):
        seed = b"select-%d-%d" % (grid_bits, trial)
        rt, _, _, oracle, records, sizes, layout = _fixed_oracle(seed, grid_bits)
        cands = list(layout.cliques)
        answers = [rng.random(layout.offsets[c][1]) * 60 for c in cands]
        weights = [1, 2, 3, 1, 2]
        pick = oracle.select(cands, answers, weights, Fraction(900), Fraction(1, 2))
        ref_rt, secint, em, ref, *_ = _fixed_oracle(seed, grid_bits)
        grid = [np.rint(a * (1 << grid_bits)).astype(np.int64).tolist() for a in answers]
        ref.secure_scores(cands, grid, weights, Fraction(900))  # same randomness consumed
        plain = [w * int(np.abs(marginal_counts(records, c, sizes) * (1 << grid_bits)
                                - np.array(m)).sum())
                 - score_penalty(w, 30.0, len(m), grid_bits)
                 for c, m, w in zip(cands, grid, weights)]
        plan = SelectionPlan.build(Fraction(1, 2), max(weights) << grid_bits, len(cands))
        secret = secure_exponential_mechanism(ref_rt, secint.array(secint.field.array(
            np.array(plain, dtype=object))), plan, em)
        assert int(ref_rt.run(ref_rt.output(secret))) == pick
