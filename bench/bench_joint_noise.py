"""Benchmark: one joint noise (``crypto.joint_noise``) against today's two-noise release, per
released cell, at the Fed-Heart-Disease demo's sizes (4 clients, eps 1, delta 1e-5, em with
4 rounds, parameter set "default": k = 20).

For each release (the 1-ways: 12 marginals, 60 cells; the 2-ways: the 4 selected pairs) it
prints the matched noise shapes (``dp.joint_noise_accounting``), the per-count variance each
gives against today's 2 sigma^2, the session's eps with the joint noise, and measured costs:

* two-noise (today): each server's discrete Gaussian draws (offline, ``dp.noise_pool``), the
  CS's P1 run, the KS's decryption and noise;
* joint: the KS's offline bits (draw + encryption: seconds and bytes, the KS-to-CS transfer),
  the CS's run of the joint circuit, the KS's decryption.

Timings alternate the variants within each repeat; only ratios within one run count (the
machine is shared). Run: nice -n 10 .venv/bin/python bench/bench_joint_noise.py
[--repeats 2] [--lookup]
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from concrete import fhe  # noqa: E402

from crypto.aggregation import (compile_aggregation, decode_release, publish_counts,  # noqa: E402
                                release_offset)
from crypto.joint_noise import (compile_joint_release, draw_bits,  # noqa: E402
                                encrypt_key_server_bits, joint_offset, signed_weights)
from dp.binomial_accounting import session_epsilon_of  # noqa: E402
from dp.discrete_gaussian import discrete_gaussian_vector  # noqa: E402
from dp.joint_noise_accounting import (cheapest_uniforms, orders_for,  # noqa: E402
                                       release_marginals, smallest_coins)
from params.schema import Schema  # noqa: E402
from params.selection_plan import max_rows_with_room  # noqa: E402
from params.session_plan import SessionPlan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 4
# Encrypted bits held per circuit call: concrete expands compressed inputs at run time
# (~11 KB per ciphertext at k = 20), so a call over cells x K bits is capped near 0.4 GB.
BITS_PER_CALL = 32_768
# The conditioning tail of a uniforms release, per count: a record's 16 counts add 1.6e-11
# to delta (0.0002% of the demo's 1e-5).
TAIL = 1e-12


def demo_plan() -> SessionPlan:
    """The default demo's plan, sized as ``feddpsyn.demo.run_demo`` sizes it."""
    schema = Schema.load(ROOT / "params" / "schemas" / "fed_heart_disease.schema.json")
    rows, eps, delta = 740, 1.0, 1e-5
    max_rows = int(rows * 1.1) + 10
    draft = SessionPlan.build(schema, None, eps, delta, None, "default", max_rows,
                              selection="em", rounds=4)
    max_rows = max(max_rows, max_rows_with_room(
        rows, [m.size for m in draft.layout.one_way],
        *draft.release("one_way").row_bound_noise(),
        draft.selection.row_bound_delta(delta, eps)))
    return SessionPlan.build(schema, None, eps, delta, None, "default", max_rows,
                             selection="em", rounds=4)


def keyed(circuit):
    client = fhe.Client(circuit.client.specs)
    client.keys.generate(secret_seed=secrets.randbits(128),
                         encryption_seed=secrets.randbits(128))
    return client


def masked_inputs(client, cells: int, k: int, position_count: int):
    """Random masked vectors encrypted by the KS (the same for every variant's cost)."""
    masked = [np.array([secrets.randbelow(1 << k) for _ in range(cells)], dtype=np.int64)
              for _ in range(CLIENTS)]
    args = masked + [None] * position_count
    return client.encrypt(*args)[:CLIENTS], masked


class TwoNoise:
    """Today: P1 with the CS's Gaussian in the offset; the KS adds its own after decrypting."""

    name = "two-noise"

    def __init__(self, k: int, chunk: int, p_error: float, sigma2: Fraction):
        self.k, self.chunk, self.sigma2 = k, chunk, sigma2
        t = time.perf_counter()
        self.circuit = compile_aggregation(CLIENTS, chunk, k, p_error)
        self.client = keyed(self.circuit)
        self.setup = time.perf_counter() - t

    def measure(self) -> dict[str, float]:
        cells, k = self.chunk, self.k
        t = time.perf_counter()
        cs_noise = discrete_gaussian_vector(self.sigma2, cells)
        ks_noise = discrete_gaussian_vector(self.sigma2, cells)
        draws = time.perf_counter() - t
        enc, _ = masked_inputs(self.client, cells, k, 2)
        select = np.ones(cells, dtype=np.int64)
        mask_sum = np.zeros(cells, dtype=np.int64)
        t = time.perf_counter()
        offset = release_offset(mask_sum, cs_noise, select, k)
        out = self.circuit.server.run(*enc, select, offset,
                                      evaluation_keys=self.client.evaluation_keys)
        online = time.perf_counter() - t
        t = time.perf_counter()
        publish_counts(np.asarray(self.client.decrypt(out)), ks_noise, k)
        decrypt = time.perf_counter() - t
        return {"offline_s": draws / cells, "offline_bytes": 0.0,
                "cs_online_s": online / cells, "ks_decrypt_s": decrypt / cells}


class Joint:
    """One joint noise of ``shape``: the KS's bits encrypted offline, the CS's circuit."""

    def __init__(self, k: int, p_error: float, shape):
        self.k, self.shape = k, shape
        self.chunk = max(1, min(256, BITS_PER_CALL // shape.ciphertexts))
        self.name = f"joint {shape.kind}"
        t = time.perf_counter()
        self.circuit = compile_joint_release(CLIENTS, self.chunk, k, shape, p_error)
        self.client = keyed(self.circuit)
        self.setup = time.perf_counter() - t

    def measure(self) -> dict[str, float]:
        cells, k, shape = self.chunk, self.k, self.shape
        t = time.perf_counter()
        ks_bits = draw_bits(cells, shape)
        coins = encrypt_key_server_bits(self.client, CLIENTS, ks_bits)
        blob = coins.serialize()
        offline = time.perf_counter() - t
        enc, _ = masked_inputs(self.client, cells, k, 4)
        select = np.ones(cells, dtype=np.int64)
        mask_sum = np.zeros(cells, dtype=np.int64)
        t = time.perf_counter()
        cs_bits = draw_bits(cells, shape)
        coins_in = fhe.Value.deserialize(blob)
        out = self.circuit.server.run(*enc, coins_in, signed_weights(shape, cs_bits, select),
                                      select, joint_offset(shape, mask_sum, cs_bits, select, k),
                                      evaluation_keys=self.client.evaluation_keys)
        online = time.perf_counter() - t
        t = time.perf_counter()
        decode_release(np.asarray(self.client.decrypt(out)), k)
        decrypt = time.perf_counter() - t
        return {"offline_s": offline / cells, "offline_bytes": len(blob) / cells,
                "cs_online_s": online / cells, "ks_decrypt_s": decrypt / cells}


def lookup_variant(bits: int = 4, uniforms: int = 8, cells: int = 2) -> None:
    """The additive form u = (a + b) mod 2^w: one lookup per uniform. Alone (its own small
    partition); inside the k = 20 release circuit its compile passed 20 GB (stopped), so it is
    measured here alone, for its per-uniform cost."""
    def noise(a, b):
        return np.sum((a + b) % (1 << bits), axis=1)

    compiler = fhe.Compiler(noise, {"a": "encrypted", "b": "clear"})
    zero = np.zeros((cells, uniforms), dtype=np.int64)
    top = zero + (1 << bits) - 1
    t = time.perf_counter()
    circuit = compiler.compile([(zero, zero), (top, top), (top, zero), (zero, top)],
                               fhe.Configuration(compress_input_ciphertexts=True,
                                                 compress_evaluation_keys=True,
                                                 show_progress=False, p_error=2.0 ** -40,
                                                 global_p_error=None))
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    circuit.keygen()
    keygen_s = time.perf_counter() - t
    a = np.array([[secrets.randbelow(1 << bits) for _ in range(uniforms)] for _ in range(cells)])
    b = np.array([[secrets.randbelow(1 << bits) for _ in range(uniforms)] for _ in range(cells)])
    enc = circuit.encrypt(a, None)[0]
    t = time.perf_counter()
    out = circuit.run(enc, b)
    run_s = time.perf_counter() - t
    exact = np.array_equal(circuit.decrypt(out), ((a + b) % (1 << bits)).sum(axis=1))
    print(f"\nlookup variant (a + b) mod 2^{bits}, {uniforms} uniforms x {cells} cells, alone: "
          f"compile {compile_s:.1f} s, keygen {keygen_s:.1f} s, evaluation keys "
          f"{len(circuit.keys.evaluation.serialize()) / 1e6:.0f} MB, "
          f"{circuit.statistics['programmable_bootstrap_count']} lookups, run "
          f"{run_s / (uniforms * cells):.3f} s per uniform, exact {exact}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lookup", action="store_true",
                        help="also time the (a + b) mod 2^w lookup form alone")
    args = parser.parse_args()
    plan = demo_plan()
    k, p_error = plan.parameters.count_bits, plan.parameters.p_error
    orders = orders_for(plan.rho_total, plan.delta_conversion)
    pair_cells = plan.pair_cells()
    two_way_cells = round(plan.selection.rounds * sum(pair_cells) / len(pair_cells))
    release_cells = {"one_way": sum(m.size for m in plan.layout.one_way),
                     "two_way": two_way_cells}
    print(f"Fed-Heart-Disease demo: eps {plan.epsilon}, delta {plan.delta}, rho "
          f"{float(plan.rho_total):.5f}, k = {k}, orders matched up to {max(orders):g}")

    shapes, parts_coins, parts_uniforms, rho_joint = {}, [], [], Fraction(0)
    for release in plan.releases:
        m = release_marginals(release.rho, release.sigma2)
        coins = smallest_coins(m, release.rho, orders)
        options = [coins]
        for slack in (Fraction(11, 10), Fraction(2)):
            try:
                shape = cheapest_uniforms(m, release.rho, orders, TAIL,
                                          coins.variance * slack)
            except ValueError:
                continue
            if shape not in options:
                options.append(shape)
        shapes[release.name] = options
        rho_joint += release.rho
        parts_coins.append((coins.pair(), m, 0.0))
        best = options[1] if len(options) > 1 and options[1].ciphertexts < coins.ciphertexts \
            else coins
        parts_uniforms.append((best.pair(), m, TAIL if best.kind == "uniforms" else 0.0))
        today = 2 * release.sigma2
        print(f"\n{release.name}: M = {m} marginals, rho {float(release.rho):.5f}, sigma2 "
              f"{float(release.sigma2):.1f}; per-count variance today 2 sigma2 = "
              f"{float(today):.1f}; {release_cells[release.name]} cells")
        for shape in options:
            print(f"  {shape.kind:8s} {shape.uniforms:5d} x {shape.bits:2d} bits = "
                  f"{shape.ciphertexts:5d} encrypted bits per count, variance "
                  f"{float(shape.variance):9.1f} (x{float(shape.variance / today):.3f} of "
                  f"today, x{float(shape.variance / release.sigma2):.3f} of sigma2), "
                  f"|Z| <= {shape.span // 2}")
    rho_other = plan.rho_total - rho_joint
    for label, parts in (("coins", parts_coins), ("cheapest", parts_uniforms)):
        eps = session_epsilon_of(parts, rho_other, plan.delta_conversion)
        print(f"session eps with joint {label} noise: {eps:.4f} (planned {plan.epsilon}, "
              f"delta {plan.delta_conversion:.3g} + the selection's reserved terms)")

    variants = {}
    for release in plan.releases:
        variants[release.name] = [TwoNoise(k, plan.parameters.chunk_cells, p_error,
                                           release.sigma2)]
        variants[release.name] += [Joint(k, p_error, s) for s in shapes[release.name]]
    results = {name: [dict() for _ in vs] for name, vs in variants.items()}
    for _ in range(args.repeats):  # alternate the variants within each repeat
        for name, vs in variants.items():
            for i, v in enumerate(vs):
                for key, value in v.measure().items():
                    results[name][i].setdefault(key, []).append(value)

    for name, vs in variants.items():
        base = {key: min(vals) for key, vals in results[name][0].items()}
        cells = release_cells[name]
        print(f"\n{name}: per released cell (min of {args.repeats}), and for its {cells} cells")
        print(f"  {'variant':24s} {'chunk':>5s} {'setup s':>8s} {'KS offline s':>12s} "
              f"{'KS->CS bytes':>12s} {'CS online s':>11s} {'KS decrypt s':>12s} "
              f"{'online x':>8s} {'release online s':>16s} {'release MB':>10s}")
        for i, v in enumerate(vs):
            best = {key: min(vals) for key, vals in results[name][i].items()}
            label = v.name if i == 0 else f"{v.name} {v.shape.uniforms}x{v.shape.bits}"
            chunk = v.chunk
            print(f"  {label:24s} {chunk:5d} {v.setup:8.2f} {best['offline_s']:12.2e} "
                  f"{best['offline_bytes']:12.0f} {best['cs_online_s']:11.2e} "
                  f"{best['ks_decrypt_s']:12.2e} "
                  f"{best['cs_online_s'] / base['cs_online_s']:8.1f} "
                  f"{best['cs_online_s'] * cells:16.2f} "
                  f"{best['offline_bytes'] * cells / 1e6:10.2f}")
    if args.lookup:
        lookup_variant()


if __name__ == "__main__":
    main()
