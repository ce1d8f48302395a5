"""``feddpsyn``: our two-server TFHE pipeline, run as its exact integer arithmetic in clear.

Each client's counts are masked (SHAKE-256 masks, mod 2^k), summed with the compute server's
offset (its discrete Gaussian noise and a fresh bit above the count) exactly as
:func:`crypto.aggregation.aggregate_plaintext` models the circuit, decoded like the key
server does, and noised again with the key server's own noise: the released values are
bit-for-bit what the servers would publish for the same randomness
(``tests/test_fedbench_methods.py`` runs one chunk through the real circuit and this path).
Then consistency and GUM, as the demo does.
"""

from __future__ import annotations

import numpy as np

from crypto.aggregation import aggregate_plaintext, decode_release, release_offset
from crypto.discrete_gaussian import discrete_gaussian_vector
from crypto.masking import expand_masks, mask_counts, new_seed, seed_commitment
from feddpsyn import wire
from fedbench.methods.base import MethodResult, budget_rho
from fedbench.methods.central_privsyn import DEFAULT_SPLIT
from params.schema import Schema
from params.session_plan import SessionPlan
from synthesis.marginals import NoisyMarginal
from synthesis.synthesize import synthesize_records


def p1_release_model(masked: list[np.ndarray], mask_sum: np.ndarray, noise_cs: np.ndarray,
                     count_bits: int) -> np.ndarray:
    """What the key server decrypts for a release over these cells (all selected)."""
    select = np.ones(len(mask_sum), dtype=np.int64)
    offset = release_offset(mask_sum, noise_cs, select, count_bits)
    return aggregate_plaintext(masked, select, offset, count_bits), offset


def simulate_release(plan: SessionPlan, client_counts: list[np.ndarray],
                     session_id: str = "bench") -> tuple[list[NoisyMarginal], float]:
    """The published noisy marginals, and the bytes one client uploads (masked JSON + seed)."""
    k = plan.parameters.count_bits
    seeds = [new_seed() for _ in client_counts]
    masks = [expand_masks(s, session_id, f"c{i}", len(c), k)
             for i, (s, c) in enumerate(zip(seeds, client_counts))]
    masked = [mask_counts(c, m, k) for c, m in zip(client_counts, masks)]
    mask_sum = np.sum(masks, axis=0)
    out = []
    for spec in plan.releases:
        cells = plan.layout.cells_of(plan.slots_of(spec))
        noise_cs = discrete_gaussian_vector(spec.sigma2, len(cells))
        decrypted, _ = p1_release_model([m[cells] for m in masked], mask_sum[cells], noise_cs, k)
        released = decode_release(decrypted, k) + discrete_gaussian_vector(spec.sigma2,
                                                                           len(cells))
        pos = 0
        for slot in plan.slots_of(spec):
            out.append(NoisyMarginal(slot.attrs,
                                     released[pos:pos + slot.size].reshape(slot.shape)
                                     .astype(float), 2 * float(spec.sigma2)))
            pos += slot.size
    # The same two bodies the client agent sends (clients/agent.py).
    upload = (len(wire.SeedUpload(seed_hex=seeds[0].hex()).model_dump_json())
              + len(wire.MaskedUpload(commitment=seed_commitment(seeds[0], session_id, "c0"),
                                      values=masked[0].tolist()).model_dump_json()))
    return out, float(upload)


def feddpsyn_sim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                 delta: float, seed: int) -> MethodResult:
    plan = SessionPlan.build(schema, None, epsilon, delta, DEFAULT_SPLIT, "default",
                             max_rows=max(len(records), 1))
    counts = [plan.layout.counts(records[owner == c]) for c in np.unique(owner)]
    noisy, upload = simulate_release(plan, counts)
    synth = synthesize_records(schema, noisy, "gum", None, np.random.default_rng(seed))
    spent = sum((r.rho for r in plan.releases), start=0 * plan.rho_total)
    return MethodResult(synth, spent, budget_rho(epsilon, delta), bytes_per_client=upload,
                        notes={"noise": "two independent discrete Gaussians (CS + KS)"})
