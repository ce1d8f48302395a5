"""A session's public plan: the layout, the releases, and the noise each release carries.

:meth:`SessionPlan.build` splits the session's budget over its releases and selection,
reserves the selection's failure terms and the joint noises' conditioning mass out of delta
before converting the rest to zCDP (a bounded fixed-point iteration), gives each release the
noise the rules allow (``params.noise_rules``) and confirms the whole session with the exact
curves (:meth:`SessionPlan.check_joint`).

Claim: the releases and the selection compose to at most the session's rho, and the
delivered (epsilon, delta) is the requested one: the conversion's delta plus the reserved
terms is at most delta, and where joint noises are used the end-to-end check confirms it or
the plan is refused (fails closed). The argument is ``docs/privacy-plan.md``, sections
"Composition and conversion" and "The joint release"; each view's own bound is in
"Neighbours and the two-server noise".

The public record (``params.plan_record``) and the run-time resolution of a release
(``params.run_time``) are methods here so that a plan is the one handle both servers use.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from feddpsyn.common import wire
from feddpsyn.crypto.joint_noise import columns_for
from feddpsyn.dp.accounting import eps_delta_to_rho, gaussian_sigma2
from feddpsyn.dp.binomial_accounting import RDP_ORDERS, session_delta_of
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape, orders_for
from feddpsyn.dp.noise_pool import NoiseDraw
from feddpsyn.dp.pair_selection import expected_counts_for_pairs
from feddpsyn.params import plan_record, run_time
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.indif_widths import (
    TYPICAL_MULTIPLE,
    Typical,
    chunks_by_width,
    narrow_widths,
    wrap_margin,
)
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.dp.pld_accounting import calibrate
from feddpsyn.params.budget_split import default_split
from feddpsyn.params.privacy_record import accounted_epsilon, plan_mechanisms
from feddpsyn.params.noise_rules import (JOINT_TAIL, dominated_envelope, envelope_shape_for,
                                         joint_shape_for, pair_failure_cap, score_shape_for)
from feddpsyn.params.parameter_sets import ParameterSet, get_parameter_set
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.release_chunks import ReleaseChunk, chunks_of_release
from feddpsyn.params.release_spec import (ReleaseSpec, noise_draws, noise_label, release_count,
                                          split_share, two_way_rho)
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import (DEFAULT_SPLITS, EmSelection, NoisyGreedySelection,
                                            RowBound, SelectionPlan, indif_chunks, row_bound)

__all__ = ["SessionPlan"]

# A calibrated plan's accounted eps lies in [CALIBRATION_LOW, 1] x the requested eps.
CALIBRATION_LOW = 0.99

@dataclass(frozen=True)
class SessionPlan:
    schema: Schema
    layout: MarginalLayout
    parameters: ParameterSet
    epsilon: float
    delta: float
    rho_total: Fraction
    releases: tuple[ReleaseSpec, ...]
    selection: EmSelection | NoisyGreedySelection | None = None
    # The delta of the zCDP -> (eps, delta) conversion: the requested delta minus the
    # selection's reserved terms (``build``). None: the requested delta (no selection).
    delta_conversion_: float | None = None
    # The public bound on the union's rows the widths were chosen for (0: not known here).
    max_rows: int = 0
    # "pld": every noise is fixed before any data and rho_total was calibrated so that their
    # composed PLD spends the requested eps (``params.privacy_record``); "rdp": the Renyi
    # bound of the zCDP conversion and the exact curves (a noise decided at run time).
    accounting: str = "rdp"
    # noisy-greedy's split 2-way release under its Gaussian bound also tops up the 1-ways
    # (``params.run_time``); asked for by ``PlanRequest.one_way_topup``, set only where the
    # release is split and bounded.
    one_way_topup: bool = False

    @property
    def delta_conversion(self) -> float:
        return self.delta if self.delta_conversion_ is None else self.delta_conversion_

    @classmethod
    def build(cls, request: PlanRequest) -> SessionPlan:
        """The session's plan for ``request``. With a selection, its failure terms
        (bootstraps, the row bound, noisy-greedy's noise tail) are reserved out of ``delta``
        before the budget is converted to zCDP, so that the conversion's delta plus the
        terms is at most ``delta`` (``params.selection_plan``); the terms depend on the
        widths, which depend on rho, so the reserve is found by a short fixed-point iteration
        (bounded, fails closed). The joint releases' conditioning mass is reserved the same
        way (``docs/privacy-plan.md``, "Composition and conversion"). Where every noise is
        fixed before any data (``params.privacy_record``), the budget is then calibrated on
        the noises' composed PLD so that the session spends the eps asked
        (:meth:`_calibrated`); ``request.calibrated=False`` keeps the zCDP conversion's
        budget (the benchmark's what-if simulations, which account their variants
        themselves)."""
        split_two_way, joint_scores = True, True
        for _ in range(3):  # bounded: each retry drops one joint part
            plan = cls._settled(request, split_two_way=split_two_way, joint_scores=joint_scores,
                                exact=request.calibrated)
            try:
                if request.calibrated and plan_mechanisms(plan) is not None:
                    # Confirmed by the composed PLD of its noises (the start of the
                    # calibration fails closed if it is above eps).
                    return cls._calibrated(plan, request, split_two_way, joint_scores)
                plan.check_joint()
                return plan
            except ValueError:
                # The split release and the joint scores are counted as zCDP on the
                # conversion's orders only; where that grid does not confirm the session,
                # "auto" gives the release its even two-server form first, then the scores
                # their two servers' Gaussians (``docs/privacy-plan.md``, "When the split
                # is refused at build").
                if request.noise != NoiseMode.AUTO:
                    raise
                if any(r.split_pending for r in plan.releases):
                    split_two_way = False
                elif plan.noisy_greedy is not None and plan.noisy_greedy.score_joint is not None:
                    joint_scores = False
                else:
                    raise
        raise ValueError("the session's joint parts did not confirm")

    @classmethod
    def _calibrated(cls, plan: SessionPlan, request: PlanRequest, split_two_way: bool,
                    joint_scores: bool) -> SessionPlan:
        """``plan`` with the largest rho_total whose noises' composed PLD stays within the
        requested eps at the conversion's delta (``dp.pld_accounting.calibrate``): the zCDP
        conversion's plan leaves about a tenth of the noise scale unspent. Every candidate is
        a whole plan built by the same rules at that rho and accounted as built, so the
        result is sound whatever the rules do with the larger budget; the zCDP plan is the
        floor (it is returned, accounted, if no larger rho fits)."""
        built = {plan.rho_total: plan}

        def epsilon_at(rho: Fraction) -> float:
            if rho not in built:
                built[rho] = cls._settled(request, split_two_way=split_two_way,
                                          joint_scores=joint_scores, rho_total=rho, exact=True)
            candidate = built[rho]
            return accounted_epsilon(candidate)

        start_eps = epsilon_at(plan.rho_total)
        if start_eps > plan.epsilon:
            raise ValueError(f"the plan's noises account to eps {start_eps:.4g} at delta "
                             f"{plan.delta_conversion:.3g}, above {plan.epsilon}")
        ratio = (plan.epsilon * (1 + CALIBRATION_LOW) / 2) / start_eps
        start = plan.rho_total * Fraction(ratio * ratio).limit_denominator(10 ** 9)
        try:
            rho, _ = calibrate(epsilon_at, plan.epsilon, start, low=CALIBRATION_LOW)
        except ValueError:
            rho = plan.rho_total
        # The zCDP plan was accounted within eps above: never return less than it.
        rho = max(rho, plan.rho_total)
        best, eps = built[rho], epsilon_at(rho)
        if eps < CALIBRATION_LOW * plan.epsilon:
            best = cls._filled(best, eps, request, split_two_way, joint_scores)
        return replace(best, accounting="pld")

    @classmethod
    def _filled(cls, plan: SessionPlan, eps: float, request: PlanRequest, split_two_way: bool,
                joint_scores: bool) -> SessionPlan:
        """A calibrated ``plan`` whose eps is still below the band: at large eps the joint
        shapes are coarse, and one more step of rho moves every release to its next shape
        at once, past the eps asked. Here one part of the budget at a time (the largest
        first) takes the slack alone, the others keeping their rho: the split moves a
        little off its default, every candidate is built by the rules and accounted."""
        epsilon = request.epsilon
        base = dict(request.split) if request.split is not None else default_split(
            request.selection, [m.size for m in plan.layout.one_way],
            [m.size for m in plan.layout.two_way], request.epsilon, request.delta,
            request.max_rows)
        for name in sorted(base, key=lambda k: -base[k]):
            if not base[name] or name == "selection":
                continue  # the selection's share is not a noise of its own to fill
            rho = plan.rho_total
            parts = {k: rho * Fraction(v) for k, v in base.items()}
            built = {rho: plan}

            def epsilon_at(total: Fraction, name=name, parts=parts, built=built) -> float:
                if total not in built:
                    grown = {k: float(parts[k] / total) for k in parts}
                    grown[name] = float((parts[name] + total - rho) / total)
                    built[total] = cls._settled(replace(request, split=grown),
                                                split_two_way=split_two_way,
                                                joint_scores=joint_scores, rho_total=total,
                                                exact=True)
                candidate = built[total]
                return accounted_epsilon(candidate)

            ratio = (epsilon * (1 + CALIBRATION_LOW) / 2) / eps
            start = rho + parts[name] * Fraction(ratio * ratio - 1).limit_denominator(10 ** 9)
            try:
                total, found = calibrate(epsilon_at, epsilon, start, low=CALIBRATION_LOW,
                                         steps=6)
            except ValueError:
                continue
            if found > eps:
                plan, eps = built[total], found
            if eps >= CALIBRATION_LOW * epsilon:
                break
        return plan

    @classmethod
    def _settled(cls, request: PlanRequest, split_two_way: bool, joint_scores: bool = True,
                 rho_total: Fraction | None = None, exact: bool = False) -> SessionPlan:
        """:meth:`_build` at the conversion delta that leaves room for the reserved terms
        (a short fixed-point iteration, bounded, fails closed); ``rho_total``: the budget
        to plan with (default: the zCDP conversion's at that delta)."""
        delta = request.delta
        reserved = 0.0
        for _ in range(8):
            plan = cls._build(request, delta - reserved, split_two_way, joint_scores, rho_total,
                              exact)
            need = sum(plan.delta_terms().values())
            if need <= reserved:
                break
            reserved = need * (1 + 1e-9)
            if reserved > delta / 2:
                break  # refused below; planning at a conversion delta <= 0 is meaningless
        else:
            raise ValueError("the selection's delta reserve did not settle")
        if reserved > delta / 2:
            remedy = ("or select fewer rounds" if request.selection == SelectionMode.EM else
                      "or a smaller epsilon (the bootstrap term grows as 1 + e^eps)")
            raise ValueError(
                f"the selection's failure terms need delta >= {2 * reserved:.3g} (bootstraps "
                f"x p_error and the row bound, {reserved:.3g} in all, may take at most half of "
                f"delta = {delta:g}): raise delta {remedy}")
        return plan

    @classmethod
    def _build(cls, request: PlanRequest, delta_conversion: float, split_two_way: bool = True,
               joint_scores: bool = True, rho_total: Fraction | None = None,
               exact: bool = False) -> SessionPlan:
        schema, epsilon, delta = request.schema, request.epsilon, request.delta
        selection, noise, max_rows = request.selection, request.noise, request.max_rows
        split = request.split
        params = get_parameter_set(request.parameter_set)
        layout = MarginalLayout.build(schema.domain_sizes, request.pairs)
        if not layout.two_way:
            raise ValueError("a session needs at least one 2-way marginal")
        if split is None and selection in DEFAULT_SPLITS:
            split = default_split(selection, [m.size for m in layout.one_way],
                                  [m.size for m in layout.two_way], epsilon, delta, max_rows)
        split = {} if split is None else split
        expected = set(DEFAULT_SPLITS.get(selection, {"one_way": 0, "two_way": 0}))
        if set(split) != expected:
            raise ValueError(f"selection '{selection}' splits the budget over "
                             f"{sorted(expected)}")
        if rho_total is None:
            rho_total = eps_delta_to_rho(epsilon, delta_conversion)

        def share(name: str) -> Fraction:
            return split_share(rho_total, split[name])

        chosen: EmSelection | NoisyGreedySelection | None = None
        if selection != SelectionMode.NONE:
            planned = SelectionPlan.build(selection, len(layout.two_way), max_rows,
                                          share("selection"), request.rounds,
                                          parameters=request.selection_set)
            assert isinstance(planned, EmSelection | NoisyGreedySelection)
            chosen = planned.with_fhe_room([m.size for m in layout.two_way], epsilon, delta)
        if (isinstance(chosen, NoisyGreedySelection) and noise != NoiseMode.TWO_SERVER
                and joint_scores):
            chosen = cls._with_score_noise(chosen, noise, rho_total, delta_conversion)
        one_way = ReleaseSpec("one_way", tuple(m.key for m in layout.one_way),
                              share("one_way"),
                              gaussian_sigma2(share("one_way"), len(layout.one_way)))
        if chosen is None:
            rho_two, keys, count = share("two_way"), tuple(m.key for m in layout.two_way), None
        else:
            rho_two = two_way_rho(rho_total, split, chosen.rho_charged)
            # em: the rounds; noisy-greedy: the worst case, every pair.
            keys = ()
            count = (chosen.rounds if isinstance(chosen, EmSelection)
                     else len(layout.two_way))
        two_way = ReleaseSpec("two_way", keys, rho_two,
                              gaussian_sigma2(rho_two, count or len(keys)))
        releases = (one_way, two_way)
        # Refused early (and fast) if even the two servers' noise does not fit: a release the
        # joint rule declines falls back to it.
        cls(schema, layout, params, epsilon, delta, rho_total, releases, chosen,
            delta_conversion, max_rows).check_capacity(max_rows)
        # The top-up is accounted by the split release's Gaussian bound only (calibrated).
        topup = request.one_way_topup and exact and isinstance(chosen, NoisyGreedySelection)
        if noise != NoiseMode.TWO_SERVER:
            releases = tuple(cls._with_noise(r, noise, rho_total, delta_conversion, max_rows,
                                             params, chosen, layout, split_two_way, exact,
                                             one_way.rho if topup else None)
                             for r in releases)
        # exact: every noise is fixed before any data, or noisy-greedy's split release is
        # bounded by its Gaussian (``params.privacy_record``); the plan is then accounted by
        # its composed PLD. noisy-greedy's even release keeps the Renyi bound.
        late = isinstance(chosen, NoisyGreedySelection)
        accounting = "pld" if exact and (not late or releases[1].split_pending) else "rdp"
        topup = topup and releases[1].split_pending
        plan = cls(schema, layout, params, epsilon, delta, rho_total, releases,
                   chosen, delta_conversion, max_rows, accounting, topup)
        plan.check_capacity(max_rows)
        if chosen is not None:
            # P2's narrower widths, from the published 1-ways' noise (params.indif_widths).
            widths = narrow_widths(chosen.indif_bits, plan.wrap_margin(), max_rows,
                                   TYPICAL_MULTIPLE)
            plan = replace(plan, selection=replace(
                chosen, indif_widths=widths, indif_typical=TYPICAL_MULTIPLE if widths else None))
        return plan

    @staticmethod
    def _with_score_noise(chosen: NoisyGreedySelection, noise: NoiseMode, rho_total: Fraction,
                          delta_conversion: float) -> NoisyGreedySelection:
        """noisy-greedy's scores with the joint shape :func:`score_shape_for` gives them, or
        two-server where it refuses (noise "joint": refused)."""
        shape, why = score_shape_for(chosen.pairs, chosen.rho, rho_total, delta_conversion)
        if shape is None:
            if noise == NoiseMode.JOINT:
                raise ValueError(f"noisy-greedy's scores cannot carry the joint noise: {why}; "
                                 "use noise 'auto' (two-server where it does not fit)")
            return chosen
        return replace(chosen, score_joint=shape,
                       joint_failure=chosen.pairs * shape.pair().failure(JOINT_TAIL))

    @staticmethod
    def _with_noise(spec: ReleaseSpec, noise: NoiseMode, rho_total: Fraction,
                    delta_conversion: float, max_rows: int, params: ParameterSet,
                    chosen: EmSelection | NoisyGreedySelection | None,
                    layout: MarginalLayout,
                    split_two_way: bool = True, exact: bool = False,
                    topup_floor: Fraction | None = None) -> ReleaseSpec:
        """``spec`` with the joint shape the rule gives it (``params.noise_rules``);
        noisy-greedy's 2-way release: its envelope and PrivSyn's split, or the even two-server
        release; ``topup_floor``: the 1-ways' rho, where that release tops them up (its
        envelope is then sized for the pairs' water-fill with the 1-ways)."""
        if spec.name == "two_way" and isinstance(chosen, NoisyGreedySelection):
            envelope = (functools.partial(dominated_envelope, one_way_rho=topup_floor) if exact
                        else functools.partial(envelope_shape_for, rho_total=rho_total))
            shape, why = (envelope(layout=layout, rho=spec.rho,
                                   delta_conversion=delta_conversion, max_rows=max_rows,
                                   parameters=params) if split_two_way else
                          (None, "the conversion's orders do not confirm the session with "
                                 "its split release"))
            allocation = "privsyn" if shape is not None else "even"
        else:
            shape, why = joint_shape_for(spec, rho_total, delta_conversion, max_rows, params)
            allocation = spec.allocation
        if shape is None and noise == NoiseMode.JOINT:
            raise ValueError(f"release {spec.name!r} cannot carry the joint noise: {why}; "
                             "use noise 'auto' (two-server where it does not fit)")
        return replace(spec, joint=shape, allocation=allocation)

    @property
    def noisy_greedy(self) -> NoisyGreedySelection | None:
        """The selection, where it is noisy-greedy's (its scores' noise and pair count);
        None for em or no selection."""
        return self.selection if isinstance(self.selection, NoisyGreedySelection) else None

    @property
    def joint_columns(self) -> int:
        """Encrypted bits per cell of the session's P1 circuit: the widest joint shape's K
        (``crypto.joint_noise.columns_for``), or 0 with no joint release (the plain P1)."""
        shapes = self.joint_shapes()
        return columns_for(shapes) if shapes else 0

    def joint_shapes(self) -> list[JointNoiseShape]:
        return [r.joint for r in self.releases if r.joint is not None]

    def joint_failure(self) -> float:
        """The joint releases' conditioning mass, a delta term (``docs/privacy-plan.md``); an
        unresolved split release reserves its worst case, every pair at
        :func:`pair_failure_cap`."""
        return sum(self._split_reserve() if r.split_pending else r.failure()
                   for r in self.releases)

    def _split_reserve(self) -> float:
        if self.accounting == "pld":
            return 0.0  # its eta is inside the Gaussian bound, accounted in the PLD
        pairs = len(self.layout.two_way)
        return pairs * pair_failure_cap(self.delta_conversion, pairs)

    def check_privacy(self) -> None:
        """Confirm the session's (eps, delta) end to end, fails closed: a calibrated plan by
        the composed PLD of its noises (``params.privacy_record``), any other by the exact
        Renyi curves (:meth:`check_joint`)."""
        if self.accounting != "pld":
            self.check_joint()
            return
        eps = accounted_epsilon(self)
        if eps is None or eps > self.epsilon:
            raise ValueError(f"the noises' composed PLD gives eps {eps} at delta "
                             f"{self.delta_conversion:.4g}, above {self.epsilon}")

    def check_joint(self) -> None:
        """Confirm the session end to end with the joint releases' exact curves: their
        conditioned Renyi divergences (M-fold) plus the zCDP parts' a rho at every order,
        converted to delta at the session's eps, plus their conditioning mass, must stay
        within the conversion's delta plus that mass (``dp.binomial_accounting``'s rule).
        Fails closed: a plan that does not confirm is refused."""
        joint = [r for r in self.releases if r.joint is not None and not r.split_pending]
        split = [r for r in self.releases if r.split_pending]
        greedy = self.noisy_greedy
        scores = None if greedy is None else greedy.score_joint
        if not joint and not split and scores is None:
            return
        rho_rest = self.rho_total - sum((r.rho for r in joint), start=Fraction(0))
        parts = [(r.joint.pair(), release_count(r), JOINT_TAIL) for r in joint]
        failures = sum(r.failure() for r in joint)
        if greedy is not None and scores is not None:
            # noisy-greedy's scores: one joint noise each, a record moves every score by 1.
            rho_rest -= greedy.rho_charged
            parts.append((scores.pair(), greedy.pairs, JOINT_TAIL))
            failures += greedy.joint_failure
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
        """The session's public record (:func:`params.plan_record.public_record`)."""
        return plan_record.public_record(self, session_id, clients, bootstraps)

    @classmethod
    def from_public(cls, public: wire.SessionPublic) -> SessionPlan:
        """The plan a public record describes (:func:`params.plan_record.plan_fields`)."""
        return cls(**plan_record.plan_fields(public))

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
        """The release with its marginals (:func:`params.run_time.resolve`)."""
        return run_time.resolve(self, release, selected)

    def select_pairs(self, scores: dict[tuple[int, int], float]) -> list[tuple[int, int]]:
        """noisy-greedy's pairs from the noisy scores (:func:`params.run_time.select_pairs`)."""
        return run_time.select_pairs(self, scores)

    def split_release(self, release: ReleaseSpec,
                      keys: tuple[str, ...]) -> tuple[ReleaseSpec | None, str]:
        """A split release over the kept pairs, or None with the reason it falls back
        (:func:`params.run_time.split_release`)."""
        return run_time.split_release(self, release, keys)

    def noise_statement(self, release: ReleaseSpec) -> str:
        """The resolved release's noise in one line
        (:func:`params.run_time.noise_statement`)."""
        return run_time.noise_statement(release)

    def cell_noises(self, release: ReleaseSpec) -> list[tuple[np.ndarray, JointNoiseShape | None]]:
        """(cell positions, joint shape or None) per part of a resolved release
        (:func:`params.run_time.cell_noises`)."""
        return run_time.cell_noises(self, release)

    def per_count_variance(self, release: ReleaseSpec) -> Fraction:
        """Var(published - true) of a count of the resolved release
        (:func:`params.run_time.per_count_variance`)."""
        return run_time.per_count_variance(self, release)

    def noise_label(self, release: ReleaseSpec) -> str:
        """The pool label of a resolved release's noise
        (:func:`params.release_spec.noise_label`)."""
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
        greedy = self.noisy_greedy
        gaussian_scores = greedy is not None and greedy.score_joint is None
        return noise_draws(self.layout, self.releases, mode,
                           greedy.noise_sigma2 if greedy is not None and gaussian_scores
                           else None)

    def keys_of_pairs(self, pairs: list[tuple[int, int]]) -> tuple[str, ...]:
        """The marginal keys of ``pairs``, in layout order."""
        keys = {self.layout.slot(tuple(p)).key for p in pairs}
        return tuple(m.key for m in self.layout.two_way if m.key in keys)

    def indif_chunks(self) -> list[tuple[int, np.ndarray, int]]:
        """P2's chunks in layout order (their sizes; what the plan's cost and bootstrap
        bounds count)."""
        return indif_chunks(self.layout, self.selection.chunk_sizes)

    def wrap_margin(self) -> float:
        """The tail t of the published 1-ways' noise that P2's cell bounds leave room for
        (``params.indif_widths``)."""
        return wrap_margin(*self.release("one_way").row_bound_noise())

    def indif_chunks_by_width(self, one_way: list) -> list[tuple[int, np.ndarray, int, int]]:
        """P2's chunks as both servers run them once the 1-ways are published: (candidate
        index, cells, size, width), each pair's cells ordered by their public bound (capped
        by the typical one where the record names z) and each chunk at the narrowest compiled
        width that holds it (``params.indif_widths``)."""
        one = [np.asarray(counts, dtype=float) for counts in one_way]
        expected = expected_counts_for_pairs(one, self.layout.pairs, self.selection.max_rows)
        z = self.selection.indif_typical
        typical = (None if z is None else
                   Typical.of(z, float(self.per_count_variance(self.release("one_way"))), one))
        return chunks_by_width(self.layout, self.selection.chunk_sizes,
                               self.selection.indif_bits, self.selection.indif_widths, one,
                               expected, self.wrap_margin(), self.selection.max_rows, typical)

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

    def release_chunks(self, release: ReleaseSpec) -> list[ReleaseChunk]:
        """The chunks of a resolved release and the cells each carries
        (:func:`params.release_chunks.chunks_of_release`)."""
        return chunks_of_release(self, release)

    def slots_of(self, release: ReleaseSpec):
        keys = set(release.marginal_keys)
        return [m for m in self.layout.marginals if m.key in keys]
