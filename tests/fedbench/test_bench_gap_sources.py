"""The gap-sources ladder is what it says: each cumulative rung changes exactly one more
factor, it ends at the curator's configuration, the c^(2/3) top-up spends exactly its
budget, and the exact Gaussian budget is exact and above the zCDP conversion's."""

import math
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.gap_sources.bench_gap_sources import (  # noqa: E402
    ALONE,
    CENTRAL,
    LADDER,
    SERVED,
    Draws,
    WhatIf,
    _joint,
    _waterfill,
    gaussian_pld_rho,
)
from feddpsyn.dp.gaussian_domination import gaussian_delta  # noqa: E402
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape  # noqa: E402
from feddpsyn.fedbench.methods.base import budget_rho  # noqa: E402


def test_each_rung_changes_one_more_factor_and_the_ladder_ends_at_the_curator():
    assert LADDER[0][1] == SERVED == WhatIf()
    assert LADDER[-1][1] == CENTRAL
    for (_, before), (name, after) in zip(LADDER, LADDER[1:], strict=False):
        moved = {k for k, v in asdict(after).items() if asdict(before)[k] != v}
        assert len(moved) == 1, name
        factor, value = name.lstrip("+").split("=")
        assert moved == {factor} and getattr(after, factor) == value


def test_each_alone_rung_changes_only_its_named_factors():
    for name, cfg in ALONE:
        named = dict(part.split("=") for part in name.split(","))
        assert cfg.changed() == named, name


def test_waterfill_tops_up_to_the_shares_and_spends_the_budget():
    weights, budget = [1.0, 2.0, 4.0], 7.0
    assert [round(x, 9) for x in _waterfill(weights, [0.0] * 3, budget)] == [1.0, 2.0, 4.0]
    # A first release that already gave the first marginal more than its share keeps it;
    # the others share what is left in proportion to their weights.
    final = _waterfill(weights, [3.0, 0.0, 0.0], budget - 3.0)
    assert math.isclose(final[0], 3.0)
    assert math.isclose(final[2] / final[1], 2.0, rel_tol=1e-9)
    assert math.isclose(sum(final) - 3.0, budget - 3.0, rel_tol=1e-9)


def test_the_exact_gaussian_budget_is_exact_and_above_the_zcdp_conversion():
    for eps in (0.3, 1.0, 4.0):
        rho = gaussian_pld_rho(eps, 1e-5)
        assert float(gaussian_delta(math.sqrt(2 * rho), eps)) <= 1e-5
        assert float(gaussian_delta(math.sqrt(2 * rho) * 1.001, eps)) > 1e-5
        assert rho > budget_rho(eps, 1e-5)


def test_a_two_width_shape_is_drawn_whole_and_centred():
    """The what-ifs draw a group's noise from its whole pmf, the wider uniforms included:
    within the span, mean 0 and the shape's variance (200,000 draws, 6 standard errors)."""
    import numpy as np

    shape = JointNoiseShape(4, 3, wider=2)
    noise, variance = _joint(shape, 200_000, Draws(5), "group")
    assert variance == float(shape.variance)
    assert np.abs(noise).max() <= shape.span // 2
    assert abs(noise.mean()) < 6 * math.sqrt(variance / len(noise))
    assert abs(noise.var() / variance - 1) < 6 * math.sqrt(2 / len(noise))
