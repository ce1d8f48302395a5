"""Exact 2-way Wasserstein: hand-computed transports and the product identity."""

import numpy as np
import pytest

from feddpsyn.fedbench.metrics import wasserstein_one_way
from feddpsyn.fedbench.wasserstein import wasserstein_pair, wasserstein_two_way


def _point(shape, *cells_and_mass):
    out = np.zeros(shape)
    for (i, j), mass in cells_and_mass:
        out[i, j] += mass
    return out


@pytest.mark.parametrize("ordered, p, q, expected", [
    # Two categorical attributes: opposite corners differ in both, 0/1 each.
    ((False, False), [((0, 0), 1.0)], [((1, 1), 1.0)], 2.0),
    # Ordered 3 bins (positions 0, 1/2, 1) x categorical: bin 0 -> bin 2 is 1.
    ((True, False), [((0, 0), 1.0)], [((2, 0), 1.0)], 1.0),
    # Half a step on the ordered attribute plus a category change.
    ((True, False), [((0, 0), 1.0)], [((1, 1), 1.0)], 1.5),
    # All mass must reach (1, 0): half moves 1/2, half moves 1/2 + 1.
    ((True, False), [((0, 0), 0.5), ((0, 1), 0.5)], [((1, 0), 1.0)], 1.0),
    # Two transports of cost 1 for each half: 1 in total.
    ((True, False), [((0, 0), 0.5), ((2, 1), 0.5)], [((2, 0), 0.5), ((0, 1), 0.5)], 1.0),
    # Ordered x ordered, 5 x 3 bins: (0, 0) -> (4, 2) is 1 + 1; half of it stays.
    ((True, True), [((0, 0), 1.0)], [((0, 0), 0.5), ((4, 2), 0.5)], 1.0),
])
def test_hand_computed_transports(ordered, p, q, expected):
    shape = (5, 3) if ordered == (True, True) else (3, 2) if ordered[0] else (2, 2)
    assert wasserstein_pair(_point(shape, *p), _point(shape, *q), ordered) == pytest.approx(
        expected, abs=1e-9)


def test_identical_tables_are_at_distance_zero():
    rng = np.random.default_rng(0)
    real = np.stack([rng.integers(0, 4, 300), rng.integers(0, 3, 300), rng.integers(0, 2, 300)],
                    axis=1)
    assert wasserstein_two_way(real, real[::-1], (4, 3, 2), (True, False, True)) == \
        pytest.approx(0.0, abs=1e-12)


def test_products_add_their_one_way_distances_and_joints_cost_at_least_that():
    # With the sum metric, W(P, Q) >= W(P_a, Q_a) + W(P_b, Q_b) for any joints (a coupling's
    # projections couple the marginals), with equality for product distributions.
    rng = np.random.default_rng(1)
    for ordered in [(True, True), (True, False), (False, False)]:
        pa, qa = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        pb, qb = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        w_a = _one_way(pa, qa, ordered[0])
        w_b = _one_way(pb, qb, ordered[1])
        assert wasserstein_pair(np.outer(pa, pb), np.outer(qa, qb), ordered) == pytest.approx(
            w_a + w_b, abs=1e-9)
        joint_p, joint_q = rng.dirichlet(np.ones(12)).reshape(4, 3), rng.dirichlet(
            np.ones(12)).reshape(4, 3)
        bound = (_one_way(joint_p.sum(1), joint_q.sum(1), ordered[0])
                 + _one_way(joint_p.sum(0), joint_q.sum(0), ordered[1]))
        assert wasserstein_pair(joint_p, joint_q, ordered) >= bound - 1e-9


def _one_way(p, q, ordered):
    """The 1-way metric of fedbench.metrics, on probability vectors (checked below)."""
    if ordered:
        return float(np.abs(np.cumsum(p - q))[:-1].sum() / (len(p) - 1))
    return float(0.5 * np.abs(p - q).sum())


def test_the_one_way_helper_agrees_with_the_metrics_module():
    rng = np.random.default_rng(2)
    real = rng.integers(0, 5, (400, 1))
    synth = rng.integers(0, 5, (300, 1))
    for ordered in (True, False):
        p = np.bincount(real[:, 0], minlength=5) / 400
        q = np.bincount(synth[:, 0], minlength=5) / 300
        assert _one_way(p, q, ordered) == pytest.approx(
            wasserstein_one_way(real, synth, (5,), (ordered,)), abs=1e-12)


def test_mean_over_all_pairs_and_a_chosen_subset():
    real = np.array([[0, 0, 0], [0, 0, 0]])
    synth = np.array([[1, 1, 0], [1, 1, 0]])
    sizes, ordered = (2, 2, 2), (False, False, True)
    # Pairs: (0,1) -> 2, (0,2) -> 1, (1,2) -> 1.
    assert wasserstein_two_way(real, synth, sizes, ordered) == pytest.approx(4 / 3)
    assert wasserstein_two_way(real, synth, sizes, ordered, pairs=[(0, 1)]) == pytest.approx(2)
