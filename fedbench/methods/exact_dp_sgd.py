"""Full-batch DP gradient descent for softmax regression with exact integer noise.

DPDSyn (Jia et al. 2026, Algorithm 1) trains its classifier with DP-SGD: clip each example's
gradient to C, add Gaussian noise to the sum, step. This module keeps that shape and makes
the privacy claim exact:

* Model: multinomial logistic regression on the one-hot encoding of the features plus a bias
  (a small model, as the benchmark needs seconds, not minutes).
* Every step uses the whole table (no subsampling), so the T steps compose exactly in zCDP:
  rho = T * M / (2 sigma2). We give up subsampling amplification, which would need an RDP
  accountant for the subsampled Gaussian that we could not make exact.
* Each example's gradient x_i (x) (p_i - y_i) is clipped to norm C, then *rounded* to the grid
  2^-s, and the integer vector's squared norm is checked in integer arithmetic against
  M = floor(C^2 4^s); an example that still exceeds it after a bounded number of shrinks
  contributes nothing. So one record moves the integer sum by a vector of squared norm <= M,
  exactly (this replaces the rounding slack C + sqrt(dim)/2 * 2^-s by a check).
* Noise: N_Z(0, sigma2) on every coordinate of the integer sum (``discrete_gaussian_vector``),
  sigma2 = T * M / (2 rho), so T steps cost exactly rho.
* The step divides by a noisy record count N^ that the caller releases (post-processing).

The gradient of a one-hot x is x (x) (p - y), so rounding each example's gradient is rounding
the class vector (p - y) once per example and every active coordinate gets the same integers.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.fedbench.partitions import one_hot

GRID_BITS = 10
MAX_SHRINKS = 32


def _features(records: np.ndarray, sizes: tuple[int, ...], target: int) -> np.ndarray:
    keep = [j for j in range(len(sizes)) if j != target]
    x = one_hot(records[:, keep], tuple(sizes[j] for j in keep))
    return np.hstack([x, np.ones((len(records), 1))])


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _rounded_class_vectors(residual: np.ndarray, active: int, bound: int,
                           clip2: float) -> np.ndarray:
    """Integer per-example class vectors u_i with active * ||u_i||^2 <= bound (checked)."""
    scale = 2.0 ** GRID_BITS
    norms2 = active * np.sum(residual ** 2, axis=1)
    shrink = np.minimum(1.0, np.sqrt(clip2 / np.maximum(norms2, 1e-300)))
    u = np.rint(residual * (shrink * scale)[:, None]).astype(np.int64)
    for _ in range(MAX_SHRINKS):
        over = active * np.sum(u * u, axis=1) > bound
        if not over.any():
            return u
        shrink[over] *= 1 - 2.0 ** -6
        u[over] = np.rint(residual[over] * (shrink[over] * scale)[:, None]).astype(np.int64)
    u[active * np.sum(u * u, axis=1) > bound] = 0  # fail closed: drop, never exceed the bound
    return u


def train_softmax_regression(records: np.ndarray, sizes: tuple[int, ...], target: int,
                             rho: Fraction, total: float, steps: int = 60,
                             learning_rate: float = 0.5, momentum: float = 0.8,
                             l2: float = 1e-3) -> tuple[np.ndarray, Fraction]:
    """Weights (features + bias) x classes, trained rho-zCDP; returns (weights, rho spent)."""
    x = _features(records, sizes, target)
    classes = sizes[target]
    y = np.eye(classes)[records[:, target]]
    active = len(sizes)  # one-hot features (d - 1 ones) plus the bias
    clip2 = float(active)  # C^2 = number of active coordinates: ||p - y|| clipped at 1
    bound = active * 4 ** GRID_BITS  # M = floor(C^2 4^s), an integer since C^2 is
    sigma2 = Fraction(steps * bound) / (2 * rho)
    weights = np.zeros((x.shape[1], classes))
    velocity = np.zeros_like(weights)
    n = max(total, 1.0)
    for _ in range(steps):
        u = _rounded_class_vectors(_softmax(x @ weights) - y, active, bound, clip2)
        summed = np.rint(x.T @ u).astype(np.int64)  # exact: integer sums far below 2^53
        noisy = summed + discrete_gaussian_vector(sigma2, summed.size).reshape(summed.shape)
        gradient = noisy / (2.0 ** GRID_BITS * n) + l2 * weights
        velocity = momentum * velocity - learning_rate * gradient
        weights = weights + velocity
    return weights, Fraction(steps * bound) / (2 * sigma2)


def predict(weights: np.ndarray, records: np.ndarray, sizes: tuple[int, ...],
            target: int) -> np.ndarray:
    return np.argmax(_features(records, sizes, target) @ weights, axis=1)
