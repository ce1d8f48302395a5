"""Each server's *view* of an encrypted selection round, enumerated exactly on tiny instances.

A privacy claim is about a view: everything a server sees plus everything it chose. For a
round of Primitive 3 (``crypto.tfhe_permute_and_flip``):

* the compute server's view is (its order tau, its trial bits R^CS, the chosen candidate);
* the key server's view is (its priorities pi_KS, its trial bits R^KS, the chosen candidate).

Ciphertexts are left out: under TFHE's semantic security they are simulatable without the
data (computational DP). Everything else is enumerated: every tau, every pi_KS, every value of
both servers' bits, through the circuit's exact integer model (``select_plaintext``, proven
bit-identical to the circuit in ``tests/crypto/test_selection.py``). On every pair of neighbouring
score vectors (each score moves by at most 1, InDif's sensitivity) the test asserts the
claimed per-round guarantee, (eps + 4 eta)-DP with delta = 0, as a bound on the log-ratio of
the two views' probabilities at every point, as OpenDP tests a sampler's privacy.

A circuit that let the compute server choose the order in clear and output the first
acceptance in that order would not be private: the same enumeration of that view finds
outcomes with probability 0 on one table and a positive probability on its neighbour
(unbounded loss), as :func:`test_view_of_a_known_order_is_not_private` shows, so these tests
catch that construction.

The round by candidate batches (``crypto.selection_batches``) is enumerated the
same way: it chooses what the one call chooses at every point, the padding's bits included
(:func:`test_batched_round_gives_each_server_the_one_calls_view`), so both views are the
one call's and every bound here covers it. Its extra intermediates are ciphertexts.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.crypto.selection_batches import BatchLayout, batched_select_plaintext
from feddpsyn.crypto.tfhe_permute_and_flip import (
    SelectionShape,
    select_plaintext,
    step_eta,
    thresholds,
)

# 3 candidates, 2-digit scores, 2 bits of A, 1 + 2 random bits per candidate: every value of
# both servers' bits (2^9 each) and every order and priority permutation (3! each).
SHAPE = SelectionShape(candidates=3, score_bits=2, drop_bits=0, nb=2, kappa_prime=(1, 2))
EPS = Fraction(1)
BITS = SHAPE.random_bits * SHAPE.candidates
PERMUTATIONS = list(itertools.permutations(range(SHAPE.candidates)))


def _digits(scores) -> np.ndarray:
    return np.array([[(s >> j) & 1 for j in range(SHAPE.score_bits)] for s in scores])


def _bits(word: int) -> np.ndarray:
    return np.array([(word >> i) & 1 for i in range(BITS)]).reshape(SHAPE.candidates, -1)


ZERO = np.zeros((SHAPE.candidates, SHAPE.random_bits), dtype=np.int64)
R_VALUES = [_bits(w) for w in range(2 ** BITS)]


# The batched form (``crypto.selection_batches``): two batches of two positions,
# the fourth position padding (inactive, priority 0, trial bits drawn like the others').
LAYOUT = BatchLayout(candidates=SHAPE.candidates, size=2)
PADDING = LAYOUT.positions - SHAPE.candidates


def choice_table(scores, active, priorities, layout: BatchLayout | None = None) -> np.ndarray:
    """table[tau, R, pi] = the candidate chosen when the compute server's order is tau, the
    joint trial bits are R and the positions' priorities are pi (every value enumerated);
    with ``layout``, by the batched round, the padding's joint bits running through every
    value as R does."""
    c = thresholds(SHAPE, EPS)
    table = np.zeros((len(PERMUTATIONS), len(R_VALUES), len(priorities)), dtype=np.int64)
    for t, order in enumerate(PERMUTATIONS):
        order = list(order)
        digits = _digits([scores[i] for i in order])
        act = np.array([active[i] for i in order])
        for r, joint in enumerate(R_VALUES):
            for p, priority in enumerate(priorities):
                # R^KS = joint, R^CS = 0: the model XORs the two; the views below enumerate
                # every split of the same joint bits.
                if layout is None:
                    one_hot = select_plaintext(digits, act, joint, ZERO, SHAPE, c,
                                               list(priority))
                else:
                    padding = _bits(r * 7 + p)[:PADDING]  # every padding value occurs
                    one_hot = batched_select_plaintext(
                        np.concatenate([digits, digits[:PADDING]]),
                        np.concatenate([act, np.zeros(PADDING, dtype=np.int64)]),
                        np.concatenate([joint, padding]), np.zeros_like(
                            np.concatenate([joint, padding])), SHAPE, c,
                        list(priority) + [0] * PADDING, layout).outputs
                table[t, r, p] = order[int(np.argmax(one_hot))]
    return table


def compute_server_view(table: np.ndarray) -> np.ndarray:
    """counts[tau, R^CS, candidate] over every R^KS and every priority permutation: the
    probability of each view point times (S!)^2 4^BITS."""
    words = np.arange(2 ** BITS)
    counts = np.zeros((table.shape[0], 2 ** BITS, SHAPE.candidates), dtype=np.int64)
    for t in range(table.shape[0]):
        for r_cs in range(2 ** BITS):
            chosen = table[t][words ^ r_cs]  # joint R = R^KS xor R^CS over every R^KS
            counts[t, r_cs] = np.bincount(chosen.ravel(), minlength=SHAPE.candidates)
    return counts


def key_server_view(table: np.ndarray) -> np.ndarray:
    """counts[pi_KS, R^KS, candidate] over every order tau and every R^CS."""
    words = np.arange(2 ** BITS)
    counts = np.zeros((table.shape[2], 2 ** BITS, SHAPE.candidates), dtype=np.int64)
    for p in range(table.shape[2]):
        for r_ks in range(2 ** BITS):
            chosen = table[:, words ^ r_ks, p]
            counts[p, r_ks] = np.bincount(chosen.ravel(), minlength=SHAPE.candidates)
    return counts


def worst_log_ratio(a: np.ndarray, b: np.ndarray) -> float:
    """max over view points of |ln P_a - ln P_b| (both counts over the same total);
    infinite where one is 0 and the other not."""
    if ((a == 0) != (b == 0)).any():
        return math.inf
    both = a > 0
    return float(np.abs(np.log(a[both]) - np.log(b[both])).max())


def neighbours(grid):
    for x in grid:
        for y in grid:
            if x < y and max(abs(i - j) for i, j in zip(x, y)) <= 1:
                yield x, y


CLAIM = float(EPS) + 4 * step_eta(SHAPE, EPS)  # per round, delta = 0
GRID = list(itertools.product(range(2 ** SHAPE.score_bits - 1), repeat=SHAPE.candidates))


@pytest.fixture(scope="module")
def hidden_order_tables():
    return {scores: choice_table(scores, (1, 1, 1), PERMUTATIONS) for scores in GRID}


@pytest.fixture(scope="module")
def hidden_order_views(hidden_order_tables):
    return {scores: (compute_server_view(table), key_server_view(table))
            for scores, table in hidden_order_tables.items()}


def test_compute_server_view_is_private_with_the_hidden_order(hidden_order_views):
    worst = max(worst_log_ratio(hidden_order_views[x][0], hidden_order_views[y][0])
                for x, y in neighbours(GRID))
    assert worst <= CLAIM + 1e-12


def test_key_server_view_is_private_with_the_hidden_order(hidden_order_views):
    worst = max(worst_log_ratio(hidden_order_views[x][1], hidden_order_views[y][1])
                for x, y in neighbours(GRID))
    assert worst <= CLAIM + 1e-12


def test_each_view_is_its_own_randomness_and_a_permute_and_flip_sample(hidden_order_views):
    """Given a server's own randomness, the chosen candidate has the same distribution
    whatever that randomness is: the view is (independent bits, the mechanism's output)."""
    for cs_view, ks_view in hidden_order_views.values():
        for counts in (cs_view, ks_view):
            flat = counts.reshape(-1, SHAPE.candidates)
            assert (flat == flat[0]).all()


def test_batched_round_gives_each_server_the_one_calls_view(hidden_order_tables):
    """By candidate batches (the padding's bits running through every value), the round
    chooses at every point of the enumeration the candidate the one call chooses: each
    server's view (its order or priorities, its bits, the padding's included, and the
    choice) is a function of the same table, times bits of the padding that the choice
    does not depend on, so it is the one call's view and the bounds above hold for it.
    Scores (2, 1, 1): ties, split across batches in some orders (one table, a few seconds;
    inactive candidates: ``tests/crypto/test_selection_batches.py`` compares the two models)."""
    scores = (2, 1, 1)
    assert (choice_table(scores, (1, 1, 1), PERMUTATIONS, LAYOUT)
            == hidden_order_tables[scores]).all()


def test_views_with_a_chosen_candidate_masked_are_private():
    """A later round: one candidate already chosen (inactive) is never chosen again, and the
    views over the two remaining candidates keep the claim."""
    grid = list(itertools.product(range(3), repeat=2))
    views = {}
    for x in grid:
        table = choice_table((x[0], 3, x[1]), (1, 0, 1), PERMUTATIONS)
        assert not (table == 1).any()
        views[x] = (compute_server_view(table), key_server_view(table))
    for x, y in neighbours(grid):
        assert worst_log_ratio(views[x][0], views[y][0]) <= CLAIM + 1e-12
        assert worst_log_ratio(views[x][1], views[y][1]) <= CLAIM + 1e-12


def test_view_of_a_known_order_is_not_private():
    """The defect this construction fixes: with the priorities fixed to the positions (the
    first acceptance in the compute server's clear order), the compute server's view has
    outcomes of probability 0 on one table and not on its neighbour, whatever eps is
    claimed: scores (2, 1, 0) vs (1, 2, 0), order (0, 1, 2): the first table always outputs
    candidate 0, the second outputs candidate 1 when candidate 0 rejects."""
    identity = [tuple(range(SHAPE.candidates))]
    first = compute_server_view(choice_table((2, 1, 0), (1, 1, 1), identity))
    second = compute_server_view(choice_table((1, 2, 0), (1, 1, 1), identity))
    assert worst_log_ratio(first, second) == math.inf
    order = PERMUTATIONS.index((0, 1, 2))
    assert first[order, :, 1].sum() == 0 and second[order, :, 1].sum() > 0
    # The key server's output alone (averaged over orders) was always fine: the defect is
    # visible only in the view.
    out_first, out_second = first.sum(axis=(0, 1)), second.sum(axis=(0, 1))
    assert worst_log_ratio(out_first, out_second) <= CLAIM + 1e-12
