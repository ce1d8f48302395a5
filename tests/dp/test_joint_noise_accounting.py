"""Joint-noise accounting against brute-force enumeration of every bit vector and output."""

import itertools
import math
from fractions import Fraction

import pytest

from feddpsyn.dp.binomial_accounting import (RDP_ORDERS, LossDistribution, PrivacyLossDistribution,
                                             rdp_to_delta, session_delta_of, session_epsilon_of)
from feddpsyn.dp.joint_noise_accounting import (JointNoiseShape, cheapest_uniforms, orders_for,
                                                release_marginals, release_matches, smallest_coins)

SMALL = [JointNoiseShape(6, 1), JointNoiseShape(2, 3), JointNoiseShape(4, 2),
         JointNoiseShape(2, 4),
         # Two widths: uniforms of bits and of bits + 1 in one noise.
         JointNoiseShape(1, 1, wider=1), JointNoiseShape(2, 2, wider=2),
         JointNoiseShape(3, 2, wider=1)]


def brute_pmf(shape):
    """Exact pmf of Z + span/2 by enumerating all 2^K bit vectors with the public weights."""
    weights = shape.weights()
    pmf = [Fraction(0)] * (shape.span + 1)
    for bits in itertools.product((0, 1), repeat=len(weights)):
        pmf[sum(w * b for w, b in zip(weights, bits))] += Fraction(1, 2 ** len(weights))
    return pmf


def brute_laws(shape, shift=1):
    """P (count c) and Q (count c + shift) over outputs 0..span+shift."""
    p = brute_pmf(shape)
    return p + [Fraction(0)] * shift, [Fraction(0)] * shift + p


def brute_delta(p, q, eps, k=1):
    e = Fraction(math.exp(eps))
    total = Fraction(0)
    for xs in itertools.product(range(len(p)), repeat=k):
        pp = math.prod((p[x] for x in xs), start=Fraction(1))
        qq = math.prod((q[x] for x in xs), start=Fraction(1))
        total += max(Fraction(0), pp - e * qq)
    return float(total)


@pytest.mark.parametrize("shape", SMALL, ids=str)
def test_counts_and_variance_equal_enumeration(shape):
    assert len(shape.weights()) == shape.ciphertexts
    assert max(shape.weights()) == 1 << (shape.bits - 1 + (1 if shape.wider else 0))
    pmf = brute_pmf(shape)
    total = 2 ** shape.ciphertexts
    assert [Fraction(c, total) for c in shape.counts()] == pmf
    mean = Fraction(shape.span, 2)
    assert sum(p * (x - mean) ** 2 for x, p in enumerate(pmf)) == shape.variance
    # Hoeffding's proxy is at least the variance (a bounded noise is sub-Gaussian with it).
    assert shape.hoeffding_proxy >= shape.variance


def test_a_shape_of_two_widths_needs_an_even_number_of_uniforms():
    with pytest.raises(ValueError, match="even"):
        JointNoiseShape(2, 3, wider=1)
    assert JointNoiseShape(26, 6, wider=12).label == "26x6+12x7"
    assert JointNoiseShape(32, 8).label == "32x8"


@pytest.mark.parametrize("shape", SMALL, ids=str)
@pytest.mark.parametrize("shift", [1, 2])
@pytest.mark.parametrize("eps", [0.0, 0.4, 1.0, 2.0])
def test_single_release_delta_equals_enumeration(shape, shift, eps):
    p, q = brute_laws(shape, shift)
    exact = brute_delta(p, q, eps)
    computed = LossDistribution.from_counts(shape.counts(), shift).delta(eps)
    assert exact <= computed <= exact * (1 + 1e-8) + 1e-15
    assert brute_delta(q, p, eps) == pytest.approx(exact, rel=1e-12, abs=1e-300)  # symmetric


def test_coin_shape_uses_the_binomial_pair():
    shape = JointNoiseShape(12, 1)
    fast, exact = shape.pair(), LossDistribution.from_counts(shape.counts())
    assert fast.infinite == exact.infinite == 2.0 ** -12
    assert fast.losses == pytest.approx(exact.losses, rel=1e-12)
    assert fast.log_masses == pytest.approx(exact.log_masses, rel=1e-12)


@pytest.mark.parametrize("shape", SMALL[1:], ids=str)
@pytest.mark.parametrize("eps", [0.3, 1.2])
def test_composed_pld_bounds_the_enumerated_product(shape, eps):
    p, q = brute_laws(shape)
    exact = brute_delta(p, q, eps, k=2)
    pld = PrivacyLossDistribution.of(shape.pair(), grid=1e-5).self_compose(2)
    assert exact <= pld.delta(eps) <= exact + 1e-3 * exact + 1e-6


def brute_conditioned_renyi(p, q, order, tail):
    """D_a(P|E || Q) with E built as documented: drop Q = 0 points, then the largest losses
    while the dropped finite mass is <= tail."""
    points = [x for x in range(len(p)) if p[x] > 0 and q[x] > 0]
    points.sort(key=lambda x: -(math.log(p[x]) - math.log(q[x])))
    dropped, cut = Fraction(0), 0
    for x in points:
        if dropped + p[x] > Fraction(tail):
            break
        dropped += p[x]
        cut += 1
    kept = points[cut:]
    mass = sum(p[x] for x in kept)
    s = sum(float(p[x] / mass) ** order * float(q[x]) ** (1 - order) for x in kept)
    failure = float(1 - mass)
    return math.log(s) / (order - 1), failure


@pytest.mark.parametrize("shape", SMALL, ids=str)
@pytest.mark.parametrize("tail", [0.0, 0.01, 0.05])
def test_conditioned_renyi_and_failure_equal_enumeration(shape, tail):
    p, q = brute_laws(shape)
    pair = shape.pair()
    orders = (1.5, 2.0, 5.0, 20.0)
    curve = pair.conditioned_renyi(orders, tail)
    for a in orders:
        value, failure = brute_conditioned_renyi(p, q, a, tail)
        assert curve[a] == pytest.approx(value, rel=1e-8, abs=1e-14)
        assert curve[a] >= value
    assert pair.failure(tail) == pytest.approx(failure, rel=1e-8, abs=1e-300)
    assert pair.failure(tail) >= failure


@pytest.mark.parametrize("shape", SMALL[1:], ids=str)
@pytest.mark.parametrize("tail", [0.0, 0.02])
def test_session_rule_bounds_the_enumerated_composition(shape, tail):
    """Two releases of the same count query (a record's neighbours differ in both), plus a
    zCDP part: the conditioning rule's delta is above the exact product's at every eps."""
    p, q = brute_laws(shape)
    for eps in (0.5, 1.5, 3.0):
        exact = brute_delta(p, q, eps, k=2)
        assert session_delta_of([(shape.pair(), 2, tail)], 0, eps) >= exact
        assert (session_delta_of([(shape.pair(), 2, tail)], 0.01, eps)
                >= session_delta_of([(shape.pair(), 2, tail)], 0, eps))


def test_session_epsilon_of_holds_by_a_sound_route():
    parts = [(JointNoiseShape(24, 5).pair(), 3, 1e-12), (JointNoiseShape(400, 1).pair(), 2, 0.0)]
    eps = session_epsilon_of(parts, 0.002, 1e-6)
    assert 0 < eps < math.inf
    curve = {a: 0.002 * a for a in RDP_ORDERS}
    for pair, k, tail in parts:
        for a, d in pair.conditioned_renyi(RDP_ORDERS, tail).items():
            curve[a] += k * d
    failure = sum(k * pair.failure(tail) for pair, k, tail in parts)
    pld = PrivacyLossDistribution.of(parts[0][0]).self_compose(3).compose(
        PrivacyLossDistribution.of(parts[1][0]).self_compose(2))
    by_rdp = rdp_to_delta(curve, eps) + failure
    assert min(by_rdp, pld.delta(eps) + 1e-6) <= 1e-6 * (1 + 1e-6)


def test_smallest_coins_is_minimal_and_near_four_sigma2():
    rho, marginals = Fraction(3, 1000), 12
    orders = orders_for(Fraction(3, 100), 1e-5)
    shape = smallest_coins(marginals, rho, orders)
    assert release_matches(shape, marginals, rho, orders)
    assert not release_matches(JointNoiseShape(shape.uniforms - 2, 1), marginals, rho, orders)
    sigma2 = Fraction(marginals) / (2 * rho)
    assert 1 <= shape.variance / sigma2 <= Fraction(105, 100)


def test_cheapest_uniforms_respects_the_variance_cap_and_matches():
    rho, marginals = Fraction(3, 1000), 12
    orders = orders_for(Fraction(3, 100), 1e-5)
    sigma2 = Fraction(marginals) / (2 * rho)
    shape = cheapest_uniforms(marginals, rho, orders, 1e-12, sigma2 * Fraction(11, 10))
    assert shape.variance <= sigma2 * Fraction(11, 10)
    assert release_matches(shape, marginals, rho, orders, 1e-12)
    assert shape.ciphertexts < smallest_coins(marginals, rho, orders).ciphertexts / 20
    # one bit fewer per uniform never matches (the scan found the least width)
    assert not release_matches(JointNoiseShape(shape.uniforms, shape.bits - 1), marginals,
                               rho, orders, 1e-12)


def test_release_marginals_reads_the_plan():
    assert release_marginals(Fraction(1, 100), Fraction(600)) == 12
    with pytest.raises(ValueError):
        release_marginals(Fraction(1, 100), Fraction(601, 2))


def test_fed_heart_demo_session_keeps_its_epsilon_with_joint_noise():
    """The demo's plan (eps 1, delta 1e-5, em with 4 rounds): each release's matched noise,
    composed with em's pure rounds by the pessimistic PLD, spends the planned eps 1 and no
    more (calibrated), on over a tenth more rho than the zCDP conversion gives."""
    from feddpsyn.dp.accounting import eps_delta_to_rho
    from feddpsyn.params.privacy_record import accounted_epsilon
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.session_plan import SessionPlan

    schema = Schema.load("params/schemas/fed_heart_disease.schema.json")
    plan = SessionPlan.build(PlanRequest(schema, 1.0, 1e-5, 1143, selection="em", rounds=4,
                                         noise="auto"))
    assert plan.accounting == "pld"
    assert 0.98 <= accounted_epsilon(plan) <= 1.0
    assert plan.rho_total > eps_delta_to_rho(1.0, plan.delta_conversion) * Fraction(11, 10)
    joint = [r for r in plan.releases if r.joint is not None]
    assert joint
    for release in joint:  # each joint shape publishes less variance than two servers'
        assert release.joint.variance < 2 * release.sigma2
