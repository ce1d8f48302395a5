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
  2 sigma2); merging them into one noise that protects both views is an open improvement.
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
  chunk's encrypted bits (chunk_cells x K) stay within ``JOINT_MAX_BITS_PER_CALL``; noisy-
  greedy's 2-way release (its marginal count is known only at run time) stays two-server,
  as does a release whose matching shape would not lower the published variance (large
  eps: tiny noises) or would take over ``JOINT_DELTA_SHARE`` of delta in conditioning mass.
  The conditioning mass each joint release excludes (M x its per-count failure) is a delta
  term reserved out of delta like the selection's; :meth:`SessionPlan.check_joint` confirms
  the session's (eps, delta) end to end with the exact curves (fails closed).
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
from dp.binomial_accounting import session_delta_of
from dp.joint_noise_accounting import JointNoiseShape, release_marginals
from dp.noise_pool import NoiseDraw
from params.layout import MarginalLayout
from params.parameter_sets import ParameterSet, get_parameter_set
from params.schema import Schema
from params.selection_plan import (DEFAULT_SPLITS, RowBound, SelectionPlan, chunk_sizes_for,
                                   row_bound)

__all__ = ["ReleaseSpec", "SessionPlan", "NOISE_TAIL_SIGMAS", "indif_chunks",
           "selected_release", "noise_draws", "noise_label", "SCORE_NOISE", "split_share",
           "two_way_rho", "NOISE_MODES", "JOINT_TAIL", "JOINT_MAX_BITS_PER_CALL",
           "joint_shape_for"]

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
    joint: JointNoiseShape | None = None

    @property
    def noise_kind(self) -> str:
        return "two-server" if self.joint is None else "joint"

    @property
    def per_count_variance(self) -> Fraction:
        """Var(published - true) per count, by construction: the joint shape's variance, or
        the two servers' independent Gaussians (2 sigma2)."""
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
        term); 0 for the two-server noise."""
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
    # The search is capped by the rule itself (a shape beyond these would be refused), which
    # also keeps it fast where the budget is tiny and a matching noise huge.
    max_bits = JOINT_MAX_BITS_PER_CALL // parameters.chunk_cells
    max_span = 2 * ((1 << (parameters.count_bits - 1)) - 1 - max_rows)
    if max_span < 2:
        return None, f"max_rows {max_rows} leaves no room in {parameters.count_bits}-bit counts"
    try:
        shape = _matching_shape(release_count(spec), spec.rho, rho_total, delta_conversion,
                                max_bits, max_span, JOINT_VARIANCE_CAP * spec.sigma2)
    except ValueError as exc:
        return None, (f"no joint shape within {max_bits} encrypted bits per count and span "
                      f"{max_span} matches its budget ({exc})")
    if shape.variance >= 2 * spec.sigma2:
        # At large eps a matching shape is so small that its variance is not below the two
        # Gaussians' (and its conditioning mass is large): nothing to gain.
        return None, (f"the joint shape's variance {float(shape.variance):.3g} is not below "
                      f"the two-server noise's {float(2 * spec.sigma2):.3g}")
    failure = replace(spec, joint=shape).failure()
    if failure > JOINT_DELTA_SHARE * delta_conversion:
        return None, (f"its conditioning mass {failure:.3g} exceeds {JOINT_DELTA_SHARE} of "
                      "delta")
    try:
        check_room(shape, max_rows, parameters.count_bits)
    except ValueError as exc:
        return None, str(exc)
    if parameters.chunk_cells * shape.ciphertexts > JOINT_MAX_BITS_PER_CALL:
        return None, (f"{parameters.chunk_cells} cells x {shape.ciphertexts} encrypted bits "
                      f"per call exceed {JOINT_MAX_BITS_PER_CALL}")
    return shape, ""


def selected_release(release: ReleaseSpec, keys: tuple[str, ...]) -> ReleaseSpec:
    """A selected release over the chosen marginals ``keys``: sensitivity len(keys), so
    sigma2 = len(keys) / (2 rho) (for em the plan's own sigma2: len(keys) = rounds); an
    empty selection releases nothing and costs nothing."""
    if not keys:
        return ReleaseSpec(release.name, (), Fraction(0), Fraction(0))
    # Two-server: a joint shape per possible m would be one compiled width each (docstring).
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
    pairs for noisy-greedy); noisy-greedy's per-pair score noise. A joint release draws
    nothing here: its noise is the two servers' XOR-shared bits (``crypto.joint_noise``)."""
    total = layout.total_cells
    pair_cells = layout.cells_of(layout.two_way)
    draws = []
    for spec in releases:
        if spec.joint is not None:
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
    if selection_mode == "noisy-greedy":
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
        reserved = 0.0
        for _ in range(8):
            plan = cls._build(schema, pairs, epsilon, delta, delta - reserved, split,
                              parameter_set, max_rows, selection, rounds, selection_set,
                              noise)
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
        plan.check_joint()
        return plan

    @classmethod
    def _build(cls, schema: Schema, pairs, epsilon: float, delta: float,
               delta_conversion: float, split, parameter_set: str, max_rows: int,
               selection: str, rounds, selection_set, noise: str) -> SessionPlan:
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
                                             params, chosen) for r in releases)
        plan = cls(schema, layout, params, epsilon, delta, rho_total, releases,
                   chosen, delta_conversion, max_rows)
        plan.check_capacity(max_rows)
        return plan

    @staticmethod
    def _with_noise(spec: ReleaseSpec, noise: str, rho_total: Fraction,
                    delta_conversion: float, max_rows: int, params: ParameterSet,
                    chosen: SelectionPlan | None) -> ReleaseSpec:
        """``spec`` with the joint shape the rule gives it (module docstring)."""
        if spec.name == "two_way" and chosen is not None and chosen.mode == "noisy-greedy":
            why = "noisy-greedy's 2-way release has a marginal count known only at run time"
            shape = None
        else:
            shape, why = joint_shape_for(spec, rho_total, delta_conversion, max_rows, params)
        if shape is None and noise == "joint":
            raise ValueError(f"release {spec.name!r} cannot carry the joint noise: {why}; "
                             "use noise 'auto' (two-server where it does not fit)")
        return replace(spec, joint=shape)

    @property
    def joint_columns(self) -> int:
        """Encrypted bits per cell of the session's P1 circuit: the widest joint shape's K
        (``crypto.joint_noise.columns_for``), or 0 with no joint release (the plain P1)."""
        shapes = self.joint_shapes()
        return columns_for(shapes) if shapes else 0

    def joint_shapes(self) -> list[JointNoiseShape]:
        return [r.joint for r in self.releases if r.joint is not None]

    def joint_failure(self) -> float:
        """The joint releases' conditioning mass, a delta term (module docstring)."""
        return sum(r.failure() for r in self.releases)

    def check_joint(self) -> None:
        """Confirm the session end to end with the joint releases' exact curves: their
        conditioned Renyi divergences (M-fold) plus the zCDP parts' a rho at every order,
        converted to delta at the session's eps, plus their conditioning mass, must stay
        within the conversion's delta plus that mass (``dp.binomial_accounting``'s rule).
        Fails closed: a plan that does not confirm is refused."""
        joint = [r for r in self.releases if r.joint is not None]
        if not joint:
            return
        rho_rest = self.rho_total - sum((r.rho for r in joint), start=Fraction(0))
        parts = [(r.joint.pair(), release_count(r), JOINT_TAIL) for r in joint]
        delivered = session_delta_of(parts, rho_rest, self.epsilon)
        allowed = self.delta_conversion + self.joint_failure()
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
                sigma2=str(r.sigma2), noise=r.noise_kind,
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
                                     else JointNoiseShape(r.joint.uniforms, r.joint.bits))
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
        return selected_release(release, self.keys_of_pairs(selected))

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
        return noise_draws(self.layout, self.releases, mode,
                           None if self.selection is None else self.selection.noise_sigma2)

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
