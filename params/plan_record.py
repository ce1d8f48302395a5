"""The session's public record and back: the one mapping from which both servers, and anyone
holding the release, derive the same plan.

Claim: everything that sizes a server's view (the releases' exact rho and sigma2, their
joint shapes, a split release's envelope, the selection's widths and budget) is fixed
before any data and stated in this record (``docs/privacy-plan.md``, "The split 2-way
release", "What sizes a view is fixed before any data"); a plan read back from it
(:func:`plan_fields`) is the plan that wrote it. :class:`params.session_plan.SessionPlan`
exposes the mapping as ``to_public`` and ``from_public``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from feddpsyn.common import wire
from feddpsyn.common.version import VERSION
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.parameter_sets import ParameterSet
from feddpsyn.params.privacy_record import privacy_record
from feddpsyn.params.release_spec import ReleaseSpec
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import SelectionPlan
from feddpsyn.params.shape_record import public_shape, shape_of

if TYPE_CHECKING:
    from feddpsyn.params.session_plan import SessionPlan

__all__ = ["public_record", "plan_fields"]


def public_record(plan: SessionPlan, session_id: str, clients: list[str],
                  bootstraps: int | None = None) -> wire.SessionPublic:
    """The session's public record. ``bootstraps``: the selection module's compiled count
    (its delta terms are computed from it)."""
    selection = None
    if plan.selection is not None:
        selection = plan.selection.to_public(
            plan.pair_cells(), plan.used_chunk_sizes(), plan.epsilon, plan.delta,
            plan.selection_delta_terms(bootstraps), bootstraps)
    return wire.SessionPublic(
        session_id=session_id, schema=plan.schema.to_dict(),
        schema_fingerprint=plan.schema.fingerprint(), clients=clients,
        pairs=plan.layout.pairs, parameter_set=plan.parameters.to_dict(),
        total_cells=plan.layout.total_cells,
        releases=[wire.ReleasePlan(
            name=r.name, marginals=list(r.marginal_keys), rho=str(r.rho),
            sigma2=str(r.sigma2), noise=r.noise_kind, allocation=r.allocation,
            per_count_variance=str(r.per_count_variance),
            joint=None if r.joint is None else public_shape(r.joint))
            for r in plan.releases],
        joint_delta=plan.joint_failure(),
        epsilon=plan.epsilon, delta=plan.delta, delta_conversion=plan.delta_conversion,
        rho_total=str(plan.rho_total), selection=selection,
        privacy=privacy_record(plan, sum(plan.delta_terms(bootstraps).values())),
        one_way_topup=plan.one_way_topup, version=VERSION)


def plan_fields(public: wire.SessionPublic) -> dict[str, Any]:
    """The plan's fields a public record describes (:func:`public_record`): layout, releases
    with their exact rho and sigma2, the selection's widths and budget."""
    schema = Schema.from_dict(public.schema_)
    layout = MarginalLayout.build(schema.domain_sizes, [tuple(p) for p in public.pairs])
    selection = (None if public.selection is None
                 else SelectionPlan.from_public(public.selection, len(layout.two_way)))
    releases = tuple(ReleaseSpec(r.name, tuple(r.marginals), Fraction(r.rho),
                                 Fraction(r.sigma2),
                                 None if r.joint is None else shape_of(r.joint),
                                 r.allocation)
                     for r in public.releases)
    return dict(schema=schema, layout=layout, parameters=ParameterSet(**public.parameter_set),
                epsilon=public.epsilon, delta=public.delta,
                rho_total=Fraction(public.rho_total), releases=releases, selection=selection,
                delta_conversion_=public.delta_conversion,
                max_rows=0 if selection is None else selection.max_rows,
                accounting="rdp" if public.privacy is None else public.privacy.accounting,
                one_way_topup=public.one_way_topup)
