"""The rules that give a release, a split release's groups and noisy-greedy's scores their
joint noise, or keep them two-server.

Claim: every shape returned here matches its budget at the orders of the session's
conversion (its conditioned Renyi curve, M-fold, below a rho there), leaves room in the
count width for its hard bound, and excludes at most its share of delta in conditioning
mass; a release or score noise the rule refuses stays two-server. The argument is
``docs/privacy-plan.md``, sections "The joint release", "Noisy-greedy's joint scores" and
"The split 2-way release". The shapes depend on the public plan only (budgets, widths,
``max_rows``), so both servers find the same ones.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING

from feddpsyn.crypto.joint_noise import check_room, choose_shape
from feddpsyn.crypto.noisy_scores import PASS_LOOKUP_BITS
from feddpsyn.dp.gaussian_domination import mu_at_most, shape_dominated
from feddpsyn.dp.joint_noise_accounting import MAX_BITS as MAX_SHAPE_BITS
from feddpsyn.dp.joint_noise_accounting import (
    JointNoiseShape,
    orders_for,
    release_marginals,
    release_matches,
)
from feddpsyn.dp.privsyn_allocation import allocation_weight, allocation_with_floors
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.parameter_sets import ParameterSet

if TYPE_CHECKING:
    from feddpsyn.params.release_spec import ReleaseSpec

__all__ = ["GAUSSIAN_BOUND_SHARE", "bound_marginals", "smallest_pair_budget",
           "bound_eta", "dominated_shape",
           "dominated_envelope", "JOINT_TAIL", "JOINT_MAX_BITS_PER_CALL", "JOINT_VARIANCE_CAP",
           "JOINT_DELTA_SHARE",
           "SCORE_LOOKUP_BITS", "SCORE_MAX_UNIFORMS", "fewest_matching", "joint_shape_for",
           "conditioning_refusal", "pair_failure_cap", "group_shape_for", "envelope_shape_for",
           "least_variance_within", "run_time_group_shape", "score_shape_for"]

# The conditioning tail of a uniforms-shaped joint noise, per count: the largest losses up to
# this mass are excluded and charged to delta (``dp.binomial_accounting``).
JOINT_TAIL = 1e-12
# One P1 call holds chunk_cells x K encrypted bits of the key server's; concrete expands them
# at run time (~36 KB each: 256 cells x 252 bits peaked at 2.8 GB in one call), so a call is
# capped here: about 1.2 GB, so that the compute server's concurrent chunks (one a core) stay
# well inside a few GB. At the default set's 64 cells this is 512 bits a count (its split
# release's envelope takes at most 384: ``ParameterSet.envelope_bits``).
JOINT_MAX_BITS_PER_CALL = 1 << 15
# Where no coin count fits the caps, uniforms are searched up to this multiple of sigma2 (the
# matching coins' variance is 1.03-1.12 sigma2, DESIGN.md; the uniforms' slack over them 1.1).
JOINT_VARIANCE_CAP = Fraction(5, 4)
# A joint release's conditioning mass may take at most this share of the conversion's delta.
JOINT_DELTA_SHARE = 0.01
# A split release accounted by its Gaussian bound (``dp.gaussian_domination``): the share of
# the conversion's delta its eta may take, over every pair. A sum of uniforms has a bounded
# support, so its largest losses exceed any Gaussian's; eta buys them. At eta 1e-8 per count
# a shape of 64 uniforms of 4 bits is dominated by a Gaussian of 0.965 its sigma, 30 of 5
# bits by 0.919 (measured with ``dp.gaussian_domination.dominated``); a tenth of delta costs
# the session about 2% of eps at delta 1e-5.
GAUSSIAN_BOUND_SHARE = 0.1
# noisy-greedy's joint scores: the widest lookup their carry chain uses
# (``crypto.noisy_scores.PASS_LOOKUP_BITS``: the uniforms are added in passes that keep it
# there). Measured at the servers' plans (``experiments/joint_scores/bench_joint_scores.py``,
# results in ``experiments/joint_scores/results/joint_scores.json``; Adult, 17 lookups a
# score): compressed evaluation keys 130.6 MB with the two-server ``noise``, 130.8 MB with
# 5-bit lookups (12 x 8 and 14 x 7 uniforms), 307.1 MB with 6-bit (16 x 6); a score's call
# 0.37 / 0.54 / 1.03 s once the keys are in use, small next to P2.
SCORE_LOOKUP_BITS = PASS_LOOKUP_BITS
# At most two passes (15 uniforms a pass fit): the shapes 6-bit lookups allowed in one pass.
SCORE_MAX_UNIFORMS = 30


def fewest_matching(most: int, matches) -> int:
    """The fewest even number of uniforms in (0, most] that ``matches`` (a predicate on the
    count), given that ``most`` matches: bisection, since a sum of more uniforms of one width
    only lowers the conditioned divergence."""
    lo, hi = 0, most  # invariant: hi matches, lo does not (0: none)
    while hi - lo > 2:  # bounded: the gap halves each pass
        mid = (lo + hi) // 4 * 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if matches(mid) else (mid, hi)
    return hi


@functools.lru_cache(maxsize=256)
def _matching_shape(marginals: int, rho: Fraction, rho_total: Fraction,
                    delta_conversion: float, max_bits: int, max_span: int,
                    max_variance: Fraction) -> JointNoiseShape:
    # Cached: the plan's fixed-point iteration and restarts ask for the same shapes.
    return choose_shape(marginals, rho, rho_total, delta_conversion, JOINT_TAIL,
                        max_bits=max_bits, max_span=max_span, max_variance=max_variance)


def joint_shape_for(spec: ReleaseSpec, rho_total: Fraction, delta_conversion: float,
                    max_rows: int, parameters: ParameterSet) -> tuple[JointNoiseShape | None, str]:
    """The joint shape a release takes under the rule (``docs/privacy-plan.md``, "The joint
    release"), or None with the reason it stays two-server."""
    return _shape_by_rule(release_marginals(spec.rho, spec.sigma2), spec.rho, spec.sigma2,
                          JOINT_DELTA_SHARE * delta_conversion, rho_total, delta_conversion,
                          max_rows, parameters)


def conditioning_refusal(shape: JointNoiseShape, marginals: int, failure_cap: float) -> str:
    """Why a joint shape over ``marginals`` marginals is refused for the mass its accounting
    excludes (the points only one neighbour can produce: a delta term) above ``failure_cap``;
    "" when it is within."""
    failure = marginals * shape.pair().failure(JOINT_TAIL)
    if failure > failure_cap:
        return (f"its conditioning mass {failure:.3g} exceeds its share of delta "
                f"({failure_cap:.3g})")
    return ""


def pair_failure_cap(delta_conversion: float, pairs: int) -> float:
    """The conditioning mass a split release's shape may exclude per marginal: the session
    reserves ``pairs`` times this (every pair kept, whatever the split), JOINT_DELTA_SHARE
    of the conversion's delta in all."""
    return JOINT_DELTA_SHARE * delta_conversion / pairs


def group_shape_for(rho_per_marginal: Fraction, rho_total: Fraction, delta_conversion: float,
                    max_rows: int, parameters: ParameterSet, failure_cap: float,
                    require_gain: bool = True, max_bits: int | None = None,
                    max_span: int | None = None) -> tuple[JointNoiseShape | None, str]:
    """The rule for one group of a split release: the joint shape matching a budget of
    ``rho_per_marginal`` per marginal (its M-fold curve is then below a M rho_per_marginal
    at the conversion's orders, whatever M), its Gaussian reference sigma2 =
    1 / (2 rho_per_marginal), and a conditioning mass of at most ``failure_cap`` per
    marginal (:func:`pair_failure_cap`). ``require_gain``: refuse a shape whose variance is
    not below 2 sigma2 (a run-time group is judged with its whole release instead:
    :func:`params.run_time.split_release`). ``max_bits`` and ``max_span`` narrow the search
    (a run-time group searches within the envelope)."""
    rho = Fraction(rho_per_marginal)
    return _shape_by_rule(1, rho, 1 / (2 * rho), failure_cap, rho_total, delta_conversion,
                          max_rows, parameters, require_gain, max_bits, max_span)


def _shape_by_rule(marginals: int, rho: Fraction, sigma2: Fraction, failure_cap: float,
                   rho_total: Fraction, delta_conversion: float, max_rows: int,
                   parameters: ParameterSet, require_gain: bool = True,
                   bits_cap: int | None = None,
                   span_cap: int | None = None) -> tuple[JointNoiseShape | None, str]:
    # The search is capped by the rule itself (a shape beyond these would be refused), which
    # also keeps it fast where the budget is tiny and a matching noise huge.
    max_bits = JOINT_MAX_BITS_PER_CALL // parameters.chunk_cells
    max_span = 2 * ((1 << (parameters.count_bits - 1)) - 1 - max_rows)
    max_bits = max_bits if bits_cap is None else min(max_bits, bits_cap)
    max_span = max_span if span_cap is None else min(max_span, span_cap)
    if max_span < 2:
        return None, f"max_rows {max_rows} leaves no room in {parameters.count_bits}-bit counts"
    try:
        shape = _matching_shape(marginals, rho, rho_total, delta_conversion,
                                max_bits, max_span, JOINT_VARIANCE_CAP * sigma2)
    except ValueError as exc:
        return None, (f"no joint shape within {max_bits} encrypted bits per count and span "
                      f"{max_span} matches its budget ({exc})")
    if require_gain and shape.variance >= 2 * sigma2:
        # At large eps a matching shape is so small that its variance is not below the two
        # Gaussians' (and its conditioning mass is large): nothing to gain.
        return None, (f"the joint shape's variance {float(shape.variance):.3g} is not below "
                      f"the two-server noise's {float(2 * sigma2):.3g}")
    refused = conditioning_refusal(shape, marginals, failure_cap)
    if refused:
        return None, refused
    try:
        check_room(shape, max_rows, parameters.count_bits)
    except ValueError as exc:
        return None, str(exc)
    if parameters.chunk_cells * shape.ciphertexts > JOINT_MAX_BITS_PER_CALL:
        return None, (f"{parameters.chunk_cells} cells x {shape.ciphertexts} encrypted bits "
                      f"per call exceed {JOINT_MAX_BITS_PER_CALL}")
    return shape, ""


def envelope_shape_for(layout: MarginalLayout, rho: Fraction, rho_total: Fraction,
                       delta_conversion: float, max_rows: int,
                       parameters: ParameterSet) -> tuple[JointNoiseShape | None, str]:
    """The widest joint shape a split 2-way release of ``rho`` may need: the group rule
    (:func:`group_shape_for`) at the smallest per-marginal budget any selection gives, the
    smallest pair's when every pair is kept, rho w_min / W. The circuit's width, the key
    server's bits and the plausibility floor are sized for it; a run-time group that
    would not fit it falls back (:func:`params.run_time.resolve`)."""
    weights = [allocation_weight(slot.size) for slot in layout.two_way]
    smallest = Fraction(rho) * min(weights) / sum(weights, start=Fraction(0))
    return group_shape_for(smallest, rho_total, delta_conversion, max_rows, parameters,
                           pair_failure_cap(delta_conversion, len(layout.two_way)))


def least_variance_within(envelope: JointNoiseShape, columns: int, top_weight: int,
                          rho_per_marginal: Fraction, orders) -> JointNoiseShape:
    """The matching shape of least variance among those the envelope's circuit can carry
    (at most ``columns`` bits, span at most the envelope's, weights at most ``top_weight``):
    per width, the fewest uniforms that match (bisection: a sum of more uniforms only lowers
    the conditioned divergence); the envelope itself if nothing smaller matches."""
    best = envelope
    if not release_matches(envelope, 1, rho_per_marginal, orders, JOINT_TAIL):
        raise ValueError("the envelope does not match this budget")
    for bits in range(1, top_weight.bit_length() + 1):  # bounded: one pass per width
        most = min(columns // bits, envelope.span // ((1 << bits) - 1)) // 2 * 2
        if most < 2 or not release_matches(JointNoiseShape(most, bits), 1, rho_per_marginal,
                                           orders, JOINT_TAIL):
            continue
        shape = JointNoiseShape(fewest_matching(most, lambda n: release_matches(
            JointNoiseShape(n, bits), 1, rho_per_marginal, orders, JOINT_TAIL)), bits)
        if shape.variance < best.variance:
            best = shape
    return best


@functools.lru_cache(maxsize=1024)
def run_time_group_shape(rho_per_marginal: Fraction, rho_total: Fraction,
                         delta_conversion: float, max_rows: int, parameters: ParameterSet,
                         failure_cap: float, envelope: JointNoiseShape, columns: int,
                         top_weight: int) -> tuple[JointNoiseShape | None, str]:
    """A run-time group's shape (``docs/privacy-plan.md``, "The split 2-way release"), or
    None with the reason: the rule's own shape (:func:`group_shape_for`, no gain required:
    the release is judged whole) if the envelope's circuit carries it (at most ``columns``
    bits, weights at most ``top_weight``, span at most the envelope's), else the
    least-variance matching shape within it (:func:`least_variance_within`). Whatever the
    route, the shape is **verified** here, not assumed: its conditioned curve below a
    rho_per_marginal at every order of the conversion (at JOINT_TAIL, the tail it is charged
    with), its conditioning mass at most ``failure_cap``, its room in the count width.
    Cached: both servers resolve the release on every chunk request."""
    orders = orders_for(rho_total, delta_conversion)
    shape, why = group_shape_for(rho_per_marginal, rho_total, delta_conversion, max_rows,
                                 parameters, failure_cap, require_gain=False)
    if shape is None or not (shape.ciphertexts <= columns and shape.span <= envelope.span
                             and max(shape.weights()) <= top_weight):
        try:
            shape = least_variance_within(envelope, columns, top_weight, rho_per_marginal,
                                          orders)
        except ValueError as exc:
            return None, why or str(exc)
    if not release_matches(shape, 1, rho_per_marginal, orders, JOINT_TAIL):
        return None, "its shape does not match its budget at the conversion's orders"
    if shape.pair().failure(JOINT_TAIL) > failure_cap:
        return None, why or "its conditioning mass exceeds its share of delta"
    try:
        check_room(shape, max_rows, parameters.count_bits)
    except ValueError as exc:
        return None, str(exc)
    return shape, ""


@functools.lru_cache(maxsize=256)
def score_shape_for(pairs: int, rho: Fraction, rho_total: Fraction, delta_conversion: float
                    ) -> tuple[JointNoiseShape | None, str]:
    """noisy-greedy's score noise under the rule of ``docs/privacy-plan.md`` ("Noisy-greedy's
    joint scores"): the joint shape of least variance whose ``pairs``-fold conditioned curve
    is below a rho at every order of the conversion (each score has sensitivity 1; the
    two-server plan's sigma2 is pairs / (2 rho)), among sums of at most 30 uniforms (any of
    them fits: ``crypto.noisy_scores.NoisyScoreShape.pass_sizes`` keeps every carry lookup within
    SCORE_LOOKUP_BITS, in at most two passes); it is refused (None, with the reason:
    the scores stay two-server) when its variance is not below the two-server scores'
    2 sigma2 or its conditioning mass exceeds JOINT_DELTA_SHARE of the conversion's delta.
    Per width only the fewest matching uniforms can be the answer (more uniforms only lower
    the conditioned divergence, and raise the variance), found by bisection; widths are
    tried upwards until even two uniforms exceed the best variance. Cached: both servers and
    every rebuild of the plan ask for the same shape."""
    rho = Fraction(rho)
    sigma2 = Fraction(pairs) / (2 * rho)
    orders = orders_for(rho_total, delta_conversion)

    def matches(uniforms: int, bits: int) -> bool:
        return release_matches(JointNoiseShape(uniforms, bits), pairs, rho, orders, JOINT_TAIL)

    best = None
    for bits in range(1, MAX_SHAPE_BITS + 1):  # bounded: one pass per width
        limit = 2 * sigma2 if best is None else best.variance
        if JointNoiseShape(2, bits).variance >= limit:
            break
        most = 2
        while (most + 2 <= SCORE_MAX_UNIFORMS
               and JointNoiseShape(most + 2, bits).variance < limit):  # bounded by the cap
            most += 2
        if not matches(most, bits):
            continue
        shape = JointNoiseShape(fewest_matching(most, lambda n: matches(n, bits)), bits)
        if best is None or shape.variance < best.variance:
            best = shape
    if best is None:
        return None, (f"no sum of at most {SCORE_MAX_UNIFORMS} uniforms with variance below "
                      f"the two-server scores' {float(2 * sigma2):.3g} matches the selection's "
                      "budget")
    refused = conditioning_refusal(best, pairs, JOINT_DELTA_SHARE * delta_conversion)
    if refused:
        return None, refused
    return best, ""


def bound_eta(delta_conversion: float, marginals: int) -> float:
    """eta per count of a split release accounted by its Gaussian bound: the release's
    GAUSSIAN_BOUND_SHARE of the conversion's delta over every marginal it may hold
    (:func:`bound_marginals`: whatever the selection keeps, its etas add up to at most the
    share)."""
    return GAUSSIAN_BOUND_SHARE * delta_conversion / marginals


def bound_marginals(layout: MarginalLayout, one_way_topup: bool) -> int:
    """How many marginals a split 2-way release under the Gaussian bound may hold: every
    pair, and every 1-way where the release tops the 1-ways up (``params.run_time``)."""
    return len(layout.two_way) + (len(layout.one_way) if one_way_topup else 0)


def smallest_pair_budget(layout: MarginalLayout, rho: Fraction,
                         one_way_rho: Fraction | None = None) -> Fraction:
    """The smallest per-marginal budget a split 2-way release of ``rho`` ever gives a pair:
    every pair kept, the smallest pair's c^(2/3) share; where the release also tops up the
    1-ways (``one_way_rho``: what their first release gave them, one_way_rho / d each), the
    smallest pair's share of the water-fill with every 1-way taking part
    (``dp.privsyn_allocation.allocation_with_floors``). Fewer pairs kept, or fewer 1-ways
    topped up, only raise the water level: every selection's pairs get at least this."""
    weights = {slot.key: allocation_weight(slot.size) for slot in layout.two_way}
    if one_way_rho is None:
        return Fraction(rho) * min(weights.values()) / sum(weights.values(), start=Fraction(0))
    floor = Fraction(one_way_rho) / len(layout.one_way)
    weights |= {slot.key: allocation_weight(slot.size) for slot in layout.one_way}
    extra = allocation_with_floors(weights, {slot.key: floor for slot in layout.one_way}, rho)
    return min(extra[slot.key] for slot in layout.two_way)


@functools.lru_cache(maxsize=4096)
def dominated_shape(rho_per_marginal: Fraction, eta: float, max_bits: int, max_span: int,
                    top_weight: int, max_variance: Fraction | None = None,
                    mixed: bool = True) -> JointNoiseShape | None:
    """The joint shape of least variance that is (sqrt(2 rho), eta)-Gaussian-dominated
    (``dp.gaussian_domination``) within the caps (at most ``max_bits`` encrypted bits per
    count, span at most ``max_span``, weights at most ``top_weight``), or None, among the
    shapes of one width and (``mixed``) of two adjacent widths (:func:`_mixed_at`); shapes
    of variance above ``max_variance`` (default: twice the Gaussian's, what the two servers'
    own noises give) are not searched. Per width (and per count of wider uniforms) only the fewest
    dominated uniforms can be the answer (one more uniform is independent noise added: a
    post-processing, so domination is kept), found by bisection. Cached: both servers
    resolve the release on every chunk request."""
    mu = mu_at_most(rho_per_marginal)

    def ok(uniforms: int, bits: int, wider: int = 0) -> bool:
        return shape_dominated(uniforms, bits, mu, eta, wider)

    best = None
    # The variance cap also bounds the pmfs the search builds.
    limit = 1 / rho_per_marginal if max_variance is None else Fraction(max_variance)
    widest = min(MAX_SHAPE_BITS, top_weight.bit_length())
    for bits in range(1, widest + 1):  # bounded
        if best is not None and JointNoiseShape(2, bits).variance >= best.variance:
            break  # wider uniforms only add variance from here on
        one = Fraction((4 ** bits) - 1, 12)
        most = min(max_bits // bits, max_span // ((1 << bits) - 1),
                   int(limit / one)) // 2 * 2
        if most >= 2 and ok(most, bits):
            shape = JointNoiseShape(fewest_matching(most, lambda n, b=bits: ok(n, b)), bits)
            if best is None or shape.variance < best.variance:
                best = shape
    if not mixed or best is None:
        return best
    # Two widths beside the best one-width shape's: its own with the next, and the one
    # below with its own (where the caps bind, the best mixed shape is there: measured on
    # the served tables' group budgets; the others only cost pmfs).
    one_width = best
    for bits in (one_width.bits - 1, one_width.bits):  # bounded: two searches
        if 1 <= bits < widest:
            two = _mixed_at(bits, ok, max_bits, max_span, limit)
            if two is not None and two.variance < best.variance:
                best = two
    return best


# How many counts of wider uniforms beyond the least dominated one a mixed search tries:
# the fewest narrower uniforms at a larger count can give less variance (a few steps cover
# it on the served tables' budgets; the answer is checked whatever it is).
_MIXED_STEPS = 3


def _mixed_at(bits: int, ok, max_bits: int, max_span: int,
              limit: Fraction) -> JointNoiseShape | None:
    """The least-variance dominated shape of ``bits``-bit uniforms with an even number of
    (bits + 1)-bit ones beside them, within the caps, or None. Along the shapes that fill
    the caps with narrower uniforms, the fewest wider ones that are dominated is found by
    bisection (more wider uniforms at the caps only add variance, hence dominate sooner),
    then at it and a few counts above, the fewest narrower uniforms (bisection)."""
    narrow, wide = (4 ** bits - 1) / Fraction(12), (4 ** (bits + 1) - 1) / Fraction(12)

    def filling(wider: int) -> int:
        """The most narrower uniforms (even, so the count of all stays even) beside
        ``wider``."""
        room = min((max_bits - wider * (bits + 1)) // bits,
                   (max_span - wider * ((1 << (bits + 1)) - 1)) // ((1 << bits) - 1))
        if limit - wider * wide < 0:
            return 0
        return min(room, int((limit - wider * wide) / narrow)) // 2 * 2

    def full_ok(wider: int) -> bool:
        n = filling(wider)
        return n >= 2 and ok(n, bits, wider)

    top = 0  # the most wider uniforms with room for two narrower ones beside them
    for wider in range(2, max_bits // (bits + 1) + 1, 2):  # bounded by the bits per count
        if filling(wider) < 2:
            break
        top = wider
    if top == 0 or not full_ok(top):
        return None
    lo, hi = 0, top  # invariant: hi is dominated at the caps, lo is not (0: the one-width)
    while hi - lo > 2:  # bounded: the gap halves each pass
        mid = (lo + hi) // 4 * 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if full_ok(mid) else (mid, hi)
    best = None
    for wider in range(hi, min(top, hi + 2 * _MIXED_STEPS) + 1, 2):  # bounded
        if not full_ok(wider):
            continue
        fewest = fewest_matching(filling(wider), lambda n, w=wider: ok(n, bits, w))
        shape = JointNoiseShape(fewest, bits, wider)
        if best is None or shape.variance < best.variance:
            best = shape
    return best


def dominated_envelope(layout: MarginalLayout, rho: Fraction, delta_conversion: float,
                       max_rows: int, parameters: ParameterSet,
                       one_way_rho: Fraction | None = None
                       ) -> tuple[JointNoiseShape | None, str]:
    """The envelope of a split 2-way release accounted by its Gaussian bound, or None with the
    reason (the release is then two-server). It is the dominated shape (:func:`dominated_shape`)
    at the smallest per-marginal budget any selection gives (every pair kept, the smallest
    pair's share), the cheapest within a tenth of the least variance, widened to the
    parameter set's ``envelope_bits`` per count (:func:`_widened`) so that a group of any
    budget finds a shape near its Gaussian within the circuit. Still dominated at the
    smallest budget (checked again here)."""
    # The 1-ways topped up (``one_way_rho``: their first release's rho): the smallest pair
    # budget is the water-fill's, and eta is shared with the 1-ways.
    smallest = smallest_pair_budget(layout, rho, one_way_rho)
    eta = bound_eta(delta_conversion, bound_marginals(layout, one_way_rho is not None))
    max_bits = JOINT_MAX_BITS_PER_CALL // parameters.chunk_cells
    max_span = 2 * ((1 << (parameters.count_bits - 1)) - 1 - max_rows)
    if max_span < 2:
        return None, f"max_rows {max_rows} leaves no room in {parameters.count_bits}-bit counts"
    # One width: the envelope caps the groups' search (bits, span, top weight), and a mixed
    # one would cap it no better, at many more pmfs built in the calibration's every step.
    least = dominated_shape(smallest, eta, max_bits, max_span, 1 << (MAX_SHAPE_BITS - 1),
                            mixed=False)
    if least is None:
        return None, (f"no joint shape within {max_bits} encrypted bits per count and span "
                      f"{max_span} is dominated by its Gaussian bound")
    cheapest = least
    for _ in range(64):  # bounded: each pass lowers the encrypted bits per count
        shape = dominated_shape(smallest, eta, cheapest.ciphertexts - 1, max_span,
                                1 << (MAX_SHAPE_BITS - 1), mixed=False)
        if shape is None or shape.variance > least.variance * Fraction(11, 10):
            break
        cheapest = shape
    envelope = _widened(cheapest, min(max_bits, parameters.envelope_bits), max_span)
    if not shape_dominated(envelope.uniforms, envelope.bits, mu_at_most(smallest), eta,
                           envelope.wider):
        envelope = cheapest  # not expected (module argument); the unwidened one is
    try:
        check_room(envelope, max_rows, parameters.count_bits)
    except ValueError as exc:
        return None, str(exc)
    return envelope, ""


def _widened(base: JointNoiseShape, max_bits: int, max_span: int) -> JointNoiseShape:
    """``base`` with as many more uniforms of its (narrower) width as ``max_bits`` bits per
    count and ``max_span`` allow. The envelope only caps the groups' search (bits per count,
    span, top weight); sized at the smallest budget alone it leaves the groups of larger
    budgets, which need narrower uniforms and more of them, 1.4-2x their Gaussian's variance,
    where with up to 256 bits they get 1.05-1.6x with one width and 1.13-1.25x with two,
    and 1.04-1.10x cell-weighted at the default set's 384 (``docs/privacy-plan.md``, "Two
    widths in one shape"). Extra
    uniforms are independent noise added to a dominated shape, so it stays dominated at the
    smallest budget."""
    wide_bits = base.wider * (base.bits + 1)
    wide_span = base.wider * ((1 << (base.bits + 1)) - 1)
    most = min((max_bits - wide_bits) // base.bits,
               (max_span - wide_span) // ((1 << base.bits) - 1))
    most -= (most + base.wider) % 2  # an even number of uniforms in all
    return JointNoiseShape(most, base.bits, base.wider) if most > base.uniforms else base
