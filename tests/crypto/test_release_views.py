"""Each server's view of one released count, enumerated exactly (small k, truncated only
where the discrete Gaussian's mass is below 1e-300).

* The compute server knows its own noise z_CS and sees the published value, so its view of a
  count c is (z_CS, publish(c + z_CS mod 2^k, z_KS)).
* The key server knows z_KS and decrypts (c + z_CS) mod 2^k, so its view is that residue.

Each must be rho-zCDP with rho = 1 / (2 sigma2) per unit of sensitivity: the Renyi divergence
of order alpha between neighbouring counts (c, c + 1) is at most alpha rho. Centring the
residue before adding z_KS would break the compute server's view near the wrap-around:
:func:`test_centring_before_the_noise_breaks_the_compute_servers_view` shows why.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from feddpsyn.crypto.aggregation import decode_release, publish_counts

K = 5
SIGMA2 = 4.0
RHO = 1 / (2 * SIGMA2)
SUPPORT = np.arange(-80, 81)  # +-40 sigma: the mass beyond is below 1e-300
WEIGHTS = np.exp(-SUPPORT.astype(float) ** 2 / (2 * SIGMA2))
PMF = WEIGHTS / WEIGHTS.sum()
ORDERS = (1.5, 2.0, 4.0, 8.0)


def distribution(values: np.ndarray) -> dict[int, float]:
    out: dict[int, float] = {}
    for v, p in zip(values.tolist(), PMF):
        out[v] = out.get(v, 0.0) + p
    return out


def renyi(p: dict[int, float], q: dict[int, float], alpha: float) -> float:
    if set(p) - set(q):
        return math.inf
    return math.log(sum(p[v] ** alpha * q[v] ** (1 - alpha) for v in p)) / (alpha - 1)


def compute_server_view(count: int, z_cs: int) -> dict[int, float]:
    residue = np.full(len(SUPPORT), (count + z_cs) % (1 << K))
    return distribution(publish_counts(residue, SUPPORT, K))


def key_server_view(count: int) -> dict[int, float]:
    return distribution((count + SUPPORT) % (1 << K))


@pytest.mark.parametrize("count", [0, 3, 14, 15, 16, 30])
def test_compute_server_view_of_a_release_is_zcdp_at_every_own_noise(count):
    for z_cs in range(-20, 21):  # its own noise, including draws that wrap around 2^(k-1)
        p, q = compute_server_view(count, z_cs), compute_server_view(count + 1, z_cs)
        for alpha in ORDERS:
            assert renyi(p, q, alpha) <= alpha * RHO + 1e-9
            assert renyi(q, p, alpha) <= alpha * RHO + 1e-9


@pytest.mark.parametrize("count", [0, 15, 31])
def test_key_server_view_of_a_release_is_zcdp(count):
    p, q = key_server_view(count), key_server_view(count + 1)
    for alpha in ORDERS:
        assert renyi(p, q, alpha) <= alpha * RHO + 1e-9


def test_centring_before_the_noise_breaks_the_compute_servers_view():
    """centre(c + z_CS) + z_KS: at c + z_CS = 2^(k-1) - 1 one more record moves the centred
    value from 15 to -16, a shift of 31 that z_KS (sigma 2) cannot hide."""
    def old_view(count: int, z_cs: int) -> dict[int, float]:
        centred = int(decode_release(np.array([count + z_cs]), K)[0])
        return distribution(centred + SUPPORT)

    p, q = old_view(10, 5), old_view(11, 5)
    assert renyi(p, q, 2.0) > 100 * 2.0 * RHO
