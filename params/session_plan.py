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
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from common import wire
from dp.accounting import eps_delta_to_rho, gaussian_sigma2
from dp.noise_pool import NoiseDraw
from params.layout import MarginalLayout
from params.parameter_sets import ParameterSet, get_parameter_set
from params.schema import Schema
from params.selection_plan import (DEFAULT_SPLITS, RowBound, SelectionPlan, chunk_sizes_for,
                                   row_bound)

__all__ = ["ReleaseSpec", "SessionPlan", "NOISE_TAIL_SIGMAS", "indif_chunks",
           "selected_release", "noise_draws", "noise_label", "SCORE_NOISE", "split_share",
           "two_way_rho"]

# The label of noisy-greedy's per-pair score noise in a server's noise pool.
SCORE_NOISE = "selection_scores"

# A count plus noise must decode unambiguously from k bits: we require max_rows + 40 sigma
# < 2^(k-1). P[|N_Z(0, sigma2)| >= 40 sigma] < 2 exp(-800).
NOISE_TAIL_SIGMAS = 40


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


def selected_release(release: ReleaseSpec, keys: tuple[str, ...]) -> ReleaseSpec:
    """A selected release over the chosen marginals ``keys``: sensitivity len(keys), so
    sigma2 = len(keys) / (2 rho) (for em the plan's own sigma2: len(keys) = rounds); an
    empty selection releases nothing and costs nothing."""
    if not keys:
        return ReleaseSpec(release.name, (), Fraction(0), Fraction(0))
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
    pairs for noisy-greedy); noisy-greedy's per-pair score noise."""
    total = layout.total_cells
    pair_cells = layout.cells_of(layout.two_way)
    draws = []
    for spec in releases:
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
              rounds: int | None = None, selection_set: str | None = None) -> SessionPlan:
        """The session's plan. With a selection, its failure terms (bootstraps, the row
        bound, noisy-greedy's noise tail) are reserved out of ``delta`` before the budget is
        converted to zCDP, so that the conversion's delta plus the terms is at most ``delta``
        (``params.selection_plan``); the terms depend on the widths, which depend on rho, so
        the reserve is found by a short fixed-point iteration (bounded, fails closed)."""
        reserved = 0.0
        for _ in range(8):
            plan = cls._build(schema, pairs, epsilon, delta, delta - reserved, split,
                              parameter_set, max_rows, selection, rounds, selection_set)
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
               selection: str, rounds, selection_set) -> SessionPlan:
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
        plan = cls(schema, layout, params, epsilon, delta, rho_total, (one_way, two_way),
                   chosen, delta_conversion, max_rows)
        plan.check_capacity(max_rows)
        return plan

    def to_public(self, session_id: str, clients: list[str],
                  bootstraps: int | None = None) -> wire.SessionPublic:
        """The session's public record: the one mapping from which both servers (and anyone
        with the release) derive the plan (:meth:`from_public`). ``bootstraps``: the
        selection module's compiled count (its delta terms are computed from it)."""
        selection = None
        if self.selection is not None:
            selection = self.selection.to_public(
                self.pair_cells(), self.used_chunk_sizes(), self.epsilon, self.delta,
                self.delta_terms(bootstraps), bootstraps)
        return wire.SessionPublic(
            session_id=session_id, schema=self.schema.to_dict(),
            schema_fingerprint=self.schema.fingerprint(), clients=clients,
            pairs=self.layout.pairs, parameter_set=self.parameters.to_dict(),
            total_cells=self.layout.total_cells,
            releases=[wire.ReleasePlan(name=r.name, marginals=list(r.marginal_keys),
                                       rho=str(r.rho), sigma2=str(r.sigma2))
                      for r in self.releases],
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
                                     Fraction(r.sigma2)) for r in public.releases)
        return cls(schema, layout, ParameterSet(**public.parameter_set), public.epsilon,
                   public.delta, Fraction(public.rho_total), releases, selection,
                   public.delta_conversion, 0 if selection is None else selection.max_rows)

    def delta_terms(self, bootstraps: int | None = None) -> dict[str, float]:
        """The selection's reserved delta terms (``params.selection_plan``); ``bootstraps``:
        the compiled count (default: the plan's upper bound)."""
        if self.selection is None:
            return {}
        return self.selection.delta_terms(self.pair_cells(), self.epsilon, self.delta,
                                          bootstraps)

    def delta_total(self, bootstraps: int | None = None) -> float:
        """What the session delivers: the conversion's delta plus the selection's terms
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
            return ReleaseSpec(release.name, self.keys_of_pairs(selected), release.rho,
                               release.sigma2)
        return selected_release(release, self.keys_of_pairs(selected))

    def noise_label(self, release: ReleaseSpec) -> str:
        """The pool label of a resolved release's noise (:func:`noise_label`)."""
        return noise_label(release, None if self.selection is None else self.selection.mode)

    def check_row_bound(self, one_way: list) -> RowBound:
        """The selection's row-bound check on the published 1-ways, the one rule both
        servers apply before any score is computed or charged
        (``params.selection_plan.row_bound``)."""
        return row_bound(one_way, self.release("one_way").sigma2, 2, self.selection.max_rows,
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
        room = 2 ** (self.parameters.count_bits - 1)
        worst_sigma = max(float(r.sigma2) for r in self.releases) ** 0.5
        need = max_rows + NOISE_TAIL_SIGMAS * worst_sigma
        if need >= room:
            raise ValueError(
                f"parameter set {self.parameters.name!r} holds counts below {room}; "
                f"max_rows {max_rows} plus {NOISE_TAIL_SIGMAS} noise sigmas ({need:.0f}) "
                "does not fit: choose a larger parameter set or a smaller max_rows")

    def release(self, name: str) -> ReleaseSpec:
        for r in self.releases:
            if r.name == name:
                return r
        raise KeyError(name)

    def slots_of(self, release: ReleaseSpec):
        keys = set(release.marginal_keys)
        return [m for m in self.layout.marginals if m.key in keys]
