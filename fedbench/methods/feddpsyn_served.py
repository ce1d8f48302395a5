"""``feddpsyn-served`` / ``feddpsyn-served-noisy-greedy`` / ``feddpsyn-served-no-topup``: what
the two servers publish, with every decision the servers' own.

``feddpsyn_sim``'s variants vary one thing at a time (a noise, an allocation) against a plan
built for the comparison. These two build the session exactly as the servers do and follow
every decision the servers make, through the same functions, so their errors are those of a
served session (in distribution; the randomness is fresh):

* **The plan** is ``SessionPlan.build`` with the servers' defaults: ``noise="auto"``, the
  selection's default budget split, and ``max_rows`` stated as the demo states it
  (``params.operator_bound.stated_max_rows``: rows + 10% + 10, with room for the row-bound
  check's margin).
* **Each release** carries the noise the plan gave it: its joint shape (one noise that
  neither server knows, ``crypto.joint_noise``'s exact integer model) or, where the rule
  declined, the two servers' discrete Gaussians (``feddpsyn_sim.simulate_release``, noise
  "plan").
* **The row-bound check** runs on the published 1-ways as both servers run it
  (``SessionPlan.check_row_bound``); a refusal raises, as the session would be refused.
* **The selection**: em's encrypted rounds as their exact integer model; noisy-greedy's scores
  with the noise the plan gives them (the two servers' Gaussians, or the plan's joint shape
  where the plan has one: ``SelectionPlan.score_joint``), then the key server's greedy rule
  (PrivSyn's c^(2/3) allocation where the plan splits the 2-way release, else the even one),
  priced by the plan's 2-way rho.
* **The 2-way release** is ``SessionPlan.resolve`` of the chosen pairs: em's release with its
  shape, noisy-greedy's split into one joint release per pair size, or the even two-server
  fallback the rule decides from public information. With the 1-way top-up (noisy-greedy's
  default, ``PlanRequest.one_way_topup``; ``feddpsyn-served-no-topup`` goes without) the
  split release also holds the topped-up 1-ways, and the two measurements of each are
  combined as ``feddpsyn synthesize`` combines them
  (``synthesis.marginals.combine_repeated``).

The accounting is the plan's: rho spent is the 1-ways' rho, the selection's charge and the
resolved 2-way release's rho. It is below the budget's rho at the requested delta by the
delta the plan reserves for its failure terms (bootstraps, the row bound, the joint noises'
conditioning mass), which are spent as delta, not rho.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from feddpsyn.crypto.joint_noise import draw_bits, joint_noise_plaintext
from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.fedbench.methods.base import MethodResult, plan_budget
from feddpsyn.fedbench.methods.feddpsyn_sim import (default_rounds, em_picks, pair_scores,
                                                    simulate_release)
from feddpsyn.params.operator_bound import stated_max_rows
from feddpsyn.params.schema import Schema
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.selection_plan import DEFAULT_SPLITS
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.synthesis.marginals import NoisyMarginal, combine_repeated
from feddpsyn.synthesis.synthesize import synthesize_records

__all__ = ["ServedRelease", "at_envelope_bits", "default_at_first_share", "default_release",
           "feddpsyn_default", "feddpsyn_served_all", "feddpsyn_served_all_pgm",
           "feddpsyn_served_em", "feddpsyn_served_em_pgm", "feddpsyn_served_no_topup",
           "feddpsyn_served_noisy_greedy", "feddpsyn_served_noisy_greedy_pgm", "served_plan",
           "served_release", "served_rounds", "served_selection", "served_session"]


def served_plan(schema: Schema, rows: int, epsilon: float, delta: float, selection: str,
                rounds: int | None, one_way_topup: bool | None = None,
                split: dict[str, float] | None = None) -> SessionPlan:
    """The plan the servers build for a session over ``rows`` records (module docstring);
    ``split``: the budget's shares instead of the selection's default (a what-if)."""
    max_rows = stated_max_rows(schema, rows, epsilon, delta, selection, rounds, NoiseMode.AUTO,
                               split=split)
    return SessionPlan.build(PlanRequest(schema, epsilon, delta, max_rows, selection=selection,
                                         rounds=rounds, noise=NoiseMode.AUTO,
                                         one_way_topup=one_way_topup, split=split))


def _score_noise(plan: SessionPlan, pairs: int) -> tuple[np.ndarray, str]:
    """noisy-greedy's score noise as the servers add it: one joint noise per score where the
    plan gives the scores a joint shape, else the compute server's and the key server's
    independent discrete Gaussians."""
    shape = plan.selection.score_joint
    if shape is not None:
        return (np.asarray(joint_noise_plaintext(shape, draw_bits(pairs, shape),
                                                 draw_bits(pairs, shape)), dtype=np.int64),
                f"joint {shape.uniforms}x{shape.bits}")
    sigma2 = plan.selection.noise_sigma2
    return (discrete_gaussian_vector(sigma2, pairs) + discrete_gaussian_vector(sigma2, pairs),
            f"two-server sigma2 {sigma2} each")


def served_selection(plan: SessionPlan, union_counts: np.ndarray,
                     one_way: list[NoisyMarginal]) -> tuple[list[tuple[int, int]], str]:
    """The pairs the servers choose (module docstring) and, for noisy-greedy, the scores'
    noise."""
    selection = plan.selection
    pairs, scores = pair_scores(plan, union_counts, one_way, selection.max_rows)
    if selection.mode == SelectionMode.EM:
        return em_picks(selection, pairs, scores), ""
    noise, how = _score_noise(plan, len(pairs))
    noisy = {p: scores[p] + int(z) for p, z in zip(pairs, noise)}
    return plan.select_pairs(noisy), how


@dataclass(frozen=True)
class ServedRelease:
    """What a served session publishes before synthesis: the noisy marginals (each topped-up
    1-way's two measurements combined), the rho spent and the budget's, the bytes a client
    uploads, and the notes a ``MethodResult`` carries."""

    marginals: list[NoisyMarginal]
    rho_spent: Fraction
    rho_budget: Fraction
    bytes_per_client: int
    notes: dict


def served_release(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                   delta: float, selection: str, rounds: int | None,
                   one_way_topup: bool | None = None,
                   split: dict[str, float] | None = None) -> ServedRelease:
    """One session's releases as the servers plan and run them (module docstring)."""
    plan = served_plan(schema, len(records), epsilon, delta, selection, rounds, one_way_topup,
                       split)
    counts = [plan.layout.counts(records[owner == c]) for c in np.unique(owner)]
    one_way_spec = plan.release("one_way")
    one_way, upload = simulate_release(plan, counts, names=("one_way",), noise="plan")
    if plan.selection is not None:
        bound = plan.check_row_bound([m.counts.ravel() for m in one_way])
        if not bound.holds:
            raise RuntimeError(f"the servers would refuse this union: {bound.message()}")
    if plan.selection is None:
        chosen, score_noise = [slot.attrs for slot in plan.layout.two_way], ""
        spent = one_way_spec.rho
    else:
        chosen, score_noise = served_selection(plan, np.sum(counts, axis=0), one_way)
        spent = one_way_spec.rho + plan.selection.rho_charged
    notes = {"selection": selection, "selected_pairs": chosen,
             "one_way_noise": plan.noise_statement(one_way_spec),
             "max_rows": plan.max_rows, "delta_reserved": plan.delta - plan.delta_conversion}
    if plan.selection is not None and plan.selection.mode == SelectionMode.EM:
        notes["rounds"] = plan.selection.rounds
    if score_noise:
        notes["score_noise"] = score_noise
    noisy = list(one_way)
    if chosen:
        resolved = plan.resolve(plan.release("two_way"), chosen)
        specs = resolved.parts or (resolved,)
        final = replace(plan, releases=(one_way_spec,) + tuple(specs))
        two_way, _ = simulate_release(final, counts, names=tuple(s.name for s in specs),
                                      noise="plan")
        noisy += two_way
        spent += resolved.rho
        notes["two_way_noise"] = plan.noise_statement(resolved)
        notes["two_way_per_count_variance"] = float(plan.per_count_variance(resolved))
        if plan.one_way_topup:
            notes["one_way_topped_up"] = sum(len(p.marginal_keys) for p in specs
                                             if p.name.startswith("two_way/one_way/"))
    notes["accounting"] = plan.accounting
    return ServedRelease(combine_repeated(noisy), Fraction(spent),
                         Fraction(plan_budget(plan, epsilon, delta)), upload, notes)


def served_session(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                   delta: float, seed: int, selection: str, rounds: int | None,
                   synthesis: str = "gum", one_way_topup: bool | None = None,
                   split: dict[str, float] | None = None) -> MethodResult:
    """One session as the servers plan and run it (:func:`served_release`), its release
    synthesized with ``synthesis`` (``synthesis.synthesize``'s methods)."""
    release = served_release(records, owner, schema, epsilon, delta, selection, rounds,
                             one_way_topup, split)
    notes = {**release.notes, "synthesis": synthesis}
    synth = synthesize_records(schema, release.marginals, synthesis, None,
                               np.random.default_rng(seed))
    unspent = (f"the plan reserves delta {notes['delta_reserved']:.3g} of {delta:g} for its "
               "failure terms, so its rho is converted at the smaller delta"
               if notes["delta_reserved"] > 0 else "")
    if not notes["selected_pairs"]:
        unspent += "; the greedy rule kept no pair, so the 2-way share is not released"
    return MethodResult(synth, release.rho_spent, release.rho_budget,
                        bytes_per_client=release.bytes_per_client, notes=notes,
                        unspent_reason=unspent)


def served_rounds(schema: Schema, rows: int, epsilon: float, delta: float) -> int:
    """em's rounds: ``feddpsyn``'s default (a quarter of the pairs), or fewer where the servers
    would refuse it (each round's bootstraps reserve delta, and the reserve may take at most
    half of delta: Adult at delta 1e-5 is refused at 52 rounds): the most the plan accepts,
    found by bisection (the reserve grows with the rounds)."""
    def accepted(rounds: int) -> bool:
        try:
            served_plan(schema, rows, epsilon, delta, "em", rounds)
        except ValueError:
            return False
        return True

    high = default_rounds(len(schema.domain_sizes))
    if accepted(high):
        return high
    low = 1
    if not accepted(low):
        raise ValueError("the servers refuse even one em round at this budget")
    while high - low > 1:  # bounded: log2(pairs) steps
        mid = (low + high) // 2
        low, high = (mid, high) if accepted(mid) else (low, mid)
    return low


def _default_selection(schema: Schema, epsilon: float, delta: float):
    """The selection a session request gets by default (``wire.SessionCreate``)."""
    from feddpsyn.common import wire

    return wire.SessionCreate(schema=schema.to_dict(), clients=["a"],
                              budget=wire.BudgetSpec(epsilon=epsilon, delta=delta)).selection


def feddpsyn_default(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """Exactly what the servers do by default: the plan ``SessionPlan.build`` makes for the
    request's defaults (``wire.SessionCreate``: selection noisy-greedy, noise auto), its
    noises and selection, and ``feddpsyn synthesize``'s default synthesis (auto)."""
    selection = _default_selection(schema, epsilon, delta)
    return served_session(records, owner, schema, epsilon, delta, seed, selection.mode,
                          selection.rounds, "auto", selection.one_way_topup)


def default_release(records, owner, schema, epsilon, delta) -> ServedRelease:
    """The release :func:`feddpsyn_default` synthesizes, before its synthesis."""
    selection = _default_selection(schema, epsilon, delta)
    return served_release(records, owner, schema, epsilon, delta, selection.mode,
                          selection.rounds, selection.one_way_topup)


def default_at_first_share(share: float):
    """A what-if: :func:`feddpsyn_default` with noisy-greedy's first 1-way release at a fixed
    ``share`` of rho (the scores keep their default share, the kept pairs the rest) instead
    of the plan's rule (``params.budget_split.first_one_way_share``); ``max_rows`` stated as
    the demo states it, for that split."""
    scores = DEFAULT_SPLITS[SelectionMode.NOISY_GREEDY]["selection"]
    split = {"one_way": share, "selection": scores, "two_way": round(1 - scores - share, 12)}

    def method(records, owner, schema, epsilon, delta, seed) -> MethodResult:
        return served_session(records, owner, schema, epsilon, delta, seed, "noisy-greedy",
                              None, "auto", None, split)
    return method


def at_envelope_bits(parameters, bits: int):
    """``parameters`` with noisy-greedy's split 2-way release allowed ``bits`` encrypted bits a
    count and its calls cut (to a power of two) small enough that one holds at most
    ``JOINT_MAX_BITS_PER_CALL`` bits, as a served set of that width would be (a what-if)."""
    import dataclasses

    from feddpsyn.params.noise_rules import JOINT_MAX_BITS_PER_CALL

    cells = 1 << max(0, (JOINT_MAX_BITS_PER_CALL // bits).bit_length() - 1)
    return dataclasses.replace(parameters, envelope_bits=bits,
                               chunk_cells=min(parameters.chunk_cells, cells))


def default_at_envelope_bits(bits: int):
    """A what-if: :func:`feddpsyn_default` at the default parameter set widened by
    :func:`at_envelope_bits`. The set is replaced for the session and restored after it
    (``--jobs 1``: one session at a time)."""
    from feddpsyn.params.parameter_sets import PARAMETER_SETS

    def method(records, owner, schema, epsilon, delta, seed) -> MethodResult:
        saved = PARAMETER_SETS["default"]
        PARAMETER_SETS["default"] = at_envelope_bits(saved, bits)
        try:
            return feddpsyn_default(records, owner, schema, epsilon, delta, seed)
        finally:
            PARAMETER_SETS["default"] = saved
    return method


def feddpsyn_served_em(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """The servers' em session (``feddpsyn``'s rounds where the servers accept them, else the
    most they accept: :func:`served_rounds`), every noise as the plan decides."""
    return served_session(records, owner, schema, epsilon, delta, seed, "em",
                          served_rounds(schema, len(records), epsilon, delta))


def feddpsyn_served_em_pgm(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """:func:`feddpsyn_served_em`'s release, synthesized with Private-PGM on a bounded
    junction tree (``synthesis.pgm``; what ``auto`` does after em) instead of GUM."""
    return served_session(records, owner, schema, epsilon, delta, seed, "em",
                          served_rounds(schema, len(records), epsilon, delta), "pgm")


def feddpsyn_served_all(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """The servers' session without selection (every pair; Adult's demo default)."""
    return served_session(records, owner, schema, epsilon, delta, seed, "none", None)


def feddpsyn_served_noisy_greedy(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """The servers' noisy-greedy session, every noise as the plan decides."""
    return served_session(records, owner, schema, epsilon, delta, seed, "noisy-greedy", None)


def feddpsyn_served_all_pgm(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """:func:`feddpsyn_served_all`'s release, synthesized with Private-PGM on a bounded
    junction tree (``synthesis.pgm``) instead of GUM: ``feddpsyn synthesize --method pgm``."""
    return served_session(records, owner, schema, epsilon, delta, seed, "none", None, "pgm")


def feddpsyn_served_noisy_greedy_pgm(records, owner, schema, epsilon, delta,
                                     seed) -> MethodResult:
    """:func:`feddpsyn_served_noisy_greedy`'s release, synthesized with Private-PGM on a
    bounded junction tree (``synthesis.pgm``) instead of GUM."""
    return served_session(records, owner, schema, epsilon, delta, seed, "noisy-greedy", None,
                          "pgm")


def feddpsyn_served_no_topup(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """:func:`feddpsyn_default` without the 1-way top-up (``PlanRequest.one_way_topup``
    False, ``session create --no-one-way-topup``): the servers' noisy-greedy plan whose
    split 2-way release holds the kept pairs only, synthesized with ``auto``."""
    return served_session(records, owner, schema, epsilon, delta, seed, "noisy-greedy", None,
                          "auto", one_way_topup=False)
