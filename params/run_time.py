"""A release resolved at run time: its marginals once the selection is published, the split
release's groups and their shapes, and the one-line statement of the noise it carries.

Claim: a resolved release is a function of the public plan and the published pairs only, so
both servers resolve it alike, and a split release's groups each take a verified shape
within the plan's envelope or the whole release falls back to the even two-server release;
the key server decrypts only what the compute server's statement of the noise matches
(``docs/privacy-plan.md``, "Releases after a selection" and "The split 2-way release").
:class:`params.session_plan.SessionPlan` exposes these as its methods.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from crypto.joint_noise import check_room
from dp.accounting import gaussian_sigma2
from dp.gaussian_domination import mu_at_most, shape_dominated
from dp.joint_noise_accounting import JointNoiseShape
from dp.privsyn_allocation import allocation_groups
from params.modes import SelectionMode
from params.noise_rules import bound_eta, dominated_shape, pair_failure_cap, run_time_group_shape
from params.release_spec import ReleaseSpec, selected_release

if TYPE_CHECKING:
    from params.session_plan import SessionPlan

__all__ = ["resolve", "bounded", "split_release", "noise_statement", "cell_noises",
           "per_count_variance"]


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


def _dominated_group_shape(plan: SessionPlan, release: ReleaseSpec, rho_per_marginal: Fraction,
                           top_weight: int) -> tuple[JointNoiseShape | None, str]:
    """A group's shape under the Gaussian bound: the least-variance shape the envelope's
    circuit carries that is (sqrt(2 rho_g), eta)-dominated; the envelope itself if the search
    finds none below it (it is dominated at the smallest per-marginal budget any selection
    gives, so at every group's: ``params.noise_rules.dominated_envelope``). Verified here,
    not assumed, with its room in the count width."""
    eta = bound_eta(plan.delta_conversion, len(plan.layout.two_way))
    envelope = release.joint
    shape = (dominated_shape(Fraction(rho_per_marginal), eta, plan.joint_columns,
                             envelope.span, top_weight)
             or dominated_shape(Fraction(rho_per_marginal), eta, plan.joint_columns,
                                envelope.span, top_weight, envelope.variance)
             or envelope)
    if not shape_dominated(shape.uniforms, shape.bits, mu_at_most(rho_per_marginal), eta):
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
            f"{p.name} {p.joint.uniforms}x{p.joint.bits} on {' '.join(p.marginal_keys)}"
            for p in release.parts)
    if release.joint is not None:
        return f"joint {release.joint.uniforms}x{release.joint.bits}"
    return f"two-server sigma2 {release.sigma2}"


def cell_noises(plan: SessionPlan,
                release: ReleaseSpec) -> list[tuple[np.ndarray, JointNoiseShape | None]]:
    """(cell positions, joint shape or None) covering a resolved release's cells: one
    entry, or one per group of a split release."""
    if release.parts:
        return [(plan.layout.cells_of(plan.slots_of(part)), part.joint)
                for part in release.parts]
    return [(plan.layout.cells_of(plan.slots_of(release)), release.joint)]


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
