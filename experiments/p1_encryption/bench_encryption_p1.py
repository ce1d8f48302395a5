"""Benchmark: offline encryption per client and Primitive 1 on Adult (4 clients, all 1-way and
2-way marginals, 10 bins), against the same computation in plaintext in the same run.

Published anchor (FedDPSyn, Table 1): 19 hours of offline encryption per client and 290 s
for Primitive 1 on an RTX A6000. Our aim on 2 CPU cores: under 30 s and under 10 s.

Run: .venv/bin/python experiments/p1_encryption/bench_encryption_p1.py [--clients 4] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from concrete import fhe  # noqa: E402

from feddpsyn.crypto.aggregation import (  # noqa: E402
    aggregate_plaintext,
    chunk_ranges,
    compile_aggregation,
    decode_release,
    release_offset,
)
from feddpsyn.crypto.masking import expand_masks, mask_counts, new_seed  # noqa: E402
from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector  # noqa: E402
from feddpsyn.params.layout import MarginalLayout  # noqa: E402
from feddpsyn.params.parameter_sets import get_parameter_set  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get(
        "FEDDPSYN_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")))
    args = parser.parse_args()
    params = get_parameter_set("default")
    k, chunk = params.count_bits, params.chunk_cells
    schema = Schema.load(args.data / "adult" / "adult.schema.json")
    records = encode_csv(args.data / "adult" / "adult.csv", schema).records
    layout = MarginalLayout.build(schema.domain_sizes)
    rng = np.random.default_rng(0)
    owner = rng.integers(0, args.clients, len(records))
    counts = [layout.counts(records[owner == i]) for i in range(args.clients)]
    total = layout.total_cells
    ranges = chunk_ranges(total, chunk)
    print(f"Adult: {len(records)} rows, {args.clients} clients, {len(layout.marginals)} "
          f"marginals, {total} cells per client, {len(ranges)} chunks of {chunk}")

    t = time.perf_counter()
    circuit = compile_aggregation(args.clients, chunk, k, params.p_error)
    client = fhe.Client(circuit.client.specs)
    client.keys.generate(secret_seed=secrets.randbits(128), encryption_seed=secrets.randbits(128))
    setup = time.perf_counter() - t

    seeds = [new_seed() for _ in range(args.clients)]
    masks = [expand_masks(s, "bench", f"c{i}", total, k) for i, s in enumerate(seeds)]
    masked = [mask_counts(c, m, k) for c, m in zip(counts, masks)]

    def padded(vector, r):
        out = np.zeros(chunk, dtype=np.int64)
        out[:r.stop - r.start] = vector[r.start:r.stop]
        return out

    # Offline encryption of one client's masked vector (key server).
    t = time.perf_counter()
    encrypted = []
    for i in range(args.clients):
        per_client = []
        for r in ranges:
            a = [None] * (args.clients + 2)
            a[i] = padded(masked[i], r)
            per_client.append(client.encrypt(*a)[i].serialize())
        encrypted.append(per_client)
    encryption_total = time.perf_counter() - t
    encryption_per_client = encryption_total / args.clients
    bytes_per_value = len(encrypted[0][0]) / chunk
    # Plaintext baseline: the client-side masking of the same vector.
    t = time.perf_counter()
    for i in range(args.clients):
        mask_counts(counts[i], expand_masks(seeds[i], "bench", f"c{i}", total, k), k)
    masking_plain = (time.perf_counter() - t) / args.clients

    # Primitive 1 over every cell (compute server), noise drawn outside the timed region.
    sigma2 = Fraction(1000)
    noise = discrete_gaussian_vector(sigma2, len(ranges) * chunk)
    select = np.ones(chunk, dtype=np.int64)
    mask_sum = np.sum(masks, axis=0)
    keys = client.evaluation_keys
    t = time.perf_counter()
    outputs = []
    for r in ranges:
        offset = release_offset(padded(mask_sum, r), noise[r.index * chunk:(r.index + 1) * chunk],
                                select, k)
        values = [fhe.Value.deserialize(encrypted[i][r.index]) for i in range(args.clients)]
        outputs.append((circuit.server.run(*values, select, offset, evaluation_keys=keys),
                        offset))
    p1 = time.perf_counter() - t
    t = time.perf_counter()
    plain = [aggregate_plaintext([padded(m, r) for m in masked], select, off, k)
             for r, (_, off) in zip(ranges, outputs)]
    p1_plain = time.perf_counter() - t

    # Correctness: decrypt and compare with the plaintext computation.
    truth = np.sum(counts, axis=0)
    ok = True
    for r, (out, _), model in zip(ranges, outputs, plain):
        dec = client.decrypt(out)
        ok &= bool((dec == model).all())
        got = decode_release(dec, k)[: r.stop - r.start]
        ok &= bool((got == truth[r.start:r.stop] + noise[r.index * chunk:
                                                          r.index * chunk + r.stop - r.start]).all())
    out_bytes = len(outputs[0][0].serialize()) / chunk

    print(f"setup (compile + keygen): {setup:.2f} s")
    print(f"offline encryption per client: {encryption_per_client:.2f} s "
          f"({bytes_per_value:.1f} bytes/value); plaintext masking {masking_plain * 1e3:.1f} ms; "
          f"ratio {encryption_per_client / masking_plain:.0f}x")
    print(f"P1 over {total} cells x {args.clients} clients: {p1:.2f} s; plaintext "
          f"{p1_plain * 1e3:.1f} ms; ratio {p1 / p1_plain:.0f}x; output {out_bytes:.0f} bytes/value")
    print(f"vs FedDPSyn anchor: encryption {19 * 3600 / encryption_per_client:.0f}x faster than "
          f"19 h/client; P1 {290 / p1:.0f}x faster than 290 s (GPU)")
    print(f"decrypted == plaintext model and == counts + noise: {ok}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
