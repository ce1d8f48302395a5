"""Primitive 3: the encrypted permute-and-flip, against its exact integer model and its exact
output distribution, and the privacy claim (eps + 4 eta) checked on neighbouring scores."""

import itertools
import math
import random
import secrets
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.crypto.selection_cost import pbs_estimate
from feddpsyn.crypto.selection_randomness import random_priorities, random_share
from feddpsyn.crypto.tfhe_permute_and_flip import (
    SelectionShape,
    acceptance_weights,
    choose_shape,
    clear_arguments,
    compile_selection,
    plan_step,
    select_plaintext,
    step_eta,
    threshold_bits,
    thresholds,
)
from feddpsyn.dp.permute_and_flip import pf_probabilities_exact

# 10 selections a call, one call per test (the circuit's cost grows with the batch): every
# draw is checked against the integer model bit for bit, and the first test's 10 draws
# against the model's exact distribution by an exact multinomial test (no large-sample
# approximation at these counts).
BATCH = 10
SHAPE = SelectionShape(candidates=3, score_bits=4, drop_bits=0, nb=2, kappa_prime=(3, 4),
                       batch=BATCH)
EPS = Fraction(1)


def digits_of(scores, width):
    return np.array([[(s >> j) & 1 for j in range(width)] for s in scores], dtype=np.int64)


def model_probabilities(scores, shape, eps):
    """Exact output distribution of the model: PF with the fixed-point acceptance weights."""
    weights = acceptance_weights(shape, thresholds(shape, eps))
    best = max(scores)
    return pf_probabilities_exact([weights[min(best - s, 2 ** shape.nb - 1)] for s in scores])


@pytest.fixture(scope="module")
def circuit():
    c = compile_selection(SHAPE, thresholds(SHAPE, EPS), 2.0 ** -40)
    c.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return c


def run_circuit(circuit, digits, active, r_ks, r_cs, priority):
    args = clear_arguments(digits, active, r_ks, r_cs, priority)
    outputs = circuit.decrypt(*circuit.run(*circuit.encrypt(*args)))
    return np.array([np.asarray(o).ravel() for o in outputs]).T  # (batch, S)


def multinomial_pvalue(observed: list[int], probabilities: list[float]) -> float:
    """The exact multinomial test: the probability, under ``probabilities``, of every outcome
    of ``sum(observed)`` draws at most as likely as the one observed (a tiny tolerance for
    ties in floating point). Enumerates the outcomes: for 3 categories and 10 draws, 66."""
    n, k = sum(observed), len(observed)

    def pmf(counts) -> float:
        out = math.factorial(n)
        for c in counts:
            out //= math.factorial(c)
        return out * math.prod(p ** c for p, c in zip(probabilities, counts))

    seen = pmf(observed)
    total = 0.0
    for split in itertools.combinations(range(n + k - 1), k - 1):  # stars and bars
        bounds = (-1, *split, n + k - 1)
        counts = [bounds[i + 1] - bounds[i] - 1 for i in range(k)]
        if (p := pmf(counts)) <= seen * (1 + 1e-9):
            total += p
    return total


def test_multinomial_pvalue_is_exact_on_a_small_case():
    # Two fair categories, 4 draws: (0, 4) and (4, 0) have 1/16 each; (1, 3) and (3, 1) 4/16.
    assert multinomial_pvalue([0, 4], [0.5, 0.5]) == pytest.approx(2 / 16)
    assert multinomial_pvalue([1, 3], [0.5, 0.5]) == pytest.approx(10 / 16)
    assert multinomial_pvalue([2, 2], [0.5, 0.5]) == pytest.approx(1.0)


def test_circuit_is_bit_identical_to_the_model_and_samples_the_fixed_point_pf(circuit):
    """Fixed scores fed in a fresh random order with fresh joint randomness per selection (as
    the compute server does): every decrypted one-hot equals the integer model's, and the
    frequencies of the chosen candidates match PF with the fixed-point weights (exact
    multinomial test; the model's own frequencies over 20,000 draws are
    test_model_frequencies_match_the_exact_distribution's)."""
    scores = [5, 3, 4]
    c = thresholds(SHAPE, EPS)
    active = np.ones(3, dtype=np.int64)
    picks = np.zeros(3, dtype=np.int64)
    source = random.Random(7)
    orders = [source.sample(range(3), 3) for _ in range(BATCH)]
    digits = np.array([digits_of([scores[i] for i in order], SHAPE.score_bits)
                       for order in orders])
    r_ks, r_cs = (random_share(SHAPE, source.getrandbits),
                  random_share(SHAPE, source.getrandbits))
    priority = random_priorities(SHAPE, source.getrandbits)
    out = run_circuit(circuit, digits, active, r_ks, r_cs, priority)
    for b in range(BATCH):
        assert out[b].tolist() == select_plaintext(digits[b], active, r_ks[b], r_cs[b],
                                                   SHAPE, c, priority[b]).tolist()
        assert out[b].sum() == 1
        picks[orders[b][int(np.argmax(out[b]))]] += 1
    expected = [float(p) for p in model_probabilities(scores, SHAPE, EPS)]
    assert multinomial_pvalue(picks.tolist(), expected) > 1e-6


def test_inactive_candidates_are_never_chosen_and_random_scores_agree(circuit):
    rng = np.random.default_rng(3)
    c = thresholds(SHAPE, EPS)
    digits = rng.integers(0, 2, (BATCH, 3, SHAPE.score_bits))
    active = np.array([1, 0, 1])
    r_ks, r_cs, priority = random_share(SHAPE), random_share(SHAPE), random_priorities(SHAPE)
    out = run_circuit(circuit, digits, active, r_ks, r_cs, priority)
    assert out[:, 1].sum() == 0 and (out.sum(axis=1) == 1).all()
    for b in range(BATCH):
        assert out[b].tolist() == select_plaintext(digits[b], active, r_ks[b], r_cs[b], SHAPE,
                                                   c, priority[b]).tolist()


@pytest.mark.parametrize("scores, eps", [([9, 7, 8, 2], Fraction(1)),
                                         ([20, 20, 3], Fraction(1, 3)),
                                         ([0, 31, 30, 12, 29], Fraction(2))])
def test_model_frequencies_match_the_exact_distribution(scores, eps):
    """Many draws of the integer model (cheap) with the same randomness layout as the circuit."""
    shape = SelectionShape(candidates=len(scores), score_bits=5, drop_bits=0, nb=3,
                           kappa_prime=(5, 5, 6), batch=1)
    c = thresholds(shape, eps)
    digits = digits_of(scores, 5)
    active = np.ones(len(scores), dtype=np.int64)
    source = random.Random(len(scores))
    n = 20_000
    picks = np.zeros(len(scores))
    for _ in range(n):
        order = source.sample(range(len(scores)), len(scores))
        r_ks = random_share(shape, source.getrandbits)[0]
        r_cs = random_share(shape, source.getrandbits)[0]
        priority = random_priorities(shape, source.getrandbits)[0]
        out = select_plaintext(digits[order], active, r_ks, r_cs, shape, c, priority)
        picks[order[int(np.argmax(out))]] += 1
    expected = np.array([float(p) for p in model_probabilities(scores, shape, eps)]) * n
    assert stats.chisquare(picks, expected).pvalue > 1e-6


@pytest.mark.parametrize("eps", [Fraction(1, 2), Fraction(3, 2)])
def test_neighbouring_scores_stay_within_eps_plus_four_eta(eps):
    """The module's theorem, checked exactly: every score moves by at most 1 (InDif's
    sensitivity under add/remove); the log-ratio of output probabilities never exceeds
    eps + 4 eta, with eta this shape's exact worst-case weight deviation."""
    shape = SelectionShape(candidates=3, score_bits=4, drop_bits=0, nb=2, kappa_prime=(3, 3))
    bound = float(eps) + 4 * step_eta(shape, eps)
    worst = 0.0
    for scores in itertools.product(range(6), repeat=3):
        p = model_probabilities(list(scores), shape, eps)
        for moves in itertools.product((-1, 0, 1), repeat=3):
            moved = [s + m for s, m in zip(scores, moves)]
            if min(moved) < 0:
                continue
            q = model_probabilities(moved, shape, eps)
            worst = max(worst, max(abs(math.log(a / b)) for a, b in zip(p, q)))
    assert worst <= bound + 1e-12
    assert worst > float(eps) * 0.5  # the check is not vacuous


def test_thresholds_weights_and_guards():
    shape = SelectionShape(candidates=2, score_bits=4, drop_bits=0, nb=3, kappa_prime=(4, 4, 4))
    c = thresholds(shape, Fraction(1))
    assert c == [10, 6, 2]
    weights = acceptance_weights(shape, c)
    assert weights[0] == 1 and weights[5] == Fraction(10 * 2, 16 ** 2)
    assert threshold_bits(shape, c)[:4].tolist() == [1, 0, 0, 1]  # 9, least significant first
    with pytest.raises(ValueError, match="rounds weight bit"):
        thresholds(SelectionShape(candidates=2, score_bits=8, drop_bits=0, nb=8,
                                  kappa_prime=(2,) * 8), Fraction(1))
    with pytest.raises(ValueError):
        SelectionShape(candidates=1, score_bits=4, drop_bits=0, nb=1, kappa_prime=(3,))


def test_step_plan_fits_its_budget_and_charges_the_numerical_loss():
    rho = Fraction(83, 1_000_000)
    shape = choose_shape(105, 18, math.sqrt(2 * float(rho)))
    step = plan_step(rho, shape)
    assert step.rho <= rho
    assert step.epsilon_total >= step.epsilon + Fraction(4 * step.eta)
    assert 4 * step.eta <= 0.01 * float(step.epsilon)  # choose_shape's target
    assert float(step.rho) > 0.99 * float(rho)        # and the budget is not wasted
    assert pbs_estimate(shape) > 0


def test_bootstrap_count_bounds_the_compiled_count(circuit):
    """The structural count used before anything is compiled is what concrete compiles
    (per selection of the batch)."""
    compiled = circuit.statistics["programmable_bootstrap_count"]
    assert pbs_estimate(SHAPE) * BATCH >= compiled
    assert pbs_estimate(SHAPE) * BATCH <= compiled * 1.05


def test_priorities_are_uniform_permutations():
    source = random.Random(5)
    shape = SelectionShape(candidates=3, score_bits=2, drop_bits=0, nb=1, kappa_prime=(2,),
                           batch=6000)
    bits = random_priorities(shape, source.getrandbits)
    ranks = sum(bits[:, :, i] << i for i in range(shape.priority_bits))
    assert all(sorted(row) == [0, 1, 2] for row in ranks.tolist())
    counts = {}
    for row in ranks.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    assert len(counts) == 6
    assert stats.chisquare(list(counts.values())).pvalue > 1e-6
