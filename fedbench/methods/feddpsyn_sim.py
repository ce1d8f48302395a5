"""``feddpsyn``: our two-server TFHE pipeline, run as its exact integer arithmetic in clear.

Each client's counts are masked (SHAKE-256 masks, mod 2^k), summed with the compute server's
offset (its discrete Gaussian noise and a fresh bit above the count) exactly as
:func:`crypto.aggregation.aggregate_plaintext` models the circuit, decoded like the key
server does, and noised again with the key server's own noise: the released values are
bit-for-bit what the servers would publish for the same randomness
(``tests/fedbench/test_fedbench_methods.py`` runs one chunk through the real circuit and this path).
Selection (``params.selection_plan``): by default the 2-way marginals are chosen as the
servers choose them, ``em``: InDif against the released 1-ways, then ``rounds`` encrypted
permute-and-flip rounds run as their exact integer model (``dp.pair_selection``;
``tests/crypto/test_selection.py`` and ``tests/crypto/test_private_selection.py`` prove the circuits
bit-identical to it). ``feddpsyn-noisy-greedy`` and ``feddpsyn-all`` are the other modes.
Then consistency and GUM, as the demo does.

``noise="joint"`` (``feddpsyn-joint``, ``feddpsyn-all-joint``, ``feddpsyn-noisy-greedy-joint``)
releases with the one noise that neither server knows instead of two discrete
Gaussians: per release the shape of ``crypto.joint_noise.choose_shape`` (matched to the
release's rho at the orders of the session's conversion; where its conditioning mass exceeds
the servers' share of delta, the release keeps its two Gaussians, :func:`joint_shape`), both
servers' bits from the CSPRNG, through the joint circuit's exact integer model
(``crypto.joint_noise.joint_release_plaintext``, tested against the circuit in
``tests/crypto/test_joint_noise.py``). noisy-greedy's scores carry one joint noise each as well,
matched to the selection's rho over the pairs (every pair's InDif moves by at most 1, so the
scores are a release of ``pairs`` sensitivity-1 queries). The servers run the joint noise
on em's and fixed releases (the rule of ``params.noise_rules``, ``noise="auto"``) and on
noisy-greedy's 2-way release split by PrivSyn's allocation: ``feddpsyn-noisy-greedy-joint-
privsyn`` takes that release's shapes, or its even two-server fallback, from the servers'
own function (:func:`servers_split`); noisy-greedy's scores and the other releases' shapes
here are this module's (:func:`joint_shape`), which measures what wiring them would buy.
``fedbench.methods.feddpsyn_served`` is the other way round: a session exactly as the
servers plan and run it, every shape and fallback theirs.
Each joint session is checked end to end
(:func:`joint_session_delta`): its conditioned Renyi curve (the joint parts) plus the em
selection's rho, converted at the requested epsilon, plus every part's failure mass, is at
most delta.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np

from feddpsyn.common import wire
from feddpsyn.crypto.aggregation import (aggregate_plaintext, decode_release, publish_counts,
                                         release_offset)
from feddpsyn.crypto.joint_noise import (check_room, choose_shape, draw_bits, joint_noise_plaintext,
                                         joint_offset, joint_release_plaintext, signed_weights)
from feddpsyn.crypto.masking import expand_masks, mask_counts, new_seed, seed_commitment
from feddpsyn.crypto.tfhe_permute_and_flip import em_rounds_model, thresholds
from feddpsyn.dp.accounting import gaussian_sigma2
from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.dp.binomial_accounting import session_delta_of
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape, release_marginals
from feddpsyn.crypto.indif import indif_at_width
from feddpsyn.dp.pair_selection import expected_counts_for_pairs, greedy_select, indif_scores
from feddpsyn.dp.privsyn_allocation import allocation_groups, greedy_select_allocated
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.noise_rules import JOINT_DELTA_SHARE, JOINT_TAIL, conditioning_refusal
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.release_spec import ReleaseSpec, split_share, two_way_rho
from feddpsyn.params.selection_plan import DEFAULT_SPLITS, SelectionPlan
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.synthesis.marginals import NoisyMarginal
from feddpsyn.synthesis.synthesize import synthesize_records


def p1_release_model(masked: list[np.ndarray], mask_sum: np.ndarray, noise_cs: np.ndarray,
                     count_bits: int) -> np.ndarray:
    """What the key server decrypts for a release over these cells (all selected)."""
    select = np.ones(len(mask_sum), dtype=np.int64)
    offset = release_offset(mask_sum, noise_cs, select, count_bits)
    return aggregate_plaintext(masked, select, offset, count_bits), offset


def joint_shape(plan: SessionPlan, spec: ReleaseSpec) -> tuple[JointNoiseShape | None, str]:
    """The joint noise a release would carry in place of its two Gaussians, or None and why
    it keeps them: as the servers' rule (``params.noise_rules``), a shape whose conditioning
    mass over the release's marginals exceeds JOINT_DELTA_SHARE of the conversion's delta is
    refused (a tiny release, one pair at a large rho, matches the curve with two 4-bit
    uniforms whose edge alone weighs 1/256)."""
    return _capped(choose_shape(release_marginals(spec.rho, spec.sigma2), spec.rho,
                                plan.rho_total, plan.delta_conversion, JOINT_TAIL),
                   release_marginals(spec.rho, spec.sigma2), plan)


def _capped(shape: JointNoiseShape, marginals: int,
            plan: SessionPlan) -> tuple[JointNoiseShape | None, str]:
    refused = conditioning_refusal(shape, marginals,
                                   JOINT_DELTA_SHARE * plan.delta_conversion)
    if refused:
        return None, f"the matching joint shape ({shape.uniforms} x {shape.bits}-bit): {refused}"
    check_room(shape, plan.max_rows, plan.parameters.count_bits)
    return shape, ""


def joint_release_model(masked: list[np.ndarray], mask_sum: np.ndarray,
                        shape: JointNoiseShape, count_bits: int) -> np.ndarray:
    """What the key server would publish under the joint noise: both servers' bits drawn,
    the circuit's exact integer model, decoded without a noise of its own."""
    cells = len(mask_sum)
    ks_bits, cs_bits = draw_bits(cells, shape), draw_bits(cells, shape)
    select = np.ones(cells, dtype=np.int64)
    offset = joint_offset(shape, mask_sum, cs_bits, select, count_bits)
    decrypted = joint_release_plaintext(masked, ks_bits, signed_weights(shape, cs_bits, select),
                                        select, offset, count_bits)
    return decode_release(decrypted, count_bits)


def simulate_release(plan: SessionPlan, client_counts: list[np.ndarray],
                     session_id: str = "bench", names: tuple[str, ...] | None = None,
                     noise: str = "two-server",
                     joint_parts: list | None = None,
                     fallbacks: list | None = None) -> tuple[list[NoisyMarginal], float]:
    """The published noisy marginals of ``plan``'s releases (or those ``names``), and the
    bytes one client uploads (masked JSON + seed); ``noise``: "two-server" (today's
    servers), "joint" (module docstring) or "plan" (what the plan decided per release: its
    joint shape, else the two servers' Gaussians); each joint release's (shape, marginals) is
    appended to ``joint_parts`` for the session's check, and each release that "joint" left
    with its Gaussians (:func:`joint_shape`'s refusal) to ``fallbacks`` as (name, rho,
    why): that rho is then zCDP in the check."""
    if noise not in ("two-server", "joint", "plan"):
        raise ValueError("noise is 'two-server', 'joint' or 'plan'")
    k = plan.parameters.count_bits
    seeds = [new_seed() for _ in client_counts]
    masks = [expand_masks(s, session_id, f"c{i}", len(c), k)
             for i, (s, c) in enumerate(zip(seeds, client_counts))]
    masked = [mask_counts(c, m, k) for c, m in zip(client_counts, masks)]
    mask_sum = np.sum(masks, axis=0)
    out = []
    for spec in plan.releases:
        if names is not None and spec.name not in names:
            continue
        cells = plan.layout.cells_of(plan.slots_of(spec))
        shape, why = None, ""
        if spec.joint is not None and noise in (NoiseMode.JOINT, "plan"):
            shape = spec.joint  # a shape the servers' rule already chose (servers_split)
        elif noise == NoiseMode.JOINT:
            shape, why = joint_shape(plan, spec)
            if shape is None and fallbacks is not None:
                fallbacks.append((spec.name, spec.rho, why))
        if shape is not None:
            if joint_parts is not None:
                joint_parts.append((shape, release_marginals(spec.rho, spec.sigma2)))
            released = joint_release_model([m[cells] for m in masked], mask_sum[cells], shape, k)
            variance = float(shape.variance)
        else:
            noise_cs = discrete_gaussian_vector(spec.sigma2, len(cells))
            decrypted, _ = p1_release_model([m[cells] for m in masked], mask_sum[cells],
                                            noise_cs, k)
            released = publish_counts(decrypted,
                                      discrete_gaussian_vector(spec.sigma2, len(cells)), k)
            variance = 2 * float(spec.sigma2)
        pos = 0
        for slot in plan.slots_of(spec):
            out.append(NoisyMarginal(slot.attrs,
                                     released[pos:pos + slot.size].reshape(slot.shape)
                                     .astype(float), variance))
            pos += slot.size
    # The same two bodies the client agent sends (clients/agent.py).
    upload = (len(wire.SeedUpload(seed_hex=seeds[0].hex()).model_dump_json())
              + len(wire.MaskedUpload(commitment=seed_commitment(seeds[0], session_id, "c0"),
                                      values=masked[0].tolist()).model_dump_json()))
    return out, float(upload)


def score_shape(plan: SessionPlan,
                selection: SelectionPlan) -> tuple[JointNoiseShape | None, str]:
    """noisy-greedy's joint score noise: one per pair, matched to the selection's rho over
    ``pairs`` sensitivity-1 scores (its planned sigma2 is pairs / (2 rho)); None and why
    under :func:`joint_shape`'s rule."""
    marginals = release_marginals(selection.rho, selection.noise_sigma2)
    return _capped(choose_shape(marginals, selection.rho, plan.rho_total,
                                plan.delta_conversion, JOINT_TAIL), marginals, plan)


def pair_scores(plan: SessionPlan, union_counts: np.ndarray, one_way: list[NoisyMarginal],
                max_rows: int) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int]]:
    """Every candidate pair and its InDif against expected counts from the released 1-ways
    (Primitive 2's exact value: each chunk at the width the servers give it from the same
    1-ways, ``params.indif_widths``, a chunk whose bound failed scored as its circuit
    would)."""
    pairs = [slot.attrs for slot in plan.layout.two_way]
    published = [m.counts.ravel() for m in one_way]
    expected = expected_counts_for_pairs(published, pairs, max_rows)
    counts = {slot.attrs: union_counts[slot.offset:slot.offset + slot.size]
              for slot in plan.layout.two_way}
    if plan.selection is None or not plan.selection.indif_widths:
        return pairs, indif_scores(counts, expected)
    scores = dict.fromkeys(pairs, 0)
    for index, cells, _, width in plan.indif_chunks_by_width(published):
        slot = plan.layout.two_way[index]
        local = cells - slot.offset
        scores[slot.attrs] += indif_at_width(counts[slot.attrs][local],
                                             expected[slot.attrs][local], width)
    return pairs, scores


def em_picks(selection: SelectionPlan, pairs: list[tuple[int, int]],
             scores: dict[tuple[int, int], int]) -> list[tuple[int, int]]:
    """The pairs em's encrypted rounds choose, by their exact integer model."""
    c = thresholds(selection.shape, selection.step.epsilon)
    picks = em_rounds_model([scores[p] for p in pairs], selection.shape, c, selection.rounds)
    return [pairs[i] for i in picks]


def simulate_selection(plan: SessionPlan, selection: SelectionPlan, union_counts: np.ndarray,
                       one_way: list[NoisyMarginal], max_rows: int, noise: str = "two-server",
                       joint_parts: list | None = None, allocation: str = "even",
                       fallbacks: list | None = None) -> list[tuple[int, int]]:
    """The pairs the servers would choose: InDif against expected counts from the released
    1-ways (Primitive 2's exact value), then the encrypted rounds' integer model (em) or
    noisy scores and PrivSyn's greedy rule (noisy-greedy: two independent discrete
    Gaussians, or with ``noise="joint"`` one joint noise per score, both servers' bits from
    the CSPRNG; its (shape, pairs) is appended to ``joint_parts``, or, when
    :func:`score_shape` refuses, ("scores", the selection's rho, why) to ``fallbacks`` and
    the scores keep their two Gaussians)."""
    pairs, scores = pair_scores(plan, union_counts, one_way, max_rows)
    if selection.mode == SelectionMode.EM:
        return em_picks(selection, pairs, scores)
    shape, why = score_shape(plan, selection) if noise == NoiseMode.JOINT else (None, "")
    if why and fallbacks is not None:
        fallbacks.append(("scores", selection.rho_charged, why))
    if shape is not None:
        if joint_parts is not None:
            joint_parts.append((shape, len(pairs)))
        draws = joint_noise_plaintext(shape, draw_bits(len(pairs), shape),
                                      draw_bits(len(pairs), shape))
        noisy = {p: scores[p] + int(z) for p, z in zip(pairs, draws)}
    else:
        # Each server adds its own noise (two views, as the releases).
        sigma2 = selection.noise_sigma2
        noisy = {p: scores[p] + int(discrete_gaussian_vector(sigma2, 1)[0])
                 + int(discrete_gaussian_vector(sigma2, 1)[0]) for p in pairs}
    cells = {slot.attrs: slot.size for slot in plan.layout.two_way}
    if allocation == "privsyn":
        return greedy_select_allocated(noisy, cells, plan.release("two_way").rho)
    return greedy_select(noisy, cells, plan.release("two_way").rho)


def joint_session_delta(parts: list[tuple[JointNoiseShape, int]], rho_zcdp: Fraction,
                        epsilon: float) -> float:
    """The delta at ``epsilon`` of a session whose releases carry the joint ``parts`` (shape,
    how many of its queries one record moves) and whose other steps are ``rho_zcdp``-zCDP:
    ``dp.binomial_accounting``'s conditioning rule over every order, rounded up."""
    return session_delta_of([(shape.pair(), marginals, JOINT_TAIL)
                             for shape, marginals in parts], rho_zcdp, epsilon)


def servers_split(schema: Schema, epsilon: float, delta: float, max_rows: int,
                  chosen: list[tuple[int, int]], rho_two: Fraction,
                  parameter_set: str) -> tuple[tuple[ReleaseSpec, ...], str]:
    """noisy-greedy's 2-way release over ``chosen`` as the servers resolve it
    (``SessionPlan.split_release``, the same function): their plan's envelope, PrivSyn's
    c^(2/3) shares of ``rho_two``, one verified joint shape per pair size; or, with the
    rule's reason, the even two-server release it falls back to. The groups' shapes are
    verified against the shares of ``rho_two`` itself (at least the servers' own 2-way rho,
    which also reserves delta, so the envelope matches them too)."""
    served = SessionPlan.build(PlanRequest(schema, epsilon, delta, max_rows,
                                           parameter_set=parameter_set,
                                           selection=SelectionMode.NOISY_GREEDY,
                                           noise=NoiseMode.AUTO))
    planned = served.release("two_way")
    keys = served.keys_of_pairs(chosen)
    if planned.allocation == "privsyn":
        split, why = served.split_release(replace(planned, rho=rho_two), keys)
    else:
        split, why = None, "the servers' plan has no split 2-way release at this budget"
    if split is None:
        return (ReleaseSpec("two_way", keys, rho_two, gaussian_sigma2(rho_two, len(keys))),
                ), why
    return split.parts, ""


def default_rounds(attributes: int) -> int:
    return attributes * (attributes - 1) // 4


def simulated_session(records: np.ndarray, owner: np.ndarray, schema: Schema,
                      epsilon: float, delta: float, seed: int, selection_mode: str = "em",
                      rounds: int | None = None, noise: str = "two-server",
                      allocation: str = "even") -> MethodResult:
    """``allocation``: how the 2-way rho is shared over the chosen pairs, "even" (the
    servers' one release) or "privsyn" (PrivSyn's c^(2/3), :func:`allocation_groups`; with
    noisy-greedy its greedy rule uses the same allocation)."""
    if allocation not in ("even", "privsyn"):
        raise ValueError("allocation is 'even' or 'privsyn'")
    max_rows = max(len(records), 1)
    split = DEFAULT_SPLITS[selection_mode]
    # The plan's own budget and Gaussians; the joint shapes are this module's (docstring), so
    # the two noises compare on one rho, and the joint session is checked end to end below.
    plan = SessionPlan.build(PlanRequest(
        schema, epsilon, delta, max_rows,
        split={"one_way": split["one_way"], "two_way": split["two_way"]},
        noise=NoiseMode.TWO_SERVER, calibrated=False, selection="none"))
    counts = [plan.layout.counts(records[owner == c]) for c in np.unique(owner)]
    notes = {"noise": ("one joint noise neither server knows (per release: "
                       "crypto.joint_noise.choose_shape)" if noise == NoiseMode.JOINT else
                       "two independent discrete Gaussians (CS + KS)"),
             "selection": selection_mode}
    unspent = ""
    joint_parts: list = []
    fallbacks: list = []  # (name, rho, why) of what "joint" left with two Gaussians
    rho_zcdp = Fraction(0)  # what the joint check composes as zCDP: the em rounds
    if selection_mode == SelectionMode.NONE:
        noisy, upload = simulate_release(plan, counts, noise=noise, joint_parts=joint_parts,
                                         fallbacks=fallbacks)
        spent = sum((r.rho for r in plan.releases), start=0 * plan.rho_total)
    else:
        rho_select = split_share(plan.rho_total, split["selection"])
        selection = SelectionPlan.build(selection_mode, len(plan.layout.two_way), max_rows,
                                        rho_select, rounds if rounds is not None
                                        else default_rounds(len(schema.domain_sizes)))
        one_way, upload = simulate_release(plan, counts, names=("one_way",), noise=noise,
                                           joint_parts=joint_parts, fallbacks=fallbacks)
        chosen = simulate_selection(plan, selection, np.sum(counts, axis=0), one_way, max_rows,
                                    noise=noise, joint_parts=joint_parts,
                                    allocation=allocation, fallbacks=fallbacks)
        if selection_mode == SelectionMode.EM or noise != NoiseMode.JOINT:
            rho_zcdp = selection.rho_charged
        if not chosen:  # greedy may keep none: the 1-ways alone then
            noisy = one_way
            spent = plan.release("one_way").rho + selection.rho_charged
            unspent = "noisy-greedy kept no pair: the 2-way share is not released"
        else:
            # What the selection's grid left unspent goes to the 2-ways, by the servers' rule.
            rho_two = two_way_rho(plan.rho_total, split, selection.rho_charged)
            layout = MarginalLayout.build(schema.domain_sizes, chosen)
            two_noise = noise
            if allocation == "privsyn" and noise == NoiseMode.JOINT:
                two_ways, why = servers_split(schema, epsilon, delta, max_rows, chosen,
                                              rho_two, plan.parameters.name)
                if why:  # the servers' even two-server release: zCDP, composed as such
                    two_noise, rho_zcdp = NoiseMode.TWO_SERVER, rho_zcdp + rho_two
                    notes["two_way_noise"] = f"two-server: {why}"
            else:
                groups = (allocation_groups({m.attrs: m.size for m in layout.two_way}, chosen,
                                            rho_two) if allocation == "privsyn"
                          else [(chosen, rho_two)])
                two_ways = tuple(
                    ReleaseSpec(f"two_way_{i}", tuple(layout.slot(p).key for p in pairs), rho,
                                gaussian_sigma2(rho, len(pairs)))
                    for i, (pairs, rho) in enumerate(groups))
            final = replace(plan, layout=layout, releases=(plan.release("one_way"),) + two_ways)
            two_way, _ = simulate_release(final, [final.layout.counts(records[owner == c])
                                                  for c in np.unique(owner)],
                                          names=tuple(r.name for r in two_ways),
                                          noise=two_noise, joint_parts=joint_parts,
                                          fallbacks=fallbacks)
            noisy = one_way + two_way
            spent = (plan.release("one_way").rho + selection.rho_charged
                     + sum((r.rho for r in two_ways), start=Fraction(0)))
        notes.update(selected_pairs=chosen,
                     selection_report=selection.report(plan.pair_cells()))
    if fallbacks:  # their two Gaussians are zCDP, composed as such
        rho_zcdp += sum((rho for _, rho, _ in fallbacks), start=Fraction(0))
        notes["two_server_fallbacks"] = [f"{name}: {why}" for name, _, why in fallbacks]
    if noise == NoiseMode.JOINT:
        session_delta = joint_session_delta(joint_parts, rho_zcdp, epsilon)
        if session_delta > delta:
            raise RuntimeError(f"the joint session is ({epsilon}, {session_delta:.4g})-DP, "
                               f"above delta {delta}")
        notes.update(joint_shapes=[(s.uniforms, s.bits, m) for s, m in joint_parts],
                     session_delta=session_delta)
    synth = synthesize_records(schema, noisy, "gum", None, np.random.default_rng(seed))
    return MethodResult(synth, spent, budget_rho(epsilon, delta), bytes_per_client=upload,
                        notes=notes, unspent_reason=unspent)


def feddpsyn_all_pairs(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """The core pipeline without selection (every 2-way marginal), for comparison."""
    return simulated_session(records, owner, schema, epsilon, delta, seed,
                             selection_mode="none")


def feddpsyn_noisy_greedy(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """PrivSyn's noisy-score greedy selection in place of the encrypted exponential
    mechanism."""
    return simulated_session(records, owner, schema, epsilon, delta, seed,
                             selection_mode="noisy-greedy")


def feddpsyn_joint(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """``feddpsyn`` (em selection) with the releases' one joint noise (module docstring)."""
    return simulated_session(records, owner, schema, epsilon, delta, seed, noise="joint")


def feddpsyn_noisy_greedy_joint(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """``feddpsyn-noisy-greedy`` with one joint noise on every score and every release."""
    return simulated_session(records, owner, schema, epsilon, delta, seed,
                             selection_mode="noisy-greedy", noise="joint")


def feddpsyn_noisy_greedy_joint_privsyn(records, owner, schema, epsilon, delta,
                                        seed) -> MethodResult:
    """``feddpsyn-noisy-greedy-joint`` with PrivSyn's c^(2/3) allocation of the 2-way rho
    over the chosen pairs (one joint release per pair size) and its greedy rule to match."""
    return simulated_session(records, owner, schema, epsilon, delta, seed,
                             selection_mode="noisy-greedy", noise="joint", allocation="privsyn")


def feddpsyn_all_pairs_joint(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """Every 2-way marginal, with the releases' one joint noise."""
    return simulated_session(records, owner, schema, epsilon, delta, seed,
                             selection_mode="none", noise="joint")
