"""``distaim``: our three-server MPyC path (FLAIM's DistAIM), run as its own MPC program.

The servers' program -- ``distaim.oracle.MpcOracle`` inside ``synthesis.aim.aim``: secure L1
scores, the in-MPC exponential mechanism and Gaussian -- runs in a one-party in-process MPyC
runtime: the same code the three servers run, without the communication (which changes no
opened value), so a benchmark repeat costs seconds instead of minutes. The clients' shares
summed by the servers equal the sum of their count vectors, which is what the runtime holds.
``tests/distaim/test_distaim_loopback.py`` runs the same program over three processes.

Settings as in the DistAIM demo and FLAIM's experiments: all 2-way workload, T = 10 planned
rounds (FLAIM's fixed-T mode: no annealing), p = 1. Accounting as a session's: rho from
(eps, delta - delta / 1000) (``distaim.plan.session_rho``: the reserve covers the in-MPC
samplers), spent exactly by AIM's engine; the samplers' finite-precision deviation is extra
delta, (1 + e^eps) times their total variation bound as ``distaim.party`` reports it
(about 1e-12), in ``notes`` and checked against the reserve. Bytes per client: the seed-compressed
Shamir upload, two vectors of 12-byte field elements plus a 32-byte seed.
"""

from __future__ import annotations

import numpy as np

from feddpsyn.fedbench.methods.base import MethodResult
from feddpsyn.params.schema import Schema

ROUNDS = 10


def distaim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
            delta: float, seed: int) -> MethodResult:
    from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime
    from feddpsyn.distaim.oracle import MpcOracle
    from feddpsyn.distaim.plan import delta_reserve, session_rho
    from feddpsyn.distaim.protocol import Layout, client_vector
    from feddpsyn.synthesis.aim import aim

    sizes = tuple(schema.domain_sizes)
    d = len(sizes)
    workload = [(i, j) for i in range(d) for j in range(i + 1, d)]
    layout = Layout.for_workload(sizes, workload)
    clients = [client_vector(records[owner == c], layout) for c in np.unique(owner)]
    totals = np.sum(clients, axis=0).astype(object)
    rho = session_rho(epsilon, delta)
    rt = local_runtime()
    secint, em_secint = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    oracle = MpcOracle(rt, secint, em_secint, secint.array(secint.field.array(totals)), layout,
                       epsilon, rows_bound=1 << max(1, (2 * len(records)).bit_length()))
    run = aim(oracle, sizes, workload, rho, rounds=ROUNDS, max_rounds=ROUNDS,
              rng=np.random.default_rng(seed))
    synth = run.synthesize(len(records))
    upload = 2 * 12 * len(clients[0]) + 32
    # the selections' extra delta already carries (1 + e^eps); the measurements' TV gets it
    extra = run.delta_spent + oracle.measure_tv * oracle.tv_to_delta
    if extra > delta_reserve(delta):
        raise ArithmeticError("the samplers' extra delta exceeds the reserved delta / 1000")
    return MethodResult(synth, run.rho_spent, rho, bytes_per_client=float(upload),
                        notes={"extra_delta": float(extra), "rounds": ROUNDS})
