"""Partitions of a table over K clients, as the federated-synthesis papers simulate them.

* ``uniform``: each record to a client uniformly at random (the FedDPSyn case study).
* ``dirichlet_label``: label skew (Li et al. 2022, used by FLAIM): for every class c, draw
  p_c ~ Dirichlet(beta * 1_K) and deal the class's records to clients in those proportions;
  smaller beta, stronger skew.
* ``feature_skew``: k-means (k = K, k-means++ start) on a public one-hot encoding of the
  binned records, each cluster one client: FLAIM's clustering split without UMAP (stronger
  skew than FLAIM's: 0.66 on FLAIM's Table 4 measure on Adult, against its 0.525).
* ``umap_clusters``: FLAIM's clustering split itself (its code: UMAP with 15 neighbours and
  min_dist 0.1 of the integer-coded records, then k-means with K clusters in the 2-D
  embedding); needs ``umap-learn`` (0.541 on the same measure on Adult).
* ``natural``: a column that names the owner (e.g. ``center`` in Fed-Heart-Disease).

Every function returns an int array ``owner`` (one client index per record), every client
non-empty, from a seeded ``numpy.random.Generator`` (simulation only: no privacy claim).

>>> owner = uniform(10, 3, np.random.default_rng(0))
>>> sorted(set(owner.tolist()))
[0, 1, 2]
"""

from __future__ import annotations

import numpy as np

__all__ = ["PartitionError", "uniform", "dirichlet_label", "feature_skew", "umap_clusters",
           "natural"]

_MAX_DRAWS = 200


class PartitionError(ValueError):
    """The requested partition cannot give every client at least one record."""


def _check(n: int, k: int) -> None:
    if k < 1:
        raise PartitionError("need at least one client")
    if n < k:
        raise PartitionError(f"{n} records cannot fill {k} clients")


def uniform(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random assignment, redrawn (bounded) until no client is empty."""
    _check(n, k)
    for _ in range(_MAX_DRAWS):
        owner = rng.integers(0, k, n)
        if len(np.unique(owner)) == k:
            return owner
    # Fall back to a random balanced deal (always non-empty when n >= k).
    return rng.permutation(np.arange(n) % k)


def dirichlet_label(labels: np.ndarray, k: int, beta: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Label-skew split: per class, proportions over clients ~ Dirichlet(beta)."""
    labels = np.asarray(labels)
    _check(len(labels), k)
    if beta <= 0:
        raise PartitionError("beta must be > 0")
    for _ in range(_MAX_DRAWS):
        owner = np.empty(len(labels), dtype=np.int64)
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(k, beta))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            for client, part in enumerate(np.split(idx, cuts)):
                owner[part] = client
        if len(np.unique(owner)) == k:
            return owner
    raise PartitionError(f"no Dirichlet({beta}) draw in {_MAX_DRAWS} left every one of {k} "
                         "clients non-empty; use fewer clients or a larger beta")


def one_hot(records: np.ndarray, domain_sizes: tuple[int, ...]) -> np.ndarray:
    """The public encoding used for clustering: one indicator per (column, bin)."""
    offsets = np.concatenate([[0], np.cumsum(domain_sizes)[:-1]])
    out = np.zeros((len(records), int(sum(domain_sizes))), dtype=np.float64)
    rows = np.arange(len(records))
    for j, off in enumerate(offsets):
        out[rows, off + records[:, j]] = 1.0
    return out


def feature_skew(records: np.ndarray, domain_sizes: tuple[int, ...], k: int,
                 rng: np.random.Generator, iterations: int = 50) -> np.ndarray:
    """k-means clusters of the one-hot records; empty clusters are re-seeded (bounded)."""
    _check(len(records), k)
    x = one_hot(np.asarray(records), domain_sizes)
    # k-means++ initialisation.
    centres = [x[rng.integers(len(x))]]
    d2 = ((x - centres[0]) ** 2).sum(1)  # squared distance to the nearest centre so far
    for _ in range(1, k):
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(x), 1 / len(x))
        centres.append(x[rng.choice(len(x), p=p)])
        d2 = np.minimum(d2, ((x - centres[-1]) ** 2).sum(1))
    centres = np.array(centres)
    owner = np.zeros(len(x), dtype=np.int64)
    for _ in range(iterations):
        distances = ((x ** 2).sum(1)[:, None] - 2 * x @ centres.T + (centres ** 2).sum(1)[None])
        new_owner = distances.argmin(1)
        for c in range(k):
            members = new_owner == c
            if members.any():
                centres[c] = x[members].mean(0)
            else:  # re-seed an empty cluster at the point farthest from its centre
                far = distances[np.arange(len(x)), new_owner].argmax()
                centres[c] = x[far]
                new_owner[far] = c
        if np.array_equal(new_owner, owner):
            break
        owner = new_owner
    if len(np.unique(owner)) != k:
        raise PartitionError("k-means left a client empty")
    return owner


def umap_clusters(records: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """FLAIM's clustering split: a 2-D UMAP embedding of the integer-coded records (15
    neighbours, min_dist 0.1, as FLAIM's ``HorizontalSharder``), k-means (k-means++, seeded)
    in the embedding, each cluster one client. Minutes on Adult: cache the result."""
    import umap
    from sklearn.cluster import KMeans

    _check(len(records), k)
    embedding = umap.UMAP(n_neighbors=15, min_dist=0.1, random_state=seed).fit_transform(
        np.asarray(records, dtype=np.float64))
    owner = KMeans(n_clusters=k, random_state=seed).fit_predict(embedding)
    if len(np.unique(owner)) != k:
        raise PartitionError("k-means left a client empty")
    return owner.astype(np.int64)


def natural(values: np.ndarray) -> np.ndarray:
    """One client per distinct value of an owner column, in sorted order of the values."""
    _, owner = np.unique(np.asarray(values), return_inverse=True)
    return owner.astype(np.int64)
