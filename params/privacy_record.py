"""A plan's privacy record: every noise the session adds, as mechanisms a PLD accountant reads.

Claim: for a plan whose noises are all fixed before any data (selection ``none`` or ``em``),
:func:`plan_mechanisms` lists every noise any view of the session contains, each with the
number of its counts one record moves by 1, so the composed PLD of the list
(``dp.pld_accounting``) bounds the session's privacy loss: the releases (a joint shape, or the
other server's discrete Gaussian, which alone protects each view: ``docs/privacy-plan.md``,
"Neighbours and the two-server noise"), and em's rounds, each pure (eps + 4 eta)-DP with its
fixed-point loss included (``crypto.tfhe_permute_and_flip``'s step). ``noisy-greedy`` splits its
2-way release over the pairs its selection keeps, so that release's noise is decided at run
time; its plan keeps the Renyi-curve guarantee (``accounting: rdp``) and the record names the
release in ``run_time``.

The record (:func:`privacy_record`) is published in the session's public record and the
release report, so anyone can re-account a session with the library alone.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from feddpsyn.common import wire
from feddpsyn.common.version import VERSION
from feddpsyn.dp.accounting import rho_to_eps
from feddpsyn.dp.lifetime import record_mechanisms as record_mechanisms  # re-exported
from feddpsyn.dp.pld_accounting import (
    DiscreteGaussian,
    GaussianBound,
    Mechanism,
    PureStep,
    UniformSum,
    epsilon_of,
    grid_for,
)
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.noise_rules import GAUSSIAN_BOUND_SHARE
from feddpsyn.params.release_spec import release_count
from feddpsyn.params.run_time import bounded

if TYPE_CHECKING:
    from feddpsyn.params.session_plan import SessionPlan

__all__ = ["plan_mechanisms", "run_time_releases", "privacy_record", "record_mechanisms",
           "accounted_epsilon", "charged_under", "epsilon_after"]


def run_time_releases(plan: SessionPlan) -> list[str]:
    """The releases whose noise is decided at run time (noisy-greedy's split 2-way release,
    or its even fallback: both depend on how many pairs the selection keeps)."""
    if plan.selection is None or plan.selection.mode != SelectionMode.NOISY_GREEDY:
        return []
    return [r.name for r in plan.releases if r.name == "two_way" and not r.marginal_keys]


def _release_mechanism(name: str, spec, counts: int) -> Mechanism:
    if spec.joint is not None:
        if spec.joint.wider:
            # Mixed widths are only taken by a split release's groups under the Gaussian
            # bound, which the record states as that bound (``plan_mechanisms``).
            raise ValueError(f"{name}: a mixed-width shape has no uniform_sum record")
        return UniformSum(name, spec.joint.uniforms, spec.joint.bits, counts)
    return DiscreteGaussian(name, spec.sigma2, counts)


def plan_mechanisms(plan: SessionPlan, *, fixed_only: bool = False) -> list[Mechanism] | None:
    """Every noise of the plan (module docstring), a split release bounded by its Gaussian
    (:func:`params.run_time.bounded`) as that bound; None where a release's noise is decided
    at run time without one (``fixed_only``: the fixed ones alone)."""
    late = set(run_time_releases(plan))
    gaussian = bool(late) and bounded(plan) and all(
        plan.release(name).split_pending for name in late)
    if late and not (fixed_only or gaussian):
        return None
    out: list[Mechanism] = []
    for spec in plan.releases:
        if spec.name in late:
            if gaussian and not fixed_only:
                out.append(GaussianBound(spec.name, spec.rho,
                                         GAUSSIAN_BOUND_SHARE * plan.delta_conversion))
            continue
        for part in spec.parts or (spec,):
            out.append(_release_mechanism(part.name, part, release_count(part)))
    selection = plan.selection
    if selection is not None and selection.mode == SelectionMode.EM:
        out.append(PureStep("selection_rounds", float(selection.step.epsilon_total),
                            selection.rounds))
    if selection is not None and selection.mode == SelectionMode.NOISY_GREEDY:
        scores = selection.score_joint
        out.append(UniformSum("selection_scores", scores.uniforms, scores.bits, selection.pairs)
                   if scores is not None else
                   DiscreteGaussian("selection_scores", selection.noise_sigma2, selection.pairs))
    return out


def accounted_epsilon(plan: SessionPlan) -> float | None:
    """The plan's eps at its conversion delta by the pessimistic PLD, or None where a noise
    is decided at run time."""
    mechanisms = plan_mechanisms(plan)
    return None if mechanisms is None else epsilon_of(mechanisms, plan.delta_conversion,
                                                      grid_for(plan.epsilon))


def _wire(mechanism: Mechanism) -> wire.UniformSumMechanism | wire.DiscreteGaussianMechanism \
        | wire.PureMechanism:
    if isinstance(mechanism, UniformSum):
        return wire.UniformSumMechanism(name=mechanism.name, uniforms=mechanism.uniforms,
                                        bits=mechanism.bits,
                                        counts_per_record=mechanism.counts_per_record)
    if isinstance(mechanism, DiscreteGaussian):
        return wire.DiscreteGaussianMechanism(name=mechanism.name,
                                              sigma2=str(Fraction(mechanism.sigma2)),
                                              counts_per_record=mechanism.counts_per_record)
    if isinstance(mechanism, GaussianBound):
        return wire.GaussianBoundMechanism(name=mechanism.name, rho=str(Fraction(mechanism.rho)),
                                           eta=mechanism.eta)
    return wire.PureMechanism(name=mechanism.name, epsilon=mechanism.epsilon,
                              count=mechanism.count)


def privacy_record(plan: SessionPlan, delta_reserved: float) -> wire.PrivacyRecord:
    """The plan's privacy record (module docstring); ``delta_reserved``: its reserved delta
    terms in all (``SessionPlan.delta_terms``)."""
    late = run_time_releases(plan)
    exact = plan_mechanisms(plan)
    mechanisms = exact if exact is not None else plan_mechanisms(plan, fixed_only=True) or []
    return wire.PrivacyRecord(
        epsilon=plan.epsilon, delta=plan.delta, delta_reserved=delta_reserved,
        accounting="pld" if exact is not None and plan.accounting == "pld" else "rdp",
        # At the record's own delta (its delta less the reserved terms it states, those of
        # the compiled module once it is known), so that the record re-accounts to exactly
        # this figure (``feddpsyn audit``); never above the plan's own, which reserves more.
        epsilon_accounted=None if exact is None else epsilon_of(
            exact, plan.delta - delta_reserved, grid_for(plan.epsilon)),
        mechanisms=[_wire(m) for m in mechanisms], run_time=late, version=VERSION)


# The ledger entry each mechanism's noise is charged under, where the names differ: the
# key server charges noisy-greedy's scores as its "selection" entry (``keyserver.ledger``).
LEDGER_ENTRY = {"selection_scores": "selection"}


def charged_under(mechanism: str) -> str:
    """The ledger entry a record's mechanism is spent by: a release's groups
    (``two_way/...``) under the release, the scores under ``selection``."""
    base = mechanism.split("/")[0]
    return LEDGER_ENTRY.get(base, base)


def epsilon_after(public: wire.SessionPublic, charged: list[tuple[str, Fraction]]) -> float:
    """The session's eps at its conversion delta once the ledger entries ``charged`` (name,
    rho) are spent: the PLD of their mechanisms in a calibrated session, else the zCDP
    conversion of their rho (the plan's own rule)."""
    if not charged:
        return 0.0
    record = public.privacy
    if record is None or record.accounting != "pld":
        spent = sum((Fraction(rho) for _, rho in charged), Fraction(0))
        return rho_to_eps(spent, public.conversion_delta()) if spent else 0.0
    names = {name for name, _ in charged}
    rounds = sum(1 for name in names if name.startswith("select-"))
    mechanisms: list[Mechanism] = []
    for mechanism in record_mechanisms(record):
        if isinstance(mechanism, PureStep):
            if rounds:
                mechanisms.append(PureStep(mechanism.name, mechanism.epsilon,
                                           min(rounds, mechanism.count)))
        elif charged_under(mechanism.name) in names:
            mechanisms.append(mechanism)
    if not mechanisms:
        return 0.0
    return epsilon_of(mechanisms, public.conversion_delta(), grid_for(record.epsilon))
