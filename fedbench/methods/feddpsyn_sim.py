"""``feddpsyn``: our two-server TFHE pipeline, run as its exact integer arithmetic in clear.

Each client's counts are masked (SHAKE-256 masks, mod 2^k), summed with the compute server's
offset (its discrete Gaussian noise and a fresh bit above the count) exactly as
:func:`crypto.aggregation.aggregate_plaintext` models the circuit, decoded like the key
server does, and noised again with the key server's own noise: the released values are
bit-for-bit what the servers would publish for the same randomness
(``tests/test_fedbench_methods.py`` runs one chunk through the real circuit and this path).
Selection (``params.selection_plan``): by default the 2-way marginals are chosen as the
servers choose them, ``em``: InDif against the released 1-ways, then ``rounds`` encrypted
permute-and-flip rounds run as their exact integer model (``dp.pair_selection``;
``tests/test_selection.py`` and ``tests/test_private_selection.py`` prove the circuits
bit-identical to it). ``feddpsyn-noisy-greedy`` and ``feddpsyn-all`` are the other modes.
Then consistency and GUM, as the demo does.

``noise="joint"`` (``feddpsyn-joint``, ``feddpsyn-all-joint``) releases with issue 14's one
noise that neither server knows instead of two discrete Gaussians: per release the shape of
``crypto.joint_noise.choose_shape`` (matched to the release's rho at the orders of the
session's conversion), both servers' bits from the CSPRNG, through the joint circuit's exact
integer model (``crypto.joint_noise.joint_release_plaintext``, tested against the circuit in
``tests/test_joint_noise.py``). The servers do not run this path yet: it measures what
wiring it would buy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from common import wire
from crypto.aggregation import (aggregate_plaintext, decode_release, publish_counts,
                                release_offset)
from crypto.joint_noise import (check_room, choose_shape, draw_bits, joint_offset,
                                joint_release_plaintext, signed_weights)
from crypto.masking import expand_masks, mask_counts, new_seed, seed_commitment
from crypto.selection import em_rounds_model, thresholds
from dp.accounting import gaussian_sigma2
from dp.discrete_gaussian import discrete_gaussian_vector
from dp.joint_noise_accounting import JointNoiseShape, release_marginals
from dp.pair_selection import expected_counts_for_pairs, greedy_select, indif_scores
from fedbench.methods.base import MethodResult, budget_rho
from params.layout import MarginalLayout
from params.schema import Schema
from params.selection_plan import DEFAULT_SPLITS, SelectionPlan
from params.session_plan import ReleaseSpec, SessionPlan, split_share, two_way_rho
from synthesis.marginals import NoisyMarginal
from synthesis.synthesize import synthesize_records


def p1_release_model(masked: list[np.ndarray], mask_sum: np.ndarray, noise_cs: np.ndarray,
                     count_bits: int) -> np.ndarray:
    """What the key server decrypts for a release over these cells (all selected)."""
    select = np.ones(len(mask_sum), dtype=np.int64)
    offset = release_offset(mask_sum, noise_cs, select, count_bits)
    return aggregate_plaintext(masked, select, offset, count_bits), offset


# The conditioning tail of a uniforms-shaped joint noise, per count (as bench_joint_noise).
JOINT_TAIL = 1e-12


def joint_shape(plan: SessionPlan, spec: ReleaseSpec) -> JointNoiseShape:
    """The joint noise a release would carry in place of its two Gaussians."""
    shape = choose_shape(release_marginals(spec.rho, spec.sigma2), spec.rho, plan.rho_total,
                         plan.delta_conversion, JOINT_TAIL)
    check_room(shape, plan.max_rows, plan.parameters.count_bits)
    return shape


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
                     noise: str = "two-server") -> tuple[list[NoisyMarginal], float]:
    """The published noisy marginals of ``plan``'s releases (or those ``names``), and the
    bytes one client uploads (masked JSON + seed); ``noise``: "two-server" (today's
    servers) or "joint" (module docstring)."""
    if noise not in ("two-server", "joint"):
        raise ValueError("noise is 'two-server' or 'joint'")
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
        if noise == "joint":
            shape = joint_shape(plan, spec)
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


def simulate_selection(plan: SessionPlan, selection: SelectionPlan, union_counts: np.ndarray,
                       one_way: list[NoisyMarginal], max_rows: int) -> list[tuple[int, int]]:
    """The pairs the servers would choose: InDif against expected counts from the released
    1-ways (Primitive 2's exact value), then the encrypted rounds' integer model (em) or
    two independent noises and PrivSyn's greedy rule (noisy-greedy)."""
    pairs = [slot.attrs for slot in plan.layout.two_way]
    expected = expected_counts_for_pairs([m.counts.ravel() for m in one_way], pairs, max_rows)
    counts = {slot.attrs: union_counts[slot.offset:slot.offset + slot.size]
              for slot in plan.layout.two_way}
    scores = indif_scores(counts, expected)
    if selection.mode == "em":
        c = thresholds(selection.shape, selection.step.epsilon)
        picks = em_rounds_model([scores[p] for p in pairs], selection.shape, c,
                                selection.rounds)
        return [pairs[i] for i in picks]
    # noisy-greedy: each server adds its own noise (two views, as the releases).
    sigma2 = selection.noise_sigma2
    noisy = {p: scores[p] + int(discrete_gaussian_vector(sigma2, 1)[0])
             + int(discrete_gaussian_vector(sigma2, 1)[0]) for p in pairs}
    cells = {slot.attrs: slot.size for slot in plan.layout.two_way}
    return greedy_select(noisy, cells, plan.release("two_way").rho)


def default_rounds(attributes: int) -> int:
    return attributes * (attributes - 1) // 4


def feddpsyn_sim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                 delta: float, seed: int, selection_mode: str = "em",
                 rounds: int | None = None, noise: str = "two-server") -> MethodResult:
    if noise == "joint" and selection_mode == "noisy-greedy":
        raise ValueError("the joint noise is simulated for the releases (em or none), not for "
                         "noisy-greedy's scores")
    max_rows = max(len(records), 1)
    split = DEFAULT_SPLITS[selection_mode]
    plan = SessionPlan.build(schema, None, epsilon, delta,
                             {"one_way": split["one_way"], "two_way": split["two_way"]},
                             "default", max_rows=max_rows)
    counts = [plan.layout.counts(records[owner == c]) for c in np.unique(owner)]
    notes = {"noise": ("one joint noise neither server knows (per release: "
                       "crypto.joint_noise.choose_shape)" if noise == "joint" else
                       "two independent discrete Gaussians (CS + KS)"),
             "selection": selection_mode}
    unspent = ""
    if selection_mode == "none":
        noisy, upload = simulate_release(plan, counts, noise=noise)
        spent = sum((r.rho for r in plan.releases), start=0 * plan.rho_total)
    else:
        rho_select = split_share(plan.rho_total, split["selection"])
        selection = SelectionPlan.build(selection_mode, len(plan.layout.two_way), max_rows,
                                        rho_select, rounds if rounds is not None
                                        else default_rounds(len(schema.domain_sizes)))
        one_way, upload = simulate_release(plan, counts, names=("one_way",), noise=noise)
        chosen = simulate_selection(plan, selection, np.sum(counts, axis=0), one_way, max_rows)
        if not chosen:  # greedy may keep none: the 1-ways alone then
            noisy = one_way
            spent = plan.release("one_way").rho + selection.rho_charged
            unspent = "noisy-greedy kept no pair: the 2-way share is not released"
        else:
            # What the selection's grid left unspent goes to the 2-ways, by the servers' rule.
            rho_two = two_way_rho(plan.rho_total, split, selection.rho_charged)
            layout = MarginalLayout.build(schema.domain_sizes, chosen)
            final = replace(plan, layout=layout, releases=(
                plan.release("one_way"),
                ReleaseSpec("two_way", tuple(m.key for m in layout.two_way), rho_two,
                            gaussian_sigma2(rho_two, len(chosen)))))
            two_way, _ = simulate_release(final, [final.layout.counts(records[owner == c])
                                                  for c in np.unique(owner)],
                                          names=("two_way",), noise=noise)
            noisy = one_way + two_way
            spent = (plan.release("one_way").rho + selection.rho_charged
                     + final.release("two_way").rho)
        notes.update(selected_pairs=chosen,
                     selection_report=selection.report(plan.pair_cells()))
    synth = synthesize_records(schema, noisy, "gum", None, np.random.default_rng(seed))
    return MethodResult(synth, spent, budget_rho(epsilon, delta), bytes_per_client=upload,
                        notes=notes, unspent_reason=unspent)


def feddpsyn_all_pairs(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """The core pipeline without selection (every 2-way marginal), for comparison."""
    return feddpsyn_sim(records, owner, schema, epsilon, delta, seed, selection_mode="none")


def feddpsyn_noisy_greedy(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """PrivSyn's noisy-score greedy selection in place of the encrypted exponential
    mechanism."""
    return feddpsyn_sim(records, owner, schema, epsilon, delta, seed,
                        selection_mode="noisy-greedy")


def feddpsyn_joint(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """``feddpsyn`` (em selection) with the releases' one joint noise (module docstring)."""
    return feddpsyn_sim(records, owner, schema, epsilon, delta, seed, noise="joint")


def feddpsyn_all_pairs_joint(records, owner, schema, epsilon, delta, seed) -> MethodResult:
    """Every 2-way marginal, with the releases' one joint noise."""
    return feddpsyn_sim(records, owner, schema, epsilon, delta, seed, selection_mode="none",
                        noise="joint")
