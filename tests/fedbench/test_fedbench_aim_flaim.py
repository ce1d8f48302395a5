"""central-aim, naive-flaim, augflaim-private on tiny data: in-domain records, exact budget."""

import random
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.dp.discrete_gaussian import ExactSampler
from feddpsyn.fedbench.methods import METHODS
from feddpsyn.fedbench.methods.flaim import flaim
from feddpsyn.params.schema import Schema

SCHEMA = Schema.from_dict({"columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 4},
    {"name": "c", "type": "categorical", "i2s": ["p", "q"]},
    {"name": "label", "type": "categorical", "i2s": ["no", "yes"]}]})


def tiny(n=900, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.7, a, rng.integers(0, 4, n))
    c = rng.integers(0, 2, n)
    label = np.where(rng.random(n) < 0.8, (a > 0).astype(int), c)
    records = np.stack([a, b, c, label], axis=1)
    owner = np.where(rng.random(n) < 0.5, label, rng.integers(0, 3, n))  # some skew
    return records, owner


@pytest.mark.parametrize("method", ["central-aim", "naive-flaim", "augflaim-private",
                                    "distaim"])
def test_method_spends_exactly_its_budget_and_stays_in_domain(method):
    records, owner = tiny()
    result = METHODS[method](records, owner, SCHEMA, 1.0, 1e-6, seed=0)
    assert result.rho_spent == result.rho_budget  # exact Fractions, no rounding
    synth = result.records
    assert synth.ndim == 2 and synth.shape[1] == 4 and len(synth) > 0
    assert (synth >= 0).all() and (synth < np.array(SCHEMA.domain_sizes)).all()
    if method != "central-aim":
        assert result.bytes_per_client > 0
    if method == "distaim":  # a session's budget: delta / 1000 reserved for the samplers
        from feddpsyn.distaim.plan import delta_reserve, session_rho
        assert result.rho_budget == session_rho(1.0, 1e-6)
        assert 0 < result.notes["extra_delta"] <= delta_reserve(1e-6)


@pytest.mark.parametrize("variant", ["naive", "private"])
def test_flaim_with_client_sampling_still_spends_exactly(variant):
    records, owner = tiny(seed=1)
    rho = Fraction(1, 20)
    out = flaim(records, owner, SCHEMA.domain_sizes, rho, variant, rounds=3,
                participation=0.5, seed=3, sampler=ExactSampler(random.Random(5).randrange))
    assert out.rho_spent == rho
    assert len(out.selected) == 3 and all(out.selected)
    if variant == "private":  # 1-ways leave the local choices
        assert all(len(c) == 2 for round_ in out.selected for c in round_)
