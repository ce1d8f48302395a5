"""Machine-learning efficacy: train on the synthetic table, test on a real held-out split.

Features are the one-hot encoding of every attribute but the target (binned records, the
same public encoding for both tables). Two model families, as the benchmark asks: gradient-
boosted trees (``HistGradientBoostingClassifier``/``Regressor``) and a linear model
(``LogisticRegression``/``Ridge``). Classification reports F1 (binary: of the positive class,
the last category; multi-class: macro), regression RMSE in bin units. Models are seeded.
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import f1_score, mean_squared_error

from feddpsyn.fedbench.partitions import one_hot

__all__ = ["ml_efficacy"]


def _features(records: np.ndarray, domain_sizes: tuple[int, ...], target: int) -> np.ndarray:
    keep = [j for j in range(len(domain_sizes)) if j != target]
    return one_hot(records[:, keep], tuple(domain_sizes[j] for j in keep))


def ml_efficacy(synthetic: np.ndarray, real_test: np.ndarray, domain_sizes: tuple[int, ...],
                target: int, task: str = "classification", seed: int = 0) -> dict[str, float]:
    """Scores per model family: {"gbt": ..., "linear": ...} (F1, or RMSE for regression)."""
    x_train = _features(synthetic, domain_sizes, target)
    y_train = synthetic[:, target]
    x_test = _features(real_test, domain_sizes, target)
    y_test = real_test[:, target]
    scores = {}
    if task == "classification":
        binary = domain_sizes[target] == 2
        models = {"gbt": HistGradientBoostingClassifier(random_state=seed, max_iter=100),
                  "linear": LogisticRegression(max_iter=500)}
        for name, model in models.items():
            if len(np.unique(y_train)) < 2:  # a degenerate synthetic table predicts a constant
                predicted = np.full(len(y_test), y_train[0] if len(y_train) else 0)
            else:
                predicted = model.fit(x_train, y_train).predict(x_test)
            scores[name] = float(f1_score(y_test, predicted, pos_label=domain_sizes[target] - 1,
                                          average="binary" if binary else "macro",
                                          zero_division=0))
    elif task == "regression":
        models = {"gbt": HistGradientBoostingRegressor(random_state=seed, max_iter=100),
                  "linear": Ridge()}
        for name, model in models.items():
            predicted = model.fit(x_train, y_train).predict(x_test)
            scores[name] = float(np.sqrt(mean_squared_error(y_test, predicted)))
    else:
        raise ValueError(f"unknown task {task!r} (classification or regression)")
    return scores
