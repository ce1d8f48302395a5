"""A session's public plan: the layout, the releases, and the noise each release carries.

Privacy model (stated once, enforced by the key server's ledger):

* Neighbouring datasets differ by adding or removing one record of the union (so the row
  count is private too; synthesis estimates it from the noisy 1-ways).
* A release of M marginals has squared L2 sensitivity M (one record moves one cell of each
  marginal by 1). Each server adds independent N_Z(0, sigma2) with sigma2 = M / (2 rho_R),
  so **each view is rho_R-zCDP on its own**: the key server sees the compute server's noise
  only (it decrypts count + noise_CS), the compute server knows its own noise and so sees the
  published value as count + noise_KS, and the public sees the key server's output, a
  post-processing of its view. The released values therefore carry two noises (variance
  2 sigma2), where a release stays two-server (the joint noise below carries one).
* Releases compose additively in rho; the session's rho comes from its (epsilon, delta) by
  the conservative conversion of :mod:`dp.accounting`, at the delta left once the
  selection's failure terms are reserved (``build``).
* With a private selection (``params.selection_plan``, mode ``em``) the 2-way release's
  marginals are the pairs the selection rounds choose, known only at run time
  (:meth:`SessionPlan.resolve`); its noise is fixed in advance (sensitivity = rounds), and it
  takes the budget the selection's epsilon grid leaves unspent, so a session spends exactly
  its rho.
* With ``noisy-greedy`` the number of selected pairs m is also known only at run time (0 to
  all): the plan's 2-way spec carries the worst case (every pair) for the capacity check, and
  :meth:`SessionPlan.resolve` sets sigma2 = m / (2 rho_R) for the m pairs chosen
  (:func:`selected_release`); with m = 0 nothing is released or charged.
* **One noise for both views** (``noise="auto"``, the servers' default; issue 14): a release whose
  number of marginals is fixed in advance carries instead one joint noise neither server
  knows (``crypto.joint_noise``), of the shape :func:`crypto.joint_noise.choose_shape`
  matches to its rho_R at the orders of the session's conversion. Its variance per count is
  about sigma2, half of the two noises'. The rule (:func:`joint_shape_for`): a release is
  joint when its count width has room for the noise's hard bound (|Z| <= span/2) and one
  chunk's encrypted bits (chunk_cells x K) stay within ``JOINT_MAX_BITS_PER_CALL``; a
  release whose matching shape would not lower the published variance (large eps: tiny
  noises) or would take over ``JOINT_DELTA_SHARE`` of delta in conditioning mass stays
  two-server. The conditioning mass each joint release excludes (M x its per-count
  failure) is a delta term reserved out of delta like the selection's;
  :meth:`SessionPlan.check_joint` confirms the session's (eps, delta) end to end with the
  exact curves (fails closed).
* **Noisy-greedy's scores, joint** (noise "auto" or "joint"; :func:`score_shape_for`): the
  selection's ``pairs`` InDif scores (sensitivity 1 each: a record moves every score by at
  most 1) take one joint noise each (``crypto.noisy_scores``'s ``joint``) in place of the
  two servers' N_Z(0, pairs / (2 rho)). The rule: the shape of least variance among sums of
  at most 30 uniforms (so the carry chain's lookups stay within SCORE_LOOKUP_BITS) whose
  pairs-fold conditioned curve is below a rho at every order a of the conversion, where rho
  is the selection's charge (the same rho as the two-server scores). The scores stay
  two-server (noise "joint": the session is refused) when that shape's variance is not
  below the two-server scores' 2 pairs / (2 rho), or its conditioning mass (pairs x its
  per-score failure) exceeds JOINT_DELTA_SHARE of the conversion's delta, or (noise "auto")
  the end-to-end check does not confirm the session with them once the split release has
  fallen back (:meth:`SessionPlan.build`). The shape is
  fixed here, before any data, and published in the selection's public record (``joint``,
  ``score_noise``), so both servers size the ``joint`` function, the key server's bits and
  the decoding from it; its mass is a delta term (``joint_scores``) reserved like the
  others; :meth:`SessionPlan.check_joint` composes its exact curve with the releases'
  (fails closed). On orders that the conversion uses the scores' curve is below the zCDP
  plan's a rho, so the split of the budget and the other releases are unchanged.
* **Noisy-greedy's 2-way release, joint at run-time m** (allocation ``"privsyn"``): its rho
  is split over the kept pairs by PrivSyn's c^(2/3) (``dp.privsyn_allocation``; exact
  rationals, the shares add up to rho), one group per pair size; group g (M_g pairs of
  weight w_g) gets rho_g = rho M_g w_g / W (W the kept pairs' weight), so each of its
  marginals has the budget r_g = rho w_g / W, and the group carries one joint shape whose
  conditioned curve is below a r_g at every order a of the conversion
  (:func:`run_time_group_shape`). Soundness, for every selection, not only the realised one:

  - *What sizes a view is fixed before any data.* Which pairs are kept is known only at
    run time, so the plan fixes the **envelope** (:func:`envelope_shape_for`: the rule at
    the smallest per-marginal budget any selection gives, rho w_min / W_all, every pair
    kept): it sizes the circuit's width, the key server's bits (one set per pair chunk,
    drawn offline for every pair cell), the room in the count width and the key server's
    plausibility floor. A run-time group only ever takes a shape within it (bits, weights,
    span), and one exists: the envelope matches the smallest budget, hence every larger
    one (matching is monotone in the budget; verified, not assumed).
  - *The bound holds for every selection (adaptive composition).* Given the published
    pairs, a record's neighbours differ in one count of each kept marginal, so the
    release's conditioned Renyi divergence is at most sum_g M_g a r_g = a rho at each
    conversion order, **whatever the selection**. RDP composes adaptively (the selection
    is a published output the release's mechanism may depend on), so the session is
    charged a rho for this release on those orders (:meth:`SessionPlan.check_joint`,
    which composes it with the other releases' exact curves and converts on those orders
    only: a subset of orders can only give a larger delta). The conditioning mass is
    bounded per kept marginal by :func:`pair_failure_cap`, so its total over any selection
    is at most the **delta reserve**, every pair at its cap (JOINT_DELTA_SHARE of the
    conversion's delta), reserved at build like the selection's terms. Rounding goes up:
    divergences are rounded up, budgets down (``dp.joint_noise_accounting.release_matches``).
  - *The fallback is public and decided alike.* Where a group has no verified shape (its
    conditioning mass above its cap, or no match within the envelope) or the split's mean
    variance per count is not below the even two-server release's 2 m / (2 rho), the
    release is that even two-server release (zCDP, rho, its Gaussians drawn per possible m
    at session creation). Both servers decide from the public plan and the published pairs
    only (:meth:`SessionPlan.split_release`), and the key server decrypts only when the
    compute server's manifest states the same noise (:meth:`SessionPlan.noise_statement`):
    a compute server that added its own Gaussian while the key server added nothing would
    know the published noise.
  - If the envelope itself is refused at build, or the conversion's orders do not confirm
    the session with the split counted as zCDP there, a session with noise "auto" gets the
    even two-server release throughout, as before the split existed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from common import wire
from crypto.joint_noise import check_room, choose_shape, columns_for
from dp.accounting import eps_delta_to_rho, gaussian_sigma2
from dp.binomial_accounting import RDP_ORDERS, session_delta_of
from crypto.noisy_scores import NoisyScoreShape
from dp.joint_noise_accounting import MAX_BITS as MAX_SHAPE_BITS
from dp.joint_noise_accounting import (JointNoiseShape, orders_for, release_marginals,
                                       release_matches)
from dp.privsyn_allocation import allocation_groups, allocation_weight
from dp.noise_pool import NoiseDraw
from params.layout import MarginalLayout
from params.parameter_sets import ParameterSet, get_parameter_set
from params.schema import Schema
from params.selection_plan import (DEFAULT_SPLITS, RowBound, SelectionPlan, chunk_sizes_for,
                                   row_bound)

__all__ = ["ReleaseSpec", "SessionPlan", "NOISE_TAIL_SIGMAS", "indif_chunks",
           "selected_release", "noise_draws", "noise_label", "SCORE_NOISE", "split_share",
           "two_way_rho", "NOISE_MODES", "JOINT_TAIL", "JOINT_MAX_BITS_PER_CALL",
           "joint_shape_for", "group_shape_for", "envelope_shape_for", "pair_failure_cap",
           "conditioning_refusal",
           "run_time_group_shape", "least_variance_within", "score_shape_for",
           "SCORE_LOOKUP_BITS"]

# The label of noisy-greedy's per-pair score noise in a server's noise pool.
SCORE_NOISE = "selection_scores"

# A count plus noise must decode unambiguously from k bits: we require max_rows + 40 sigma
# < 2^(k-1). P[|N_Z(0, sigma2)| >= 40 sigma] < 2 exp(-800).
NOISE_TAIL_SIGMAS = 40

# How a session's releases are noised: "auto" (one joint noise wherever the rule of the
# module docstring allows, two-server elsewhere), "joint" (every release, or refuse), or
# "two-server" (each server its own discrete Gaussian).
NOISE_MODES = ("auto", "joint", "two-server")
# The conditioning tail of a uniforms-shaped joint noise, per count: the largest losses up to
# this mass are excluded and charged to delta (``dp.binomial_accounting``).
JOINT_TAIL = 1e-12
# One P1 call holds chunk_cells x K encrypted bits of the key server's; concrete expands them
# at run time (~40 KB each: 148 x 256 bits took 1.6 GB, measured), so a call is capped here.
JOINT_MAX_BITS_PER_CALL = 1 << 16
# Where no coin count fits the caps, uniforms are searched up to this multiple of sigma2 (the
# matching coins' variance is 1.03-1.12 sigma2, DESIGN.md; the uniforms' slack over them 1.1).
JOINT_VARIANCE_CAP = Fraction(5, 4)
# A joint release's conditioning mass may take at most this share of the conversion's delta.
JOINT_DELTA_SHARE = 0.01
# noisy-greedy's joint scores: the widest lookup their carry chain may use (a lookup's input
# is a digit plus a column of the uniforms' bits plus a carry, up to 2 uniforms + 1, so this
# caps the uniforms at 30). Measured at the servers' plans (``bench/bench_joint_scores.py``,
# results in ``bench/results/joint_scores.json``; Adult, 17 lookups a score): compressed
# evaluation keys 130.6 MB with the two-server ``noise``, 130.8 MB with 5-bit lookups (12 x 8
# and 14 x 7 uniforms), 307.1 MB with 6-bit (16 x 6); a score's call 0.37 / 0.54 / 1.03 s
# once the keys are in use, small next to P2.
SCORE_LOOKUP_BITS = 6
SCORE_MAX_UNIFORMS = 30  # what SCORE_LOOKUP_BITS allows (above)


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


def indif_chunks(layout: MarginalLayout,
                 sizes: tuple[int, ...]) -> list[tuple[int, np.ndarray, int]]:
    """Primitive 2's inputs: (candidate index, cell positions, chunk size) per chunk, each
    pair's cells cut by :func:`params.selection_plan.chunk_sizes_for` (a chunk may be short:
    callers pad it to its size with |C - K| = 0 cells). Public and deterministic: both servers
    derive the same chunks from the layout and the parameter set's sizes."""
    out = []
    for index, slot in enumerate(layout.two_way):
        cells = np.arange(slot.offset, slot.offset + slot.size)
        start = 0
        for size in chunk_sizes_for(slot.size, sizes):
            out.append((index, cells[start:start + size], size))
            start += size
    return out


def split_share(rho_total: Fraction, fraction: float) -> Fraction:
    """One part of the session's rho: the split's fraction rounded down to 1e-12, so the parts
    never exceed the whole."""
    return rho_total * Fraction(int(fraction * 10 ** 12), 10 ** 12)


def two_way_rho(rho_total: Fraction, split: dict[str, float],
                selection_charged: Fraction) -> Fraction:
    """The 2-way release's rho after a selection: its share plus what the selection's epsilon
    grid left unspent of its own (module docstring); noisy-greedy charges exactly its share,
    so nothing is left over. Exact rationals, so a session spends exactly its rho."""
    return (split_share(rho_total, split["two_way"])
            + (split_share(rho_total, split["selection"]) - selection_charged))


@dataclass(frozen=True)
class ReleaseSpec:
    name: str
    marginal_keys: tuple[str, ...]
    rho: Fraction
    sigma2: Fraction
    # The one noise neither server knows (module docstring), or None: two servers' Gaussians.
    # A release split by PrivSyn's allocation: the widest shape any of its groups may take
    # (the envelope the circuit and the key server's bits are sized for).
    joint: JointNoiseShape | None = None
    # How a selected release's rho is shared over its pairs: "even" (one noise level) or
    # "privsyn" (c^(2/3), one group per pair size, ``dp.privsyn_allocation``).
    allocation: str = "even"
    # A resolved "privsyn" release: its groups, each a release of its own pairs with its own
    # rho, sigma2 and joint shape (:meth:`SessionPlan.resolve`).
    parts: tuple[ReleaseSpec, ...] = ()

    @property
    def noise_kind(self) -> str:
        return "two-server" if self.joint is None else "joint"

    @property
    def per_count_variance(self) -> Fraction:
        """Var(published - true) per count, by construction: the joint shape's variance, or
        the two servers' independent Gaussians (2 sigma2). An unresolved "privsyn" release:
        its envelope's, an upper bound; a resolved one: see
        :meth:`SessionPlan.per_count_variance` (it differs by group)."""
        if self.parts:
            raise ValueError("a split release's variance differs by group: ask the plan")
        return self.joint.variance if self.joint is not None else 2 * self.sigma2

    @property
    def key_server_noise_bound(self) -> float:
        """How far below zero an honest chunk can decode in the key server's view: the joint
        noise's hard bound, or NOISE_TAIL_SIGMAS of the compute server's Gaussian."""
        if self.joint is not None:
            return float(self.joint.span // 2)
        return NOISE_TAIL_SIGMAS * float(self.sigma2) ** 0.5

    @property
    def published_noise_bound(self) -> float:
        """The bound on |published - true| a count's width must leave room for."""
        if self.joint is not None:
            return float(self.joint.span // 2)
        return NOISE_TAIL_SIGMAS * float(2 * self.sigma2) ** 0.5

    def row_bound_noise(self) -> tuple[Fraction, int]:
        """(sub-Gaussian variance proxy per noise, number of noises) of a published count:
        N_Z(0, sigma2) has proxy sigma2 (two of them); a sum of centred uniforms on
        {0..2^w - 1} has proxy u (2^w - 1)^2 / 4 (Hoeffding), one noise."""
        if self.joint is None:
            return self.sigma2, 2
        return Fraction(self.joint.uniforms * ((1 << self.joint.bits) - 1) ** 2, 4), 1

    def failure(self) -> float:
        """The joint noise's conditioning mass over the release's M marginals (a delta
        term); 0 for the two-server noise; a resolved split release's, its groups' sum."""
        if self.parts:
            return sum(part.failure() for part in self.parts)
        if self.joint is None:
            return 0.0
        return release_count(self) * self.joint.pair().failure(JOINT_TAIL)


def release_count(spec: ReleaseSpec) -> int:
    """M, the marginals a record's neighbours differ in: sigma2 = M / (2 rho)."""
    return release_marginals(spec.rho, spec.sigma2)


@functools.lru_cache(maxsize=256)
def _matching_shape(marginals: int, rho: Fraction, rho_total: Fraction,
                    delta_conversion: float, max_bits: int, max_span: int,
                    max_variance: Fraction) -> JointNoiseShape:
    # Cached: the plan's fixed-point iteration and restarts ask for the same shapes.
    return choose_shape(marginals, rho, rho_total, delta_conversion, JOINT_TAIL,
                        max_bits=max_bits, max_span=max_span, max_variance=max_variance)


def joint_shape_for(spec: ReleaseSpec, rho_total: Fraction, delta_conversion: float,
                    max_rows: int, parameters: ParameterSet) -> tuple[JointNoiseShape | None, str]:
    """The joint shape a release takes under the rule of the module docstring, or None with
    the reason it stays two-server."""
    return _shape_by_rule(release_count(spec), spec.rho, spec.sigma2,
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
    :meth:`SessionPlan.split_release`). ``max_bits`` and ``max_span`` narrow the search
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
    would not fit it falls back (:meth:`SessionPlan.resolve`)."""
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
    """A run-time group's shape (module docstring), or None with the reason: the rule's own
    shape (:func:`group_shape_for`, no gain required: the release is judged whole) if the
    envelope's circuit carries it (at most ``columns`` bits, weights at most ``top_weight``,
    span at most the envelope's), else the least-variance matching shape within it
    (:func:`least_variance_within`). Whatever the route, the shape is **verified** here, not
    assumed: its conditioned curve below a rho_per_marginal at every order of the
    conversion (at JOINT_TAIL, the tail it is charged with), its conditioning mass at most
    ``failure_cap``, its room in the count width. Cached: both servers resolve the release
    on every chunk request."""
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
def score_shape_for(pairs: int, rho: Fraction, rho_total: Fraction, delta_conversion: float,
                    score_bits: int) -> tuple[JointNoiseShape | None, str]:
    """noisy-greedy's score noise under the rule of the module docstring: the joint shape of
    least variance whose ``pairs``-fold conditioned curve is below a rho at every order of
    the conversion (each score has sensitivity 1; the two-server plan's sigma2 is
    pairs / (2 rho)), among sums of at most 30 uniforms (their carry chain's lookups within
    SCORE_LOOKUP_BITS); it is refused (None, with the reason: the scores stay two-server)
    when its variance is not below the two-server scores' 2 sigma2 or its conditioning
    mass exceeds JOINT_DELTA_SHARE of the conversion's delta. Per width only the fewest
    matching uniforms can be the answer (more uniforms only lower the conditioned
    divergence, and raise the variance), found by bisection; widths are tried upwards until
    even two uniforms exceed the best variance. Cached: both servers and every rebuild of
    the plan ask for the same shape."""
    rho = Fraction(rho)
    sigma2 = Fraction(pairs) / (2 * rho)
    orders = orders_for(rho_total, delta_conversion)

    def fits(shape: JointNoiseShape) -> bool:
        return NoisyScoreShape(2, (8,), score_bits, 1, shape).lookup_bits <= SCORE_LOOKUP_BITS

    def matches(uniforms: int, bits: int) -> bool:
        return release_matches(JointNoiseShape(uniforms, bits), pairs, rho, orders, JOINT_TAIL)

    best = None
    for bits in range(1, MAX_SHAPE_BITS + 1):  # bounded: one pass per width
        limit = 2 * sigma2 if best is None else best.variance
        if JointNoiseShape(2, bits).variance >= limit:
            break
        most = 2
        while (most + 2 <= SCORE_MAX_UNIFORMS and fits(JointNoiseShape(most + 2, bits))
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


def selected_release(release: ReleaseSpec, keys: tuple[str, ...]) -> ReleaseSpec:
    """A selected release over the chosen marginals ``keys``: sensitivity len(keys), so
    sigma2 = len(keys) / (2 rho) (for em the plan's own sigma2: len(keys) = rounds); an
    empty selection releases nothing and costs nothing."""
    if not keys:
        return ReleaseSpec(release.name, (), Fraction(0), Fraction(0))
    # Two-server, the even split: its noise was drawn per possible m (noise_draws).
    return ReleaseSpec(release.name, keys, release.rho, gaussian_sigma2(release.rho, len(keys)))


def noise_label(spec: ReleaseSpec, selection_mode: str | None) -> str:
    """The pool label of a (resolved) release's noise: noisy-greedy's 2-way release has one
    draw per possible number of pairs (``dp.noise_pool``)."""
    if selection_mode == "noisy-greedy" and spec.name == "two_way":
        return f"two_way@{len(spec.marginal_keys)}"
    return spec.name


def noise_draws(layout: MarginalLayout, releases: tuple[ReleaseSpec, ...],
                selection_mode: str | None,
                score_sigma2: Fraction | None = None) -> list[NoiseDraw]:
    """Every noise vector a server may add in this session, known from the public plan alone:
    a fixed release's cells; a selected release's every pair cell (per possible number of
    pairs for noisy-greedy); noisy-greedy's per-pair score noise (``score_sigma2`` None: the
    scores are joint, nothing to draw). A joint release draws
    nothing here: its noise is the two servers' XOR-shared bits (``crypto.joint_noise``);
    a split release ("privsyn") keeps the per-m draws of the even two-server release it
    falls back to where the rule refuses a group (:meth:`SessionPlan.resolve`)."""
    total = layout.total_cells
    pair_cells = layout.cells_of(layout.two_way)
    draws = []
    for spec in releases:
        if spec.joint is not None and spec.allocation != "privsyn":
            continue
        if spec.marginal_keys:
            keys = set(spec.marginal_keys)
            cells = layout.cells_of([m for m in layout.marginals if m.key in keys])
            draws.append(NoiseDraw(spec.name, spec.sigma2, cells, total))
        elif selection_mode == "noisy-greedy":
            for m in range(1, len(layout.two_way) + 1):
                draws.append(NoiseDraw(f"{spec.name}@{m}", gaussian_sigma2(spec.rho, m),
                                       pair_cells, total))
        else:
            draws.append(NoiseDraw(spec.name, spec.sigma2, pair_cells, total))
    if selection_mode == "noisy-greedy" and score_sigma2 is not None:
        pairs = len(layout.two_way)
        draws.append(NoiseDraw(SCORE_NOISE, score_sigma2, np.arange(pairs), pairs))
    return draws


@dataclass(frozen=True)
class SessionPlan:
    schema: Schema
    layout: MarginalLayout
    parameters: ParameterSet
    epsilon: float
    delta: float
    rho_total: Fraction
    releases: tuple[ReleaseSpec, ...]
    selection: SelectionPlan | None = None
    # The delta of the zCDP -> (eps, delta) conversion: the requested delta minus the
    # selection's reserved terms (``build``). None: the requested delta (no selection).
    delta_conversion_: float | None = None
    # The public bound on the union's rows the widths were chosen for (0: not known here).
    max_rows: int = 0

    @property
    def delta_conversion(self) -> float:
        return self.delta if self.delta_conversion_ is None else self.delta_conversion_

    @classmethod
    def build(cls, schema: Schema, pairs: list[tuple[int, int]] | None, epsilon: float,
              delta: float, split: dict[str, float] | None, parameter_set: str,
              max_rows: int, selection: str = "none",
              rounds: int | None = None, selection_set: str | None = None,
              noise: str = "two-server") -> SessionPlan:
        """The session's plan. With a selection, its failure terms (bootstraps, the row
        bound, noisy-greedy's noise tail) are reserved out of ``delta`` before the budget is
        converted to zCDP, so that the conversion's delta plus the terms is at most ``delta``
        (``params.selection_plan``); the terms depend on the widths, which depend on rho, so
        the reserve is found by a short fixed-point iteration (bounded, fails closed). The
        joint releases' conditioning mass is reserved the same way (module docstring)."""
        if noise not in NOISE_MODES:
            raise ValueError(f"noise must be one of {NOISE_MODES}, not {noise!r}")
        args = (schema, pairs, epsilon, delta, split, parameter_set, max_rows, selection,
                rounds, selection_set, noise)
        split_two_way, joint_scores = True, True
        for _ in range(3):  # bounded: each retry drops one joint part
            plan = cls._settled(*args, split_two_way=split_two_way, joint_scores=joint_scores)
            try:
                plan.check_joint()
                return plan
            except ValueError:
                # The split release and the joint scores are counted as zCDP on the
                # conversion's orders only; where that grid does not confirm the session,
                # "auto" gives the release its even two-server form first, then the scores
                # their two servers' Gaussians (module docstring).
                if noise != "auto":
                    raise
                if any(plan._is_split(r) for r in plan.releases):
                    split_two_way = False
                elif plan.selection is not None and plan.selection.score_joint is not None:
                    joint_scores = False
                else:
                    raise
        raise ValueError("the session's joint parts did not confirm")

    @classmethod
    def _settled(cls, schema, pairs, epsilon, delta, split, parameter_set, max_rows,
                 selection, rounds, selection_set, noise, split_two_way,
                 joint_scores=True) -> SessionPlan:
        """:meth:`_build` at the conversion delta that leaves room for the reserved terms
        (a short fixed-point iteration, bounded, fails closed)."""
        reserved = 0.0
        for _ in range(8):
            plan = cls._build(schema, pairs, epsilon, delta, delta - reserved, split,
                              parameter_set, max_rows, selection, rounds, selection_set,
                              noise, split_two_way, joint_scores)
            need = sum(plan.delta_terms().values())
            if need <= reserved:
                break
            reserved = need * (1 + 1e-9)
        else:
            raise ValueError("the selection's delta reserve did not settle")
        if reserved > delta / 2:
            raise ValueError(
                f"the selection's failure terms need delta >= {2 * reserved:.3g} (bootstraps "
                f"x p_error and the row bound, {reserved:.3g} in all, may take at most half of "
                f"delta = {delta:g}): raise delta or select fewer rounds")
        return plan

    @classmethod
    def _build(cls, schema: Schema, pairs, epsilon: float, delta: float,
               delta_conversion: float, split, parameter_set: str, max_rows: int,
               selection: str, rounds, selection_set, noise: str,
               split_two_way: bool = True, joint_scores: bool = True) -> SessionPlan:
        params = get_parameter_set(parameter_set)
        layout = MarginalLayout.build(schema.domain_sizes, pairs)
        if not layout.two_way:
            raise ValueError("a session needs at least one 2-way marginal")
        split = DEFAULT_SPLITS.get(selection, {}) if split is None else split
        expected = set(DEFAULT_SPLITS.get(selection, {"one_way": 0, "two_way": 0}))
        if set(split) != expected:
            raise ValueError(f"selection {selection!r} splits the budget over {sorted(expected)}")
        rho_total = eps_delta_to_rho(epsilon, delta_conversion)

        def share(name: str) -> Fraction:
            return split_share(rho_total, split[name])

        chosen = None
        if selection == "noisy-greedy" and rounds is not None:
            raise ValueError("noisy-greedy chooses how many pairs to keep itself (PrivSyn's "
                             "greedy rule); rounds are for em")
        if selection != "none":
            chosen = SelectionPlan.build(selection, len(layout.two_way), max_rows,
                                         share("selection"), rounds,
                                         parameters=selection_set)
        if (chosen is not None and chosen.mode == "noisy-greedy" and noise != "two-server"
                and joint_scores):
            chosen = cls._with_score_noise(chosen, noise, rho_total, delta_conversion)
        one_way = ReleaseSpec("one_way", tuple(m.key for m in layout.one_way),
                              share("one_way"),
                              gaussian_sigma2(share("one_way"), len(layout.one_way)))
        if chosen is None:
            rho_two, keys, count = share("two_way"), tuple(m.key for m in layout.two_way), None
        else:
            rho_two = two_way_rho(rho_total, split, chosen.rho_charged)
            # em: the rounds; noisy-greedy: the worst case, every pair (module docstring).
            keys = ()
            count = chosen.rounds if chosen.mode == "em" else len(layout.two_way)
        two_way = ReleaseSpec("two_way", keys, rho_two,
                              gaussian_sigma2(rho_two, count or len(keys)))
        releases = (one_way, two_way)
        # Refused early (and fast) if even the two servers' noise does not fit: a release the
        # joint rule declines falls back to it.
        cls(schema, layout, params, epsilon, delta, rho_total, releases, chosen,
            delta_conversion, max_rows).check_capacity(max_rows)
        if noise != "two-server":
            releases = tuple(cls._with_noise(r, noise, rho_total, delta_conversion, max_rows,
                                             params, chosen, layout, split_two_way)
                             for r in releases)
        plan = cls(schema, layout, params, epsilon, delta, rho_total, releases,
                   chosen, delta_conversion, max_rows)
        plan.check_capacity(max_rows)
        return plan

    @staticmethod
    def _with_score_noise(chosen: SelectionPlan, noise: str, rho_total: Fraction,
                          delta_conversion: float) -> SelectionPlan:
        """noisy-greedy's scores with the joint shape :func:`score_shape_for` gives them, or
        two-server where it refuses (noise "joint": refused)."""
        shape, why = score_shape_for(chosen.pairs, chosen.rho, rho_total, delta_conversion,
                                     chosen.score_bits)
        if shape is None:
            if noise == "joint":
                raise ValueError(f"noisy-greedy's scores cannot carry the joint noise: {why}; "
                                 "use noise 'auto' (two-server where it does not fit)")
            return chosen
        return replace(chosen, score_joint=shape,
                       joint_failure=chosen.pairs * shape.pair().failure(JOINT_TAIL))

    @staticmethod
    def _with_noise(spec: ReleaseSpec, noise: str, rho_total: Fraction,
                    delta_conversion: float, max_rows: int, params: ParameterSet,
                    chosen: SelectionPlan | None, layout: MarginalLayout,
                    split_two_way: bool = True) -> ReleaseSpec:
        """``spec`` with the joint shape the rule gives it (module docstring); noisy-greedy's
        2-way release: its envelope and PrivSyn's split, or the even two-server release."""
        if spec.name == "two_way" and chosen is not None and chosen.mode == "noisy-greedy":
            shape, why = (envelope_shape_for(layout, spec.rho, rho_total, delta_conversion,
                                             max_rows, params) if split_two_way else
                          (None, "the conversion's orders do not confirm the session with "
                                 "its split release"))
            allocation = "privsyn" if shape is not None else "even"
        else:
            shape, why = joint_shape_for(spec, rho_total, delta_conversion, max_rows, params)
            allocation = spec.allocation
        if shape is None and noise == "joint":
            raise ValueError(f"release {spec.name!r} cannot carry the joint noise: {why}; "
                             "use noise 'auto' (two-server where it does not fit)")
        return replace(spec, joint=shape, allocation=allocation)

    @property
    def joint_columns(self) -> int:
        """Encrypted bits per cell of the session's P1 circuit: the widest joint shape's K
        (``crypto.joint_noise.columns_for``), or 0 with no joint release (the plain P1)."""
        shapes = self.joint_shapes()
        return columns_for(shapes) if shapes else 0

    def joint_shapes(self) -> list[JointNoiseShape]:
        return [r.joint for r in self.releases if r.joint is not None]

    def joint_failure(self) -> float:
        """The joint releases' conditioning mass, a delta term (module docstring); an
        unresolved split release reserves its worst case, every pair at
        :func:`pair_failure_cap`."""
        return sum(self._split_reserve() if self._is_split(r) else r.failure()
                   for r in self.releases)

    @staticmethod
    def _is_split(spec: ReleaseSpec) -> bool:
        return spec.allocation == "privsyn" and spec.joint is not None and not spec.parts

    def _split_reserve(self) -> float:
        pairs = len(self.layout.two_way)
        return pairs * pair_failure_cap(self.delta_conversion, pairs)

    def check_joint(self) -> None:
        """Confirm the session end to end with the joint releases' exact curves: their
        conditioned Renyi divergences (M-fold) plus the zCDP parts' a rho at every order,
        converted to delta at the session's eps, plus their conditioning mass, must stay
        within the conversion's delta plus that mass (``dp.binomial_accounting``'s rule).
        Fails closed: a plan that does not confirm is refused."""
        joint = [r for r in self.releases if r.joint is not None and not self._is_split(r)]
        split = [r for r in self.releases if self._is_split(r)]
        scores = None if self.selection is None else self.selection.score_joint
        if not joint and not split and scores is None:
            return
        rho_rest = self.rho_total - sum((r.rho for r in joint), start=Fraction(0))
        parts = [(r.joint.pair(), release_count(r), JOINT_TAIL) for r in joint]
        failures = sum(r.failure() for r in joint)
        if scores is not None:
            # noisy-greedy's scores: one joint noise each, a record moves every score by 1.
            rho_rest -= self.selection.rho_charged
            parts.append((scores.pair(), self.selection.pairs, JOINT_TAIL))
            failures += self.selection.joint_failure
        # A split release's groups are chosen at run time, each matched below a rho_g at the
        # conversion's orders (rho_g adding up to its rho): on those orders, and only there,
        # its curve is below a rho whatever the selection, so it counts as zCDP on them.
        orders = (orders_for(self.rho_total, self.delta_conversion) if split
                  else RDP_ORDERS)
        delivered = session_delta_of(parts, rho_rest, self.epsilon, orders)
        allowed = self.delta_conversion + failures
        if delivered > allowed:
            raise ValueError(f"the joint noise's exact curve gives delta {delivered:.4g} at eps "
                             f"{self.epsilon}, above {allowed:.4g}: use noise 'two-server'")

    def to_public(self, session_id: str, clients: list[str],
                  bootstraps: int | None = None) -> wire.SessionPublic:
        """The session's public record: the one mapping from which both servers (and anyone
        with the release) derive the plan (:meth:`from_public`). ``bootstraps``: the
        selection module's compiled count (its delta terms are computed from it)."""
        selection = None
        if self.selection is not None:
            selection = self.selection.to_public(
                self.pair_cells(), self.used_chunk_sizes(), self.epsilon, self.delta,
                self.selection_delta_terms(bootstraps), bootstraps)
        return wire.SessionPublic(
            session_id=session_id, schema=self.schema.to_dict(),
            schema_fingerprint=self.schema.fingerprint(), clients=clients,
            pairs=self.layout.pairs, parameter_set=self.parameters.to_dict(),
            total_cells=self.layout.total_cells,
            releases=[wire.ReleasePlan(
                name=r.name, marginals=list(r.marginal_keys), rho=str(r.rho),
                sigma2=str(r.sigma2), noise=r.noise_kind, allocation=r.allocation,
                per_count_variance=str(r.per_count_variance),
                joint=None if r.joint is None else wire.JointNoisePublic(
                    uniforms=r.joint.uniforms, bits=r.joint.bits))
                for r in self.releases],
            joint_delta=self.joint_failure(),
            epsilon=self.epsilon, delta=self.delta, delta_conversion=self.delta_conversion,
            rho_total=str(self.rho_total), selection=selection)

    @classmethod
    def from_public(cls, public: wire.SessionPublic) -> SessionPlan:
        """The plan a public record describes (:meth:`to_public`): layout, releases with
        their exact rho and sigma2, the selection's widths and budget."""
        schema = Schema.from_dict(public.schema_)
        layout = MarginalLayout.build(schema.domain_sizes, [tuple(p) for p in public.pairs])
        selection = (None if public.selection is None
                     else SelectionPlan.from_public(public.selection, len(layout.two_way)))
        releases = tuple(ReleaseSpec(r.name, tuple(r.marginals), Fraction(r.rho),
                                     Fraction(r.sigma2),
                                     None if r.joint is None
                                     else JointNoiseShape(r.joint.uniforms, r.joint.bits),
                                     r.allocation)
                         for r in public.releases)
        return cls(schema, layout, ParameterSet(**public.parameter_set), public.epsilon,
                   public.delta, Fraction(public.rho_total), releases, selection,
                   public.delta_conversion, 0 if selection is None else selection.max_rows)

    def selection_delta_terms(self, bootstraps: int | None = None) -> dict[str, float]:
        """The selection's reserved delta terms (``params.selection_plan``); ``bootstraps``:
        the compiled count (default: the plan's upper bound)."""
        if self.selection is None:
            return {}
        return self.selection.delta_terms(self.pair_cells(), self.epsilon, self.delta,
                                          bootstraps)

    def delta_terms(self, bootstraps: int | None = None) -> dict[str, float]:
        """Every reserved delta term: the selection's, and the joint releases' conditioning
        mass as ``joint_noise``."""
        terms = self.selection_delta_terms(bootstraps)
        failure = self.joint_failure()
        if failure:
            terms = {**terms, "joint_noise": math.nextafter(failure, math.inf)}
        return terms

    def delta_total(self, bootstraps: int | None = None) -> float:
        """What the session delivers: the conversion's delta plus the reserved terms
        (at most the requested delta)."""
        return self.delta_conversion + sum(self.delta_terms(bootstraps).values())

    def resolve(self, release: ReleaseSpec,
                selected: list[tuple[int, int]] | None) -> ReleaseSpec:
        """The release with its marginals: the selected pairs for a selected 2-way release."""
        if release.marginal_keys or self.selection is None or release.name != "two_way":
            return release
        if selected is None or (self.selection.mode == "em"
                                and len(selected) != self.selection.rounds):
            raise ValueError("the 2-way release waits for every selection round")
        if self.selection.mode == "em":
            # Same sensitivity (the rounds), same noise: only the marginals are filled in.
            return replace(release, marginal_keys=self.keys_of_pairs(selected))
        keys = self.keys_of_pairs(selected)
        if keys and self._is_split(release):
            split, _ = self.split_release(release, keys)
            if split is not None:
                return split
        return selected_release(release, keys)

    def split_release(self, release: ReleaseSpec,
                      keys: tuple[str, ...]) -> tuple[ReleaseSpec | None, str]:
        """A split release over the kept pairs ``keys`` (PrivSyn's c^(2/3) shares, one group
        per pair size, ``dp.privsyn_allocation``), each group with the shape of
        :func:`run_time_group_shape`; or None with the reason when a group has no shape
        (its conditioning mass above its cap, or no verified match within the envelope) or
        the release's mean variance per count is not below the even two-server release's
        2 m / (2 rho): the release then falls back to that even two-server release. Public
        inputs only (the plan and the published pairs): both servers compute the same
        groups, and the compute server's manifest states them (:meth:`noise_statement`)."""
        cells = {slot.attrs: slot.size for slot in self.layout.two_way}
        chosen = [slot.attrs for slot in self.layout.two_way if slot.key in set(keys)]
        cap = pair_failure_cap(self.delta_conversion, len(self.layout.two_way))
        top_weight = max(max(s.weights()) for s in self.joint_shapes())
        parts = []
        for pairs, rho in allocation_groups(cells, chosen, release.rho):
            shape, why = run_time_group_shape(
                rho / len(pairs), self.rho_total, self.delta_conversion, self.max_rows,
                self.parameters, cap, release.joint, self.joint_columns, top_weight)
            if shape is None:
                return None, f"pairs of {cells[pairs[0]]} cells: {why}"
            parts.append(ReleaseSpec(f"{release.name}/{cells[pairs[0]]}",
                                     self.keys_of_pairs(pairs), rho,
                                     gaussian_sigma2(rho, len(pairs)), shape))
        split = replace(release, marginal_keys=keys,
                        sigma2=gaussian_sigma2(release.rho, len(keys)), parts=tuple(parts))
        variance, even = self.per_count_variance(split), 2 * split.sigma2
        if variance >= even:
            return None, (f"its mean variance per count {float(variance):.3g} is not below "
                          f"the even two-server release's {float(even):.3g}")
        return split, ""

    def noise_statement(self, release: ReleaseSpec) -> str:
        """What noise a resolved release's counts carry, in one line: the compute server
        sends it with its manifest and the key server compares it with its own before it
        decrypts anything (a release decided at run time must be decided alike at both
        servers: a compute server that added its Gaussian while the key server adds nothing
        would know the published noise)."""
        if release.parts:
            return "joint " + "; ".join(
                f"{p.name} {p.joint.uniforms}x{p.joint.bits} on {' '.join(p.marginal_keys)}"
                for p in release.parts)
        if release.joint is not None:
            return f"joint {release.joint.uniforms}x{release.joint.bits}"
        return f"two-server sigma2 {release.sigma2}"

    def cell_noises(self, release: ReleaseSpec) -> list[tuple[np.ndarray, JointNoiseShape | None]]:
        """(cell positions, joint shape or None) covering a resolved release's cells: one
        entry, or one per group of a split release."""
        if release.parts:
            return [(self.layout.cells_of(self.slots_of(part)), part.joint)
                    for part in release.parts]
        return [(self.layout.cells_of(self.slots_of(release)), release.joint)]

    def per_count_variance(self, release: ReleaseSpec) -> Fraction:
        """Var(published - true) of a count of the resolved release, by construction; for a
        split release the mean over its cells (each group's own is its part's)."""
        if not release.parts:
            return release.per_count_variance
        total, cells = Fraction(0), 0
        for part in release.parts:
            size = sum(slot.size for slot in self.slots_of(part))
            total += size * part.per_count_variance
            cells += size
        return total / cells

    def noise_label(self, release: ReleaseSpec) -> str:
        """The pool label of a resolved release's noise (:func:`noise_label`)."""
        return noise_label(release, None if self.selection is None else self.selection.mode)

    def check_row_bound(self, one_way: list) -> RowBound:
        """The selection's row-bound check on the published 1-ways, the one rule both
        servers apply before any score is computed or charged
        (``params.selection_plan.row_bound``)."""
        proxy, noises = self.release("one_way").row_bound_noise()
        return row_bound(one_way, proxy, noises, self.selection.max_rows,
                         self.selection.row_bound_delta(self.delta, self.epsilon))

    def noise_draws(self) -> list[NoiseDraw]:
        mode = None if self.selection is None else self.selection.mode
        gaussian_scores = self.selection is not None and self.selection.score_joint is None
        return noise_draws(self.layout, self.releases, mode,
                           self.selection.noise_sigma2 if gaussian_scores else None)

    def keys_of_pairs(self, pairs: list[tuple[int, int]]) -> tuple[str, ...]:
        """The marginal keys of ``pairs``, in layout order."""
        keys = {self.layout.slot(tuple(p)).key for p in pairs}
        return tuple(m.key for m in self.layout.two_way if m.key in keys)

    def indif_chunks(self) -> list[tuple[int, np.ndarray, int]]:
        return indif_chunks(self.layout, self.selection.chunk_sizes)

    def used_chunk_sizes(self) -> tuple[int, ...]:
        """The chunk sizes this session's pairs are cut into: the module compiles only
        these ``indif_<s>`` functions."""
        return tuple(sorted({size for _, _, size in self.indif_chunks()}))

    def pair_cells(self) -> list[int]:
        return [slot.size for slot in self.layout.two_way]

    def check_capacity(self, max_rows: int) -> None:
        """max_rows plus each release's noise bound (its hard bound for a joint noise,
        NOISE_TAIL_SIGMAS of the two Gaussians' sum otherwise) must decode from k bits."""
        room = 2 ** (self.parameters.count_bits - 1)
        need = max_rows + max(r.published_noise_bound for r in self.releases)
        if need >= room:
            raise ValueError(
                f"parameter set {self.parameters.name!r} holds counts below {room}; "
                f"max_rows {max_rows} plus the noise's bound ({need:.0f} in all) "
                "does not fit: choose a larger parameter set or a smaller max_rows")

    def release(self, name: str) -> ReleaseSpec:
        for r in self.releases:
            if r.name == name:
                return r
        raise KeyError(name)

    def slots_of(self, release: ReleaseSpec):
        keys = set(release.marginal_keys)
        return [m for m in self.layout.marginals if m.key in keys]
