"""``central-aim``: AIM (McKenna, Mullins, Sheldon, Miklau 2022) on the union, by a trusted
curator, at its published settings but for the model-size cap.

``synthesis.aim`` with ``PlainOracle``: exact discrete Gaussian measurements, the exact
exponential mechanism (charged eps^2 / 8 as in AIM), Private-PGM's mirror descent (numpy,
``synthesis.mirror_descent``) for the model. Settings, against the reference implementation
(Private-PGM's ``mechanisms/aim.py``, commit 4d2b3c5):

* workload: every 2-way marginal, weight 1 (the reference's ``--degree 2``; every pair here
  has at most 100 cells, under its ``max_cells`` 10,000); the candidates are its downward
  closure with AIM's weights;
* plan: T = 16 d: sigma_0^2 = 16 d / (2 * 0.9 * rho), eps_0^2 = 8 * 0.1 * rho / (16 d), the
  1-ways measured first, annealing (sigma / 2, eps x 2 when the model's answer on the clique
  just measured moved by at most sqrt(2/pi) sigma n), the last round spends the remainder;
  the loop runs until the budget does, as the reference's (the engine's ``max_rounds`` = T
  never binds: the budget runs out before T rounds). This method used to cap the loop at 60
  rounds, where the 60th round spent what was left (19% of rho on wages at eps 4);
* budget: rho = ``budget_rho(eps, delta)``, the zCDP conversion AIM is published with
  (the reference's ``cdp_rho``). AIM's rounds are adaptive (how many, and each round's sigma
  and eps, depend on the data through annealing), so its accounting stays the zCDP filter;
  the engine's ledger ends at exactly rho;
* estimator: 100 warm-started accelerated mirror-descent steps a round (the engine's rule in
  AIM's mode, ``synthesis.aim``; the reference runs 1,000 plain steps), ``FINAL_ITERS`` =
  1,000 for the final fit (the reference's final fit: 1,000 steps);
* model size: ``MAX_MODEL_MB`` = 2 MB instead of the reference's 80 MB (the reference
  itself recommends 1 MB when time matters): the largest size measured to finish a run in a
  few minutes on the four small tables (next paragraph).

Why 80 MB is out of reach (profiled; timings are CPU seconds of one process on a shared
2-core machine). The estimator's cost per round grows with the junction tree's cells: every
step runs belief propagation over the tree and then sums each measurement's marginal out of
its clique's belief, one measurement at a time, with about 3.6 evaluations per accelerated
step (the extrapolated point and the backtracking trials). On wages (4,165 rows, eps 4,
4 MB cap, 60-round cap) a run took 229 s: 97% in the fits, of which belief propagation 45%
and the per-measurement sums 51%; the final fit (2,500 steps then, on the largest model)
took 170 s of it. On doctor_contacts (20,186 rows, 15 columns) at eps 1 with the 80 MB cap
the model grew from 0.7 MB at round 39 to 4.7 MB at round 44 and each round from 4 s to 25 s
(about 5 s per MB a round); that run was stopped at round 46 of about 75, its budget 45%
spent and its model still growing. At eps <= 1 the cap rarely binds on these tables (final
models with the 80 MB cap: mroz 0.003 MB, wages 0.005 MB, computers 0.12 MB; 3-9 s a run);
at eps 4 it does: doctor_contacts at 1 MB: 2-way L1 0.0229 in 94 s (64 rounds); at 2 MB:
0.0217 in 201 s (76 rounds); computers at 2 MB: 0.0332 in 43 s; wages at 80 MB: 0.0331 in
30 s (model 0.62 MB: the cap did not bind).

Against the reference implementation (run from the fetched repository with its own mbi 1.0.0
and jax 0.7.0; its record sampler rewritten with numpy groups because pandas 3 drops the
grouping columns in ``groupby.apply``, same "round" algorithm), whole table, eps 1,
delta 1e-5, 2-way L1 of the sampled records (``synthesis.evaluate.workload_error``):
mroz (753 rows): reference 0.554, 0.562, 0.502, 0.719 (four runs; 7-13 rounds; its model's
own 2-way L1 in the last run 0.709, so not the sampler), this method 0.409, 0.400, 0.426,
0.540, 0.546 (five runs; 8-15 rounds); the reference took 105-153 s a run, this method
2-4 s. The reference's loss weighs a measurement by 1 / sigma (``mbi`` 1.0.0,
``marginal_loss``: diff^2 / (2 stddev)) where Private-PGM's paper and this estimator use
1 / sigma^2.
"""

from __future__ import annotations

import itertools

import numpy as np

from feddpsyn.dp.discrete_gaussian import CSPRNG
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.params.schema import Schema
from feddpsyn.synthesis.aim import PlainOracle, aim
from feddpsyn.synthesis.pgm import DEFAULT_MAX_MODEL_MB

MAX_MODEL_MB = 2.0
FINAL_ITERS = 1000    # estimator steps after the last round (the reference's final fit)


def central_aim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                delta: float, seed: int, max_model_mb: float = MAX_MODEL_MB) -> MethodResult:
    del owner  # the union in the clear; private noise comes from the OS CSPRNG
    rho = budget_rho(epsilon, delta)
    sizes = schema.domain_sizes
    workload = list(itertools.combinations(range(len(sizes)), 2))
    rounds_planned = 16 * len(sizes)  # AIM's T: the budget runs out before it
    result = aim(PlainOracle(records, sizes, CSPRNG), sizes, workload, rho,
                 max_model_size_mb=max_model_mb, max_rounds=rounds_planned,
                 final_iters=FINAL_ITERS)
    # as many rows as the model's (noisy) total; record sampling is post-processing
    synth = result.model.sample(None, np.random.default_rng(seed))
    return MethodResult(synth, result.rho_spent, rho,
                        notes={"selected": result.selected,
                               "selected_pairs": result.selected,
                               "rounds": len(result.selected),
                               "max_model_mb": max_model_mb,
                               "annealed": sum(r.annealed for r in result.rounds)})


def central_aim_4mb(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                    delta: float, seed: int) -> MethodResult:
    """``central-aim-4mb``: central AIM with a 4 MB model, the size ``synthesis.pgm`` fits
    (``DEFAULT_MAX_MODEL_MB``): the like-for-like central baseline of the ``-pgm`` methods,
    whose estimate is a graphical model of that size. About twice the cost of ``central-aim``
    where the cap binds (module docstring)."""
    return central_aim(records, owner, schema, epsilon, delta, seed, DEFAULT_MAX_MODEL_MB)
