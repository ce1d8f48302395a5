"""A release resolved at run time: its marginals once the selection is published, the split
release's groups and their shapes, and the one-line statement of the noise it carries.

Claim: a resolved release is a function of the public plan and the published pairs only, so
both servers resolve it alike, and a split release's groups each take a verified shape
within the plan's envelope or the whole release falls back to the even two-server release;
a release that tops up the 1-ways (``SessionPlan.one_way_topup``) spends on its pairs and
top-ups at most its rho, each group verified dominated at its budget; the key server
decrypts only what the compute server's statement of the noise matches
(``docs/privacy-plan.md``, "Releases after a selection" and "The split 2-way release").
:class:`params.session_plan.SessionPlan` exposes these as its methods.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from feddpsyn.crypto.joint_noise import check_room
from feddpsyn.dp.accounting import gaussian_sigma2
from feddpsyn.dp.gaussian_domination import mu_at_most, shape_dominated
from feddpsyn.dp.joint_noise_accounting import MAX_BITS as MAX_SHAPE_BITS
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
from feddpsyn.dp.pair_selection import greedy_select
from feddpsyn.dp.privsyn_allocation import (
    allocation_groups,
    floored_groups,
    greedy_select_allocated,
    greedy_select_with_one_ways,
)
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.noise_rules import (
    JOINT_MAX_BITS_PER_CALL,
    bound_eta,
    bound_marginals,
    dominated_shape,
    pair_failure_cap,
    run_time_group_shape,
)
from feddpsyn.params.release_spec import ReleaseSpec, selected_release

if TYPE_CHECKING:
    from feddpsyn.params.session_plan import SessionPlan

__all__ = ["resolve", "bounded", "split_release", "noise_statement", "cell_noises",
           "MissingNoise",
           "per_count_variance", "select_pairs", "variance_ratio"]


class MissingNoise(RuntimeError):
    """A released count whose noise cannot be found: a privacy failure, never a count with
    less noise (fail closed)."""


def resolve(plan: SessionPlan, release: ReleaseSpec,
            selected: list[tuple[int, int]] | None) -> ReleaseSpec:
    """The release with its marginals: the selected pairs for a selected 2-way release."""
    if release.marginal_keys or plan.selection is None or release.name != "two_way":
        return release
    if selected is None or (plan.selection.mode == SelectionMode.EM
                            and len(selected) != plan.selection.rounds):
        raise ValueError("the 2-way release waits for every selection round")
    if plan.selection.mode == SelectionMode.EM:
        # Same sensitivity (the rounds), same noise: only the marginals are filled in.
        return replace(release, marginal_keys=plan.keys_of_pairs(selected))
    keys = plan.keys_of_pairs(selected)
    if keys and release.split_pending:
        split, why = split_release(plan, release, keys)
        if split is not None:
            return split
        if bounded(plan):
            # The Gaussian bound covers the split release only: fail closed.
            raise ValueError(f"the split 2-way release has no dominated shape: {why}")
    return selected_release(release, keys)


def bounded(plan: SessionPlan) -> bool:
    """Whether the plan's split 2-way release is accounted by its Gaussian bound (a
    calibrated noisy-greedy plan: ``params.privacy_record``) rather than its Renyi curve."""
    return (plan.accounting == "pld" and plan.selection is not None
            and plan.selection.mode == SelectionMode.NOISY_GREEDY)


def split_release(plan: SessionPlan, release: ReleaseSpec,
                  keys: tuple[str, ...]) -> tuple[ReleaseSpec | None, str]:
    """A split release over the kept pairs ``keys`` (PrivSyn's c^(2/3) shares, one group
    per pair size, ``dp.privsyn_allocation``), each group with the shape of
    :func:`params.noise_rules.run_time_group_shape`; or None with the reason when a group has
    no shape (its conditioning mass above its cap, or no verified match within the envelope)
    or the release's mean variance per count is not below the even two-server release's
    2 m / (2 rho): the release then falls back to that even two-server release. Public
    inputs only (the plan and the published pairs): both servers compute the same groups,
    and the compute server's manifest states them (:func:`noise_statement`)."""
    cells = {slot.attrs: slot.size for slot in plan.layout.two_way}
    chosen = [slot.attrs for slot in plan.layout.two_way if slot.key in set(keys)]
    cap = pair_failure_cap(plan.delta_conversion, len(plan.layout.two_way))
    top_weight = max(max(s.weights()) for s in plan.joint_shapes())
    if plan.one_way_topup:
        return _topped_up_split(plan, release, chosen, top_weight)
    parts = []
    for pairs, rho in allocation_groups(cells, chosen, release.rho):
        if bounded(plan):
            shape, why = _dominated_group_shape(plan, release, rho / len(pairs), top_weight)
        else:
            shape, why = run_time_group_shape(
                rho / len(pairs), plan.rho_total, plan.delta_conversion, plan.max_rows,
                plan.parameters, cap, release.joint, plan.joint_columns, top_weight)
        if shape is None:
            return None, f"pairs of {cells[pairs[0]]} cells: {why}"
        parts.append(ReleaseSpec(f"{release.name}/{cells[pairs[0]]}",
                                 plan.keys_of_pairs(pairs), rho,
                                 gaussian_sigma2(rho, len(pairs)), shape))
    split = replace(release, marginal_keys=keys,
                    sigma2=gaussian_sigma2(release.rho, len(keys)), parts=tuple(parts))
    variance, even = per_count_variance(plan, split), 2 * split.sigma2
    if variance >= even and not bounded(plan):
        return None, (f"its mean variance per count {float(variance):.3g} is not below "
                      f"the even two-server release's {float(even):.3g}")
    return split, ""


def _topped_up_split(plan: SessionPlan, release: ReleaseSpec, chosen: list[tuple[int, int]],
                     top_weight: int) -> tuple[ReleaseSpec | None, str]:
    """The split release that also tops up the 1-ways (``docs/privacy-plan.md``, "The 1-way
    top-up"): the kept pairs and the 1-ways share the publication by c^(2/3) per marginal,
    each 1-way holding its first release's rho / d as a floor, so the release's rho goes to
    the pairs and to each 1-way's top-up above its floor
    (``dp.privsyn_allocation.floored_groups``, exact: the groups' rho add up to the
    release's). Each group gets its dominated shape (:func:`_dominated_group_shape`); a
    top-up's budget may lie below the smallest pair budget the envelope is dominated at, and
    a top-up group with no dominated shape in the circuit is left out and the water-fill
    solved again without it (its 1-ways keep their first release only; the others share its
    budget: the water level only rises, so the pairs stay above the envelope's budget). A
    pair group with none fails closed (the envelope makes that impossible)."""
    layout = plan.layout
    cells = {slot.attrs: slot.size for slot in layout.marginals}
    floor = plan.release("one_way").rho / len(layout.one_way)
    left_out: set[tuple[int, ...]] = set()
    for _ in range(len(layout.one_way) + 1):  # bounded: a pass ends or leaves out a 1-way
        one_ways = [slot.attrs for slot in layout.one_way if slot.attrs not in left_out]
        parts, failed = [], []
        for topped, marginals, rho in floored_groups(cells, {a: floor for a in one_ways},
                                                     one_ways + chosen, release.rho):
            shape, why = _dominated_group_shape(plan, release, rho / len(marginals), top_weight)
            if shape is None and not topped:
                return None, f"pairs of {cells[marginals[0]]} cells: {why}"
            if shape is None:
                failed += marginals
                continue
            kind = f"{release.name}/one_way" if topped else release.name
            parts.append(ReleaseSpec(f"{kind}/{cells[marginals[0]]}",
                                     _keys(plan, marginals), rho,
                                     gaussian_sigma2(rho, len(marginals)), shape))
        if not failed:
            keys = _keys(plan, [m for part in parts for m in _attrs(plan, part)])
            return replace(release, marginal_keys=keys,
                           sigma2=gaussian_sigma2(release.rho, len(keys)),
                           parts=tuple(parts)), ""
        left_out.update(failed)
    raise AssertionError("every 1-way left out leaves pairs only, which end the loop")


def _keys(plan: SessionPlan, marginals: list[tuple[int, ...]]) -> tuple[str, ...]:
    """The keys of ``marginals`` (1-ways or pairs), in layout order."""
    wanted = set(marginals)
    return tuple(slot.key for slot in plan.layout.marginals if slot.attrs in wanted)


def _attrs(plan: SessionPlan, part: ReleaseSpec) -> list[tuple[int, ...]]:
    return [slot.attrs for slot in plan.slots_of(part)]


def _dominated_group_shape(plan: SessionPlan, release: ReleaseSpec, rho_per_marginal: Fraction,
                           top_weight: int) -> tuple[JointNoiseShape | None, str]:
    """A group's shape under the Gaussian bound: the least-variance shape the envelope's
    circuit carries that is (sqrt(2 rho_g), eta)-dominated; the envelope itself if the search
    finds none below it (it is dominated at the smallest per-marginal budget any selection
    gives a pair, so at every pair group's: ``params.noise_rules.dominated_envelope``); below
    that budget (a 1-way top-up's) any shape within the circuit's caps (bits per count,
    weights) and the count width's room. Verified here, not assumed, with its room in the
    count width."""
    eta = bound_eta(plan.delta_conversion, bound_marginals(plan.layout, plan.one_way_topup))
    envelope = release.joint
    rho = Fraction(rho_per_marginal)
    mu = mu_at_most(rho_per_marginal)
    shape = (dominated_shape(rho, eta, plan.joint_columns, envelope.span, top_weight)
             or dominated_shape(rho, eta, plan.joint_columns, envelope.span, top_weight,
                                envelope.variance))
    if shape is None and shape_dominated(envelope.uniforms, envelope.bits, mu, eta,
                                         envelope.wider):
        shape = envelope
    if shape is None:
        # Below the envelope's budget (a 1-way top-up's), the circuit's own caps: its bits
        # per count and weights, and a span the count width has room for (checked below; the
        # key server's floor is the widest part's, ``ReleaseSpec.key_server_noise_bound``).
        # Every such shape has uniforms of at most 2 top_weight values, so its variance is
        # below ``most``: the search covers them all.
        room = 2 * ((1 << (plan.parameters.count_bits - 1)) - 1 - plan.max_rows)
        most = Fraction(room * (2 * top_weight + 1), 12)
        shape = dominated_shape(rho, eta, plan.joint_columns, room, top_weight, most)
    if shape is None or not shape_dominated(shape.uniforms, shape.bits, mu, eta, shape.wider):
        return None, "no shape within the envelope is dominated by its Gaussian budget"
    try:
        check_room(shape, plan.max_rows, plan.parameters.count_bits)
    except ValueError as exc:
        return None, str(exc)
    return shape, ""


def noise_statement(release: ReleaseSpec) -> str:
    """What noise a resolved release's counts carry, in one line: the compute server sends
    it with its manifest and the key server compares it with its own before it decrypts
    anything (a release decided at run time must be decided alike at both servers: a
    compute server that added its Gaussian while the key server adds nothing would know the
    published noise)."""
    if release.parts:
        return "joint " + "; ".join(
            f"{p.name} {p.joint.label} on {' '.join(p.marginal_keys)}"
            for p in release.parts)
    if release.joint is not None:
        return f"joint {release.joint.label}"
    return f"two-server sigma2 {release.sigma2}"


def cell_noises(plan: SessionPlan,
                release: ReleaseSpec) -> list[tuple[np.ndarray, JointNoiseShape | None]]:
    """(cell positions, joint shape or None) covering a resolved release's cells: one
    entry, or one per group of a split release.

    Fails closed: on a joint release, a group without a shape, or a cell of the release in no
    group, raises :class:`MissingNoise` (a count must never be released without its noise);
    None is returned only for a two-server release, whose noise is each server's own."""
    if release.parts:
        parts = [(plan.layout.cells_of(plan.slots_of(part)), part.joint)
                 for part in release.parts]
    else:
        parts = [(plan.layout.cells_of(plan.slots_of(release)), release.joint)]
    if release.joint is None:  # two-server: each server's own noise, no shape
        if any(part.joint is not None for part in release.parts):
            raise MissingNoise(f"release {release.name!r} is two-server but a group of it "
                               "carries a joint shape; nothing is released")
        return parts
    shapeless = [part.name for part in release.parts if part.joint is None]
    if shapeless:
        raise MissingNoise(f"release {release.name!r}: no joint noise shape for its groups "
                           f"{shapeless}; nothing is released")
    covered = np.concatenate([positions for positions, _ in parts]) if parts else np.zeros(0)
    cells = plan.layout.cells_of(plan.slots_of(release))
    if len(covered) != len(cells) or set(covered.tolist()) != set(cells.tolist()):
        raise MissingNoise(f"release {release.name!r}: its groups' noise covers "
                           f"{len(set(covered.tolist()) & set(cells.tolist()))} of its "
                           f"{len(cells)} cells; nothing is released")
    return parts


def per_count_variance(plan: SessionPlan, release: ReleaseSpec) -> Fraction:
    """Var(published - true) of a count of the resolved release, by construction; for a
    split release the mean over its cells (each group's own is its part's)."""
    if not release.parts:
        return release.per_count_variance
    total, cells = Fraction(0), 0
    for part in release.parts:
        size = sum(slot.size for slot in plan.slots_of(part))
        total += size * part.per_count_variance
        cells += size
    return total / cells


def select_pairs(plan: SessionPlan, scores: dict[tuple[int, int], float]) -> list[tuple[int, int]]:
    """noisy-greedy's pairs from the noisy scores, the key server's rule (and the bench's
    mirror of it): PrivSyn's greedy rule priced with the 2-way release's allocation, even or
    c^(2/3) over the kept pairs; where the release tops up the 1-ways, priced with the 1-ways
    in the allocation of the publication (both releases' rho) and each pair at the variance
    of the shape its budget gets (:func:`variance_ratio`)."""
    two_way = plan.release("two_way")
    cells = {slot.attrs: slot.size for slot in plan.layout.two_way}
    if plan.one_way_topup:
        prices: dict[int, float] = {}  # one search per grid point of the pass

        def ratio(rho: float) -> float:
            point = round(math.log(rho) * _PRICE_GRID)
            if point not in prices:
                prices[point] = _variance_ratio(plan, point)
            return prices[point]

        return greedy_select_with_one_ways(
            scores, cells, [slot.size for slot in plan.layout.one_way],
            plan.release("one_way").rho + two_way.rho, ratio)
    rule = greedy_select_allocated if two_way.allocation == "privsyn" else greedy_select
    return rule(scores, cells, two_way.rho)


# Pricing budgets are rounded to this grid of log rho, so that a greedy pass asks for few
# distinct shapes (each search is cached).
_PRICE_GRID = 8


def variance_ratio(plan: SessionPlan, rho: float) -> float:
    """The variance of the shape a split release's group at ``rho`` per marginal gets, over
    its Gaussian's 1 / (2 rho), at rho rounded to a grid of log rho (a price for the greedy
    rule, not a guarantee): the group's dominated shape within the envelope
    (:func:`_dominated_group_shape`), else the least-variance dominated shape within the
    rule's caps; 1 where there is none."""
    return _variance_ratio(plan, round(math.log(rho) * _PRICE_GRID))


def _variance_ratio(plan: SessionPlan, grid_point: int) -> float:
    rho = Fraction(math.exp(grid_point / _PRICE_GRID)).limit_denominator(10 ** 15)
    envelope = plan.release("two_way")
    top = max(max(s.weights()) for s in plan.joint_shapes())
    shape, _ = _dominated_group_shape(plan, envelope, rho, top)
    if shape is None:
        eta = bound_eta(plan.delta_conversion, bound_marginals(plan.layout, plan.one_way_topup))
        room = 2 * ((1 << (plan.parameters.count_bits - 1)) - 1 - plan.max_rows)
        shape = dominated_shape(rho, eta, JOINT_MAX_BITS_PER_CALL // plan.parameters.chunk_cells,
                                room, 1 << (MAX_SHAPE_BITS - 1))
    return 1.0 if shape is None else float(shape.variance) * 2 * float(rho)
