"""How a session chooses its 2-way marginals: the mode, the budget, the widths, the cost.

Modes (``--selection``):

* ``em`` (default): FedDPSyn's private selection under encryption. Primitive 2 computes every
  pair's InDif against public expected counts from the released noisy 1-ways; Primitive 3
  (``crypto.tfhe_permute_and_flip``) picks ``rounds`` pairs one at a time, without replacement,
  by permute-and-flip with fixed-point weights. Each round is (eps + 4 eta)-DP and is charged
  rho = (eps + 4 eta)^2 / 2, the numerical loss included
  (``crypto.tfhe_permute_and_flip.plan_step``). From 3 candidates on, a round runs by candidate
  batches (:func:`candidate_batches`), so that it shortens with workers; its output is exactly
  the one call's. The public record states the batch size (``batch_size``), so both servers keep
  a session's batches when the rule changes (:func:`recorded_batches`).
* ``noisy-greedy``: PrivSyn's own rule. Every InDif gets discrete Gaussian noise (L2
  sensitivity sqrt(pairs): one record moves each pair's score by at most 1) and the pairs are
  chosen greedily in clear (``dp.pair_selection``). Through the servers
  (``crypto.noisy_scores``, ``keyserver.noisy_greedy``): the compute server adds
  N_Z(0, noise_sigma2) to every encrypted InDif, the key server decrypts, adds its own
  N_Z(0, noise_sigma2) and runs the greedy rule; only the chosen pairs leave it. Each view is
  protected by the other server's noise alone, so the charge is rho = pairs / (2 sigma2) for
  one noise, as for the releases. With the servers' default noise the scores carry instead
  one joint noise each that neither server knows (:attr:`SelectionPlan.score_joint`,
  chosen by ``params.noise_rules.score_shape_for``; ``crypto.noisy_scores``'s ``joint``),
  matched to the same rho; the key server then adds nothing. How many pairs: as many as the
  greedy rule keeps (0 to all).
* ``none``: every 2-way marginal (or the given pairs), as the core pipeline.

Budget split when the operator gives none: em keeps PrivSyn's 10% for the 1-ways, 10% for
the selection and 80% for the selected 2-ways. noisy-greedy gives the 1-ways 30%, the
scores 10% and the kept pairs 60%: on small tables the 1-ways' tenth was most of the gap to
a curator, who shares the publication budget over the 1-ways and the kept pairs by c^(2/3)
(``experiments/gap_sources/results/gap_sources.md``). ``none`` shares by c^(2/3) over its two
releases (``params.budget_split``).

Error probability and the delta reserve. Every bootstrap of P2 and P3 fails with probability
at most ``p_error`` (2^-40: concrete's default of 1e-5 would, over the ~10^5-10^6 bootstraps
of a session, make a wrong selection likely). A failure may depend on the data (a
ciphertext's noise is independent of it, but which bootstrap's failure changes the output is
not), so the general coupling applies: a mechanism that equals an (eps, delta)-DP one except
on an event of probability at most f is (eps, delta + (1 + e^eps) f)-DP. The same holds for
the row bound below. These terms are reserved out of the requested delta *before* the budget
is converted to zCDP (:meth:`SelectionPlan.delta_terms`), so the delivered guarantee is the
requested (eps, delta): delta_conversion + the terms <= delta. The session counts bootstraps
from the compiled module's statistics; the plan's structural count (``pbs_estimate``,
``chunk_bootstraps``) bounds it from above, which the key server checks at creation.

Row bound. Every width here assumes the union has at most ``max_rows`` rows; a larger union
could wrap a score modulo 2^score_bits, and one record could then move it by 2^score_bits.
The bound is checked on the released noisy 1-ways before any score is computed
(:func:`row_bound`): the selection runs only if the noisy row count plus a tail margin stays
within ``max_rows``. A union above ``max_rows`` passes with probability at most
``row_bound_delta`` (a share of delta), which is reserved as above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, ClassVar, Literal, Self, TypedDict

import numpy as np

from feddpsyn.common import wire
from feddpsyn.crypto.indif import ADD_COMPLEXITY, CHUNK_COMPLEXITY, chunk_bootstraps
from feddpsyn.crypto.noisy_scores import NoisyScoreShape, noise_offset_bits, noise_tail_probability
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
from feddpsyn.crypto.private_selection import batch_names
from feddpsyn.crypto.selection_batches import BatchLayout, batch_layout
from feddpsyn.crypto.selection_cost import batched_pbs_estimate, pbs_estimate
from feddpsyn.crypto.tfhe_permute_and_flip import (SelectionShape, SelectionStep, choose_shape,
                                                   plan_step, thresholds)
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.shape_record import public_shape, shape_of
from feddpsyn.params.parameter_sets import (DEFAULT_SELECTION_SET, SelectionParameterSet,
                                            get_selection_set)

__all__ = ["SelectionPlan", "EmSelection", "NoisyGreedySelection", "NoSelection",
           "DEFAULT_SPLITS", "chunk_sizes_for", "indif_chunks", "candidate_batches", "RowBound",
           "row_bound", "row_bound_spread", "max_rows_with_room", "ROW_BOUND_SHARE"]

# The share of the requested delta the bootstraps' failure term may take before the plan
# lowers p_error (``SelectionPlan.with_fhe_room``).
FHE_DELTA_SHARE = Fraction(1, 4)
# The share of the requested delta that the row-bound check may fail with.
ROW_BOUND_SHARE = Fraction(1, 100)

# Each selection's releases and their fixed shares. A session's default is
# ``params.budget_split.default_split``: em's as here; noisy-greedy's scores take their 10%
# and its 1-ways' first release is sized by the plan (10-30%; the 30% here is what the
# what-if simulations of ``fedbench.methods.feddpsyn_sim`` keep); none's by c^(2/3).
DEFAULT_SPLITS = {
    SelectionMode.EM: {"one_way": 0.1, "selection": 0.1, "two_way": 0.8},
    SelectionMode.NOISY_GREEDY: {"one_way": 0.3, "selection": 0.1, "two_way": 0.6},
    SelectionMode.NONE: {"one_way": 0.2, "two_way": 0.8},
}


def chunk_sizes_for(cells: int, sizes: tuple[int, ...]) -> list[int]:
    """The chunk sizes one pair of ``cells`` cells is cut into: least total P2 cost
    (``crypto.indif.CHUNK_COMPLEXITY`` per chunk, ``ADD_COMPLEXITY`` per encrypted sum),
    largest chunks first; ties go to the larger chunk (the loop tries sizes largest first).

    >>> chunk_sizes_for(81, (8, 16, 32)), chunk_sizes_for(5, (8, 16, 32))
    ([32, 32, 16, 8], [8])
    """
    unknown = [s for s in sizes if s not in CHUNK_COMPLEXITY]
    if unknown:
        raise ValueError(f"no measured P2 cost for chunk sizes {unknown} "
                         f"(crypto.indif.CHUNK_COMPLEXITY has {sorted(CHUNK_COMPLEXITY)})")
    best: list[tuple[float, list[int]]] = [(0.0, [])]
    for n in range(1, cells + 1):  # bounded: one step per cell
        choice = None
        for size in sorted(sizes, reverse=True):
            rest_cost, rest = best[max(0, n - size)]
            cost = CHUNK_COMPLEXITY[size] + (ADD_COMPLEXITY + rest_cost if n > size else 0.0)
            if choice is None or cost < choice[0]:
                choice = (cost, [size] + (rest if n > size else []))
        best.append(choice)
    return sorted(best[cells][1], reverse=True)


def indif_chunks(layout: MarginalLayout,
                 sizes: tuple[int, ...]) -> list[tuple[int, np.ndarray, int]]:
    """Primitive 2's inputs: (candidate index, cell positions, chunk size) per chunk, each
    pair's cells cut by :func:`chunk_sizes_for` (a chunk may be short: callers pad it to its
    size with |C - K| = 0 cells). Public and deterministic: both servers derive the same
    chunks from the layout and the parameter set's sizes."""
    out = []
    for index, slot in enumerate(layout.two_way):
        cells = np.arange(slot.offset, slot.offset + slot.size)
        start = 0
        for size in chunk_sizes_for(slot.size, sizes):
            out.append((index, cells[start:start + size], size))
            start += size
    return out


def candidate_batches(candidates: int) -> BatchLayout | None:
    """How an em round's P3 runs (``crypto.selection_batches``): in batches of at most
    ceil(sqrt(S) / 2) candidates (at least 2) whenever that makes two batches or more
    (S >= 3), else as one ``select`` call.

    Why batches: one call a round runs on one worker, so as one call P3 does not shorten
    with workers (Adult: 15 rounds of ~2.5 min whatever the cluster). A batched round is
    three steps of one task a batch (a batch's maximum, its pick, its mask) and two combines
    that run alone (the maximum of the B maxima, the batch of least priority). With a worker
    per batch a round lasts about n candidates' batch work plus B batches' combine work: at
    Adult's widths ~230 bootstraps a candidate against ~58 a batch
    (``crypto.selection_cost.batched_pbs_estimate``), least near n = sqrt(58 S / 230) ~
    sqrt(S) / 2 (Adult: 18 batches of 6, 2,397 bootstraps on the critical path against
    23,637 in the one call; all calls of the round 25,398, +7%, which is what one worker
    loses). The layout is a function of the public candidate count alone: both servers
    derive it from the public record (as they derive P2's chunk cut), and neither server's
    view depends on it (``crypto.selection_batches``: the batched round's output is the one
    call's).

    >>> candidate_batches(105), candidate_batches(3), candidate_batches(2)
    (BatchLayout(candidates=105, size=6), BatchLayout(candidates=3, size=2), None)
    """
    return batch_layout(candidates, (math.isqrt(candidates - 1) + 2) // 2)


def recorded_batches(batch_size: int | None, candidates: int) -> BatchLayout | None:
    """em's candidate batches as a public record states them (``batch_size``; 0: one call a
    round), so a session keeps the batches its module was compiled for when
    :func:`candidate_batches`' rule changes in a later version. A record without the field
    predates it: its batches are that rule's. A size that does not give the batches it
    names (one batch, or fewer than 2 candidates a batch) is an inconsistent record."""
    if batch_size is None:
        return candidate_batches(candidates)
    if batch_size == 0:
        return None
    layout = batch_layout(candidates, batch_size) if batch_size >= 2 else None
    if layout is None or layout.size != batch_size:
        raise ValueError(f"the selection's public record is inconsistent: batches of "
                         f"{batch_size} do not cut {candidates} candidates into two or more "
                         f"even batches")
    return layout


@dataclass(frozen=True, kw_only=True)
class SelectionPlan:
    """What every mode's selection plan has: its budget, P2's widths, the bootstraps'
    error probability and the row bound. One subclass per mode holds what only that mode
    has (:class:`EmSelection`, :class:`NoisyGreedySelection`, :class:`NoSelection`);
    :meth:`build` and :meth:`from_public` give the mode's own."""

    mode: ClassVar[SelectionMode]
    rho: Fraction             # the selection's whole budget
    indif_bits: int           # P2's k: every |C - K| < 2^(k-1)
    score_bits: int           # digits of a pair's InDif (<= 2 max_rows)
    p_error: float = 2.0 ** -40
    chunk_sizes: tuple[int, ...] = (16,)
    # P2's narrower widths (``params.indif_widths``), set by ``SessionPlan.build`` from the
    # 1-ways' noise; () in a record that predates them: every chunk at indif_bits.
    indif_widths: tuple[int, ...] = ()
    # The typical bound's multiple z where the chunks' widths take it (``params.indif_widths``);
    # None in a record that predates it: the worst-case bound alone.
    indif_typical: int | None = None
    max_rows: int = 0
    parameters: SelectionParameterSet = field(
        default_factory=lambda: get_selection_set(DEFAULT_SELECTION_SET))

    @staticmethod
    def build(mode: SelectionMode | str, pairs: int, max_rows: int, rho: Fraction,
              rounds: int | None,
              p_error: float | None = None,
              parameters: SelectionParameterSet | str | None = None,
              ) -> EmSelection | NoisyGreedySelection | NoSelection:
        """The plan of ``mode`` over ``pairs`` candidates. ``rounds``: em's selected pairs
        (default half the candidates; the other modes ignore it); ``parameters``: a named
        set (``params.parameter_sets.SELECTION_SETS``; default ``DEFAULT_SELECTION_SET``);
        ``p_error`` overrides the set's (tests only)."""
        try:
            mode = SelectionMode(mode)
        except ValueError:
            modes = tuple(m.value for m in SelectionMode)
            raise ValueError(f"selection is one of {modes}, not {mode!r}") from None
        if not isinstance(parameters, SelectionParameterSet):
            parameters = get_selection_set(parameters or DEFAULT_SELECTION_SET)
        if parameters.lam != 1:
            # Our InDif has sensitivity 1: exp(-eps 2^(j - lambda)) is eps-DP only at lambda 1.
            raise ValueError("only lambda = 1 matches InDif's sensitivity of 1")
        widths = _Widths(p_error=parameters.p_error if p_error is None else p_error,
                         max_rows=max_rows, parameters=parameters,
                         chunk_sizes=parameters.chunk_sizes,
                         indif_bits=max(2, (max_rows + 1).bit_length() + 1),
                         score_bits=(2 * max_rows).bit_length(), indif_widths=(),
                         indif_typical=None)
        if mode == SelectionMode.NONE:
            return NoSelection(rho=Fraction(0), **widths)
        if rho <= 0:
            raise ValueError("the selection needs a positive share of the budget")
        if mode == SelectionMode.NOISY_GREEDY:
            return NoisyGreedySelection.planned(pairs, rho, widths)
        return EmSelection.planned(pairs, rho, rounds, widths)

    @staticmethod
    def from_public(public: wire.SelectionPublic,
                    pairs: int) -> EmSelection | NoisyGreedySelection:
        """The plan a public record describes (:meth:`to_public`), for ``pairs`` candidates.
        The record carries what the selection charges, not the share it was planned from:
        ``rho`` is the charged budget (the rest is already in the 2-way release's rho)."""
        raw = dict(public.parameter_set)
        parameters = SelectionParameterSet(**{**raw, "relative_loss": Fraction(
            raw["relative_loss"]), "chunk_sizes": tuple(raw["chunk_sizes"])})
        widths = _Widths(p_error=public.p_error, max_rows=public.max_rows,
                         parameters=parameters, chunk_sizes=parameters.chunk_sizes,
                         indif_bits=public.indif_bits, score_bits=public.score_bits,
                         indif_widths=tuple(public.indif_widths or ()),
                         indif_typical=public.indif_typical)
        if public.mode == SelectionMode.NOISY_GREEDY:
            return NoisyGreedySelection.described(public, pairs, widths)
        return EmSelection.described(public, pairs, widths)

    def to_public(self, pair_cells: list[int], used_chunk_sizes: tuple[int, ...],
                  epsilon: float, delta: float, delta_terms: dict[str, float],
                  bootstraps: int | None) -> wire.SelectionPublic:
        """The public record of this selection (what both servers derive their part from):
        widths, the per-round budget with its numerical part (em), the noise and its budget
        (noisy-greedy), the delta terms; ``bootstraps``: the compiled module's count."""
        return wire.SelectionPublic(
            mode=self.mode, parameter_set=self.parameters.to_dict(),
            indif_bits=self.indif_bits, score_bits=self.score_bits, max_rows=self.max_rows,
            chunk_sizes=list(used_chunk_sizes), p_error=self.p_error, bootstraps=bootstraps,
            indif_widths=list(self.indif_widths) if self.indif_widths else None,
            indif_typical=self.indif_typical,
            fhe_delta=self.fhe_delta(pair_cells, bootstraps),
            row_bound_delta=self.row_bound_delta(delta, epsilon), delta_terms=delta_terms,
            **self._public_fields())

    def _public_fields(self) -> dict[str, Any]:
        """The mode's own fields of its public record (:meth:`to_public`)."""
        raise NotImplementedError

    @property
    def rho_charged(self) -> Fraction:
        """What the ledger charges for the whole selection (<= rho)."""
        raise NotImplementedError

    def bootstraps_by_phase(self, pair_cells: list[int]) -> dict[str, int]:
        """Upper bounds on the session's bootstraps per phase, from the pairs' cell counts:
        ``p2``: P2 on every chunk (``crypto.indif.chunk_bootstraps``) and 2n - 1 per chunk
        sum; ``p3``: the em rounds over every compiled candidate (masked ones too), every
        call of a batched round (:meth:`EmSelection.round_bootstraps`);
        ``noise``: noisy-greedy's one noise addition a pair."""
        p2 = 0
        for cells in pair_cells:
            chunks = chunk_sizes_for(cells, self.chunk_sizes)
            p2 += sum(chunk_bootstraps(c, self.indif_bits) for c in chunks)
            p2 += (len(chunks) - 1) * (2 * self.score_bits - 1)
        return {"p2": p2, "p3": 0, "noise": 0}

    def bootstraps(self, pair_cells: list[int]) -> int:
        """An upper bound on all of the session's bootstraps (:meth:`bootstraps_by_phase`)."""
        return sum(self.bootstraps_by_phase(pair_cells).values())

    def with_fhe_room(self, pair_cells: list[int], epsilon: float,
                      delta: float) -> Self:
        """This plan, with a smaller ``p_error`` where the set's would make the bootstrap
        term, (1 + e^eps) x bootstraps x p_error, take more than ``FHE_DELTA_SHARE`` of
        delta: at a large eps the coupling factor alone would otherwise refuse a session
        that a smaller eps accepts. The new p_error is a power of two, in the public record
        (``p_error``), and both servers compile with it; the set's stays where it fits."""
        bound = self.bootstraps(pair_cells) * (1 + math.exp(epsilon))
        room = float(FHE_DELTA_SHARE * Fraction(delta)) / bound
        if self.p_error <= room:
            return self
        return replace(self, p_error=2.0 ** math.floor(math.log2(room)))

    def fhe_delta(self, pair_cells: list[int], bootstraps: int | None = None) -> float:
        """Union bound on any bootstrap failing in this session's selection (``bootstraps``:
        the compiled count; default the plan's structural upper bound)."""
        return (self.bootstraps(pair_cells) if bootstraps is None else bootstraps) * self.p_error

    def delta_terms(self, pair_cells: list[int], epsilon: float, delta: float,
                    bootstraps: int | None = None) -> dict[str, float]:
        """The selection's share of delta, each term an event of bounded probability counted
        with the (1 + e^eps) coupling (module docstring), rounded up."""
        factor = 1 + math.exp(epsilon)
        terms = {"fhe": factor * self.fhe_delta(pair_cells, bootstraps),
                 "row_bound": factor * self.row_bound_delta(delta, epsilon),
                 **self._mode_delta_terms(factor)}
        return {k: math.nextafter(v, math.inf) for k, v in terms.items()}

    def _mode_delta_terms(self, factor: float) -> dict[str, float]:
        """The mode's own delta terms (:meth:`delta_terms`), before rounding up."""
        return {}

    @staticmethod
    def row_bound_delta(delta: float, epsilon: float) -> float:
        """The row-bound check's failure probability: its delta term, (1 + e^eps) times
        this, is ``ROW_BOUND_SHARE`` of delta."""
        return float(Fraction(delta) * ROW_BOUND_SHARE) / (1 + math.exp(epsilon))

    def compiled_bootstraps(self, pair_cells: list[int], per_function: dict[str, int]) -> int:
        """The session's bootstraps from the compiled module's per-function counts: every
        chunk's ``indif_<s>``, every chunk sum's ``add``, every call of every round (em,
        :meth:`EmSelection.round_bootstraps`) or every pair's ``noise`` (noisy-greedy)."""
        total = 0
        for cells in pair_cells:
            chunks = chunk_sizes_for(cells, self.chunk_sizes)
            # A chunk runs at any compiled width (``params.indif_widths``): the most of them.
            total += sum(max(per_function[name] for name in
                             [f"indif_{c}"] + [f"indif_{c}_w{w}" for w in self.indif_widths]
                             if name in per_function) for c in chunks)
            total += (len(chunks) - 1) * per_function["add"]
        return total

    def report(self, pair_cells: list[int]) -> dict[str, Any]:
        return {"mode": self.mode, "parameter_set": self.parameters.to_dict(),
                "rho_budget": float(self.rho),
                "rho_charged": float(self.rho_charged),
                "fhe_delta": self.fhe_delta(pair_cells), "p_error": self.p_error}


class _Widths(TypedDict):
    """The fields every mode's plan shares but ``rho``, as :meth:`SelectionPlan.build` and
    :meth:`SelectionPlan.from_public` derive them."""

    p_error: float
    chunk_sizes: tuple[int, ...]
    max_rows: int
    parameters: SelectionParameterSet
    indif_bits: int
    score_bits: int
    indif_widths: tuple[int, ...]
    indif_typical: int | None


@dataclass(frozen=True, kw_only=True)
class EmSelection(SelectionPlan):
    """em: ``rounds`` pairs chosen by Primitive 3, each round a permute-and-flip ``step`` of
    the module's ``shape``, run by candidate ``batches`` (or one call a round: None)."""

    mode: ClassVar[Literal[SelectionMode.EM]] = SelectionMode.EM
    rounds: int               # pairs chosen
    step: SelectionStep
    shape: SelectionShape
    # P3 by candidate batches (:func:`candidate_batches`), or None for one call a round
    batches: BatchLayout | None = None

    @classmethod
    def planned(cls, pairs: int, rho: Fraction, rounds: int | None,
                widths: _Widths) -> EmSelection:
        """em's plan of budget ``rho`` over ``pairs`` candidates (:meth:`SelectionPlan.build`)."""
        rounds = rounds if rounds is not None else max(1, pairs // 2)
        if not 1 <= rounds < pairs:
            raise ValueError(f"em selects between 1 and {pairs - 1} pairs, not {rounds}")
        parameters = widths["parameters"]
        rho_step = rho / rounds
        shape = choose_shape(pairs, widths["score_bits"], math.sqrt(2 * float(rho_step)),
                             relative_loss=float(parameters.relative_loss),
                             clamp_exponent=parameters.clamp_exponent)
        step = plan_step(rho_step, shape)
        return cls(rounds=rounds, rho=rho, step=step, shape=shape,
                   batches=candidate_batches(pairs), **widths)

    @classmethod
    def described(cls, public: wire.SelectionPublic, pairs: int,
                  widths: _Widths) -> EmSelection:
        """em's plan as its public record states it (:meth:`SelectionPlan.from_public`)."""
        shape = SelectionShape(candidates=pairs, score_bits=public.score_bits, drop_bits=0,
                               nb=public.nb, kappa_prime=tuple(public.kappa_prime))
        step = SelectionStep.of(Fraction(public.epsilon_round), public.eta)
        if step.rho != Fraction(public.rho_round):
            raise ValueError("the selection's public record is inconsistent: its per-round "
                             "rho does not follow from its epsilon and eta")
        return cls(rounds=public.rounds, rho=step.rho * public.rounds, step=step, shape=shape,
                   batches=recorded_batches(public.batch_size, pairs), **widths)

    def _public_fields(self) -> dict[str, Any]:
        return dict(rounds=self.rounds, rho_round=str(self.step.rho),
                    epsilon_round=str(self.step.epsilon), eta=self.step.eta,
                    nb=self.shape.nb, kappa_prime=list(self.shape.kappa_prime),
                    thresholds=thresholds(self.shape, self.step.epsilon),
                    batch_size=0 if self.batches is None else self.batches.size)

    @property
    def rho_charged(self) -> Fraction:
        return self.step.rho * self.rounds

    def bootstraps_by_phase(self, pair_cells: list[int]) -> dict[str, int]:
        return {**super().bootstraps_by_phase(pair_cells),
                "p3": self.round_bootstraps() * self.rounds}

    def round_bootstraps(self, per_function: dict[str, int] | None = None) -> int:
        """One round's bootstraps, every call it makes: the one ``select``, or a batched
        round's B batch maxima, their combine, B picks, the least and B masks
        (``crypto.private_selection.batch_names``). ``per_function``: the compiled module's
        counts by function name; default the structural bound (``crypto.selection_cost``)."""
        if self.batches is None:
            return pbs_estimate(self.shape) if per_function is None else per_function["select"]
        if per_function is None:
            return batched_pbs_estimate(self.shape, self.batches)["round"]
        count = {stage: per_function[name] for stage, name in
                 batch_names(self.batches).items()}
        return (self.batches.count * (count["maximum"] + count["pick"] + count["mask"])
                + count["combine_maximum"] + count["least"])

    def compiled_bootstraps(self, pair_cells: list[int], per_function: dict[str, int]) -> int:
        return (super().compiled_bootstraps(pair_cells, per_function)
                + self.rounds * self.round_bootstraps(per_function))

    def report(self, pair_cells: list[int]) -> dict[str, Any]:
        return {**super().report(pair_cells),
                "rounds": self.rounds, "step_epsilon": float(self.step.epsilon),
                "step_eta": self.step.eta,
                "step_epsilon_total": float(self.step.epsilon_total),
                "numerical_extra_epsilon": 4 * self.step.eta * self.rounds,
                "nb": self.shape.nb, "kappa_prime": list(self.shape.kappa_prime),
                "candidate_batches": (None if self.batches is None else
                                      [self.batches.count, self.batches.size])}


@dataclass(frozen=True, kw_only=True)
class NoisyGreedySelection(SelectionPlan):
    """noisy-greedy: every one of ``pairs`` scores carries noise (each server's
    N_Z(0, noise_sigma2), or one ``score_joint`` noise), then PrivSyn's greedy rule."""

    mode: ClassVar[Literal[SelectionMode.NOISY_GREEDY]] = SelectionMode.NOISY_GREEDY
    pairs: int                # candidate pairs
    noise_sigma2: Fraction    # per-score variance of each server's Gaussian
    noise_bits: int           # |noise| < 2^noise_bits
    # One joint noise per score neither server knows (``crypto.noisy_scores``'s ``joint``;
    # the rule is ``params.noise_rules.score_shape_for``), or None: two servers' Gaussians of
    # noise_sigma2 each.
    score_joint: JointNoiseShape | None = None
    # With joint scores: their conditioning mass over the pairs (a delta term).
    joint_failure: float = 0.0

    @classmethod
    def planned(cls, pairs: int, rho: Fraction, widths: _Widths) -> NoisyGreedySelection:
        """noisy-greedy's plan of budget ``rho`` over ``pairs`` candidates, its scores with
        the two servers' Gaussians (:meth:`SelectionPlan.build`)."""
        sigma2 = Fraction(pairs) / (2 * rho)
        return cls(rho=rho, noise_sigma2=sigma2, pairs=pairs,
                   noise_bits=noise_offset_bits(sigma2), **widths)

    @classmethod
    def described(cls, public: wire.SelectionPublic, pairs: int,
                  widths: _Widths) -> NoisyGreedySelection:
        """noisy-greedy's plan as its public record states it
        (:meth:`SelectionPlan.from_public`)."""
        joint = None if public.joint is None else shape_of(public.joint)
        return cls(rho=Fraction(public.rho), noise_sigma2=Fraction(public.noise_sigma2),
                   pairs=pairs, noise_bits=public.noise_bits, score_joint=joint,
                   joint_failure=public.joint_failure or 0.0, **widths)

    def _public_fields(self) -> dict[str, Any]:
        return dict(rounds=0, rho=str(self.rho_charged), noise_sigma2=str(self.noise_sigma2),
                    noise_bits=self.noise_bits,
                    noise_tail_probability=self.noise_tail_probability(),
                    score_noise=self.score_noise,
                    joint=None if self.score_joint is None else public_shape(self.score_joint),
                    joint_failure=self.joint_failure)

    @property
    def rho_charged(self) -> Fraction:
        return self.rho

    @property
    def score_noise(self) -> NoiseMode:
        """The scores' noise: one joint noise, or each server's Gaussian."""
        return NoiseMode.TWO_SERVER if self.score_joint is None else NoiseMode.JOINT

    def bootstraps_by_phase(self, pair_cells: list[int]) -> dict[str, int]:
        return {**super().bootstraps_by_phase(pair_cells),
                "noise": len(pair_cells) * self.noisy_shape().noise_bootstraps}

    def noisy_shape(self, chunk_sizes: tuple[int, ...] | None = None) -> NoisyScoreShape:
        """The noisy-greedy module's widths (``crypto.noisy_scores``), for the chunk sizes a
        session uses (default: every size of the set)."""
        return NoisyScoreShape(count_bits=self.indif_bits,
                               chunk_sizes=tuple(chunk_sizes or self.chunk_sizes),
                               score_bits=self.score_bits, noise_bits=self.noise_bits,
                               joint=self.score_joint, widths=self.indif_widths)

    @property
    def score_variance(self) -> Fraction:
        """Var(noisy score - InDif) in the key server's greedy rule: the joint shape's
        variance, or the two servers' Gaussians' 2 noise_sigma2."""
        if self.score_joint is not None:
            return self.score_joint.variance
        return 2 * self.noise_sigma2

    def noise_tail_probability(self) -> float:
        """Bound on the compute server failing closed on a noise draw
        (``crypto.noisy_scores``; the session adds e^eps times it to delta); 0 with joint
        scores (a bounded noise: nothing to fail)."""
        if self.score_joint is not None:
            return 0.0
        return noise_tail_probability(self.noise_sigma2, self.noise_bits, self.pairs)

    def _mode_delta_terms(self, factor: float) -> dict[str, float]:
        if self.score_joint is None:
            return {"noise_tail": factor * self.noise_tail_probability()}
        # The conditioning rule's excluded mass, charged as it is (no coupling factor), as
        # for the joint releases (``dp.binomial_accounting``).
        return {"joint_scores": self.joint_failure}

    def compiled_bootstraps(self, pair_cells: list[int], per_function: dict[str, int]) -> int:
        return (super().compiled_bootstraps(pair_cells, per_function)
                + len(pair_cells) * per_function[self.noisy_shape().noise_function])

    def report(self, pair_cells: list[int]) -> dict[str, Any]:
        return {**super().report(pair_cells),
                "noise_sigma2": float(self.noise_sigma2), "noise_bits": self.noise_bits,
                "noise_tail_probability": self.noise_tail_probability(),
                "score_noise": self.score_noise,
                "score_variance": float(self.score_variance)}


@dataclass(frozen=True, kw_only=True)
class NoSelection(SelectionPlan):
    """none: every pair (or the pairs given); nothing is selected, charged or bootstrapped.
    A session without a selection has none (``SessionPlan.selection`` is None): this plan
    only answers what the mode would cost."""

    mode: ClassVar[Literal[SelectionMode.NONE]] = SelectionMode.NONE

    @property
    def rho_charged(self) -> Fraction:
        return Fraction(0)

    def bootstraps_by_phase(self, pair_cells: list[int]) -> dict[str, int]:
        return {"p2": 0, "p3": 0, "noise": 0}

    def with_fhe_room(self, pair_cells: list[int], epsilon: float,
                      delta: float) -> Self:
        return self

    def delta_terms(self, pair_cells: list[int], epsilon: float, delta: float,
                    bootstraps: int | None = None) -> dict[str, float]:
        return {}

    def _public_fields(self) -> dict[str, Any]:
        raise ValueError("a session without a selection publishes no selection record")


@dataclass(frozen=True)
class RowBound:
    """The row-bound check on the published noisy 1-ways (module docstring)."""

    estimate: float   # the noisy row count: the mean over attributes of each 1-way's sum
    margin: float     # P[estimate <= true rows - margin] <= row_bound_delta
    max_rows: int

    @property
    def holds(self) -> bool:
        return self.estimate + self.margin <= self.max_rows

    def message(self) -> str:
        return (f"the union may have more rows than the session's max_rows = {self.max_rows} "
                f"(noisy row count {self.estimate:.0f} + tail margin {self.margin:.0f}); the "
                "selection's widths would not hold its scores, so it is refused and nothing is "
                "charged for it: create a session with a larger --max-rows")


def row_bound_spread(cells_per_attribute: list[int], sigma2_per_server: Fraction,
                     servers: int) -> float:
    """The standard deviation (and sub-Gaussian scale) of :func:`row_bound`'s estimate:
    servers sigma2 / sum over attributes of 1 / cells."""
    return math.sqrt(servers * float(sigma2_per_server)
                     / sum(1 / d for d in cells_per_attribute))


def row_bound(one_way: list, sigma2_per_server: Fraction, servers: int, max_rows: int,
              row_bound_delta: float) -> RowBound:
    """Check max_rows on the released 1-ways (post-processing: no privacy cost).

    Each attribute's 1-way sums to N plus the noise of its d cells (``servers`` independent
    N_Z(0, sigma2) each). The estimate weighs the sums by 1/d (inverse variance), so its
    error is a weighted sum of discrete Gaussians with variance
    s^2 = servers sigma2 / sum_a (1/d_a) (:func:`row_bound_spread`). N_Z(0, sigma2) is
    sub-Gaussian with variance proxy sigma2 (Canonne, Kamath and Steinke 2020), so
    P[error <= -t] <= exp(-t^2 / (2 s^2)); the margin t is set so this is
    ``row_bound_delta``.

    >>> import numpy as np
    >>> check = row_bound([np.array([60.0, 40.0]), np.array([30.0, 72.0])], Fraction(1), 2, 130,
    ...                   1e-7)
    >>> round(check.estimate), check.holds
    (101, True)
    """
    cells = [len(m) for m in one_way]
    weights = [1 / d for d in cells]
    estimate = sum(w * float(sum(m)) for w, m in zip(weights, one_way)) / sum(weights)
    spread = row_bound_spread(cells, sigma2_per_server, servers)
    return RowBound(estimate, _row_bound_margin(spread, row_bound_delta), max_rows)


def _row_bound_margin(spread: float, row_bound_delta: float) -> float:
    """The sub-Gaussian tail: P[error <= -margin] <= row_bound_delta."""
    return spread * math.sqrt(2 * math.log(1 / row_bound_delta))


def max_rows_with_room(rows: int, cells_per_attribute: list[int], sigma2_per_server: Fraction,
                       servers: int, row_bound_delta: float, sigmas: float = 6.0) -> int:
    """The smallest max_rows for which a union of ``rows`` rows passes :func:`row_bound`
    except with probability below exp(-sigmas^2 / 2) (for an operator who knows the row
    count from public facts, e.g. the demo's bundled tables)."""
    spread = row_bound_spread(cells_per_attribute, sigma2_per_server, servers)
    return int(math.ceil(rows + _row_bound_margin(spread, row_bound_delta) + sigmas * spread))
