"""P2 -> chunk sums -> clear noise under encryption in one key set: every stage decrypts to its
plaintext model, noise of either sign and at the offset's edge included; out-of-range noise
fails closed; the offset's width and the tail accounting are what the docstring claims."""

import math
import secrets
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.crypto.indif import digits_of, indif_at_width, indif_exact, indif_offset
from feddpsyn.crypto.noisy_scores import (
    NoiseOutOfRange,
    NoisyScoreShape,
    compile_noisy_scores,
    decode_noisy_score,
    noise_offset_bits,
    noise_operand,
    noise_tail_delta,
    noise_tail_probability,
    noisy_score_plaintext,
)
from feddpsyn.crypto.private_selection import add_plaintext, indif_name

K, CELLS, N, B, W = 6, 6, 6, 4, 4
SHAPE = NoisyScoreShape(count_bits=K, chunk_sizes=(CELLS,), score_bits=N, noise_bits=B,
                        widths=(W,))


@pytest.fixture(scope="module")
def module():
    m = compile_noisy_scores(SHAPE, 2.0 ** -40)
    m.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return m


def digits(value: int, width: int = N) -> list[int]:
    return [(value >> j) & 1 for j in range(width)]


def test_indif_add_noise_compose_and_match_their_models(module):
    rng = np.random.default_rng(5)
    chunks, clear = [], []
    for _ in range(2):
        counts, expected = rng.integers(0, 6, CELLS), rng.integers(0, 6, CELLS)
        mask = rng.integers(0, 2 ** K, CELLS)
        indif = getattr(module, indif_name(CELLS))
        masked, _ = indif.encrypt(digits_of((counts + mask) % 2 ** K, K), None)
        out = indif.run(masked, digits_of(indif_offset(mask, expected, K), K))
        assert indif.decrypt(out).tolist() == digits(indif_exact(counts, expected))
        chunks.append(out)
        clear.append(indif_exact(counts, expected))
    pair = module.add.run(chunks[0], chunks[1])
    assert module.add.decrypt(pair).tolist() == add_plaintext(digits(clear[0]),
                                                              digits(clear[1]))
    score = (clear[0] + clear[1]) % 2 ** N
    # Both signs, zero, and both edges of the offset's range.
    for z in (0, 3, -5, 2 ** B - 1, -(2 ** B - 1)):
        noisy = module.noise.run(pair, noise_operand(z, SHAPE))
        got = module.noise.decrypt(noisy).tolist()
        assert got == noisy_score_plaintext(score, z, SHAPE)
        assert decode_noisy_score(got, SHAPE) == score + z
    # A score at the top of its width with the largest noise: the widest sum, no wrap.
    top, _ = module.noise.encrypt(np.ones(N, dtype=np.int64), None)
    got = module.noise.decrypt(module.noise.run(top, noise_operand(2 ** B - 1, SHAPE)))
    assert decode_noisy_score(got.tolist(), SHAPE) == 2 ** N - 1 + 2 ** B - 1


def test_a_narrow_chunk_is_the_circular_distance_and_adds_to_a_full_one(module):
    """``indif_<s>_w<w>`` on M mod 2^w: |d| where |d| <= 2^(w-1) (both edges included), the
    distance to the nearest multiple of 2^w where the bound failed (a wrapped cell: lower,
    never higher, so the score's sensitivity stays 1); its digits add to a full chunk's."""
    narrow = getattr(module, indif_name(CELLS, W))
    half = 2 ** (W - 1)
    rng = np.random.default_rng(11)
    cases = [np.array([half, -half, 0, 1, -1, half - 1]),         # every |d| within the width
             np.array([half + 1, -half - 1, 2 * half, 13, -13, 31]),  # wrapped cells
             rng.integers(-half, half + 1, CELLS)]
    for d in cases:
        expected = rng.integers(0, 16, CELLS) + 31
        counts = expected + d
        mask = rng.integers(0, 2 ** K, CELLS)
        masked, _ = narrow.encrypt(digits_of((counts + mask) % 2 ** W, W), None)
        out = narrow.run(masked, digits_of(indif_offset(mask, expected, W), W))
        score = indif_at_width(counts, expected, W)
        assert narrow.decrypt(out).tolist() == digits(score)
        assert score <= indif_exact(counts, expected)
        if np.abs(d).max() <= half:
            assert score == indif_exact(counts, expected)
    full = getattr(module, indif_name(CELLS))
    counts, expected = np.full(CELLS, 5), np.arange(CELLS)
    masked, _ = full.encrypt(digits_of(counts % 2 ** K, K), None)
    wide = full.run(masked, digits_of(indif_offset(np.zeros(CELLS, dtype=np.int64), expected,
                                                   K), K))
    both = module.add.decrypt(module.add.run(wide, out)).tolist()
    assert both == digits((indif_exact(counts, expected) + score) % 2 ** N)


def test_noise_outside_the_offset_fails_closed():
    for z in (2 ** B, -(2 ** B), 10 ** 6):
        with pytest.raises(NoiseOutOfRange):
            noise_operand(z, SHAPE)


def test_offset_bits_cover_forty_sigmas_and_the_tail_is_counted():
    for sigma2 in (Fraction(1), Fraction(3, 2), Fraction(22750), Fraction(10 ** 9, 7)):
        b = noise_offset_bits(sigma2)
        assert Fraction(4 ** b) >= 1600 * sigma2 > Fraction(4 ** (b - 1)) or b == 1
    sigma2 = Fraction(91, 2 * Fraction(1, 1000))
    b = noise_offset_bits(sigma2)
    p = noise_tail_probability(sigma2, b, 91)
    assert 0 < p <= 1e-300  # far below any delta, and never reported as zero
    assert noise_tail_delta(sigma2, b, 91, epsilon=1.0) >= p
    # A too narrow offset is reported honestly, as a large probability.
    assert noise_tail_probability(Fraction(100), 3, 10) == 1.0
    assert noise_tail_probability(Fraction(100), 5, 1) == pytest.approx(
        2 * math.exp(-1024 / 200), rel=1e-9)


def test_the_plan_charges_one_noise_and_resolves_any_number_of_pairs():
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.session_plan import SessionPlan
    from tests.servers.test_servers import SCHEMA

    plan = SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), 1.0, 1e-6, 1000,
                                         parameter_set="test-small", selection="noisy-greedy",
                                         noise="two-server"))
    chosen, pairs = plan.selection, len(plan.layout.two_way)
    # Each server's view is protected by the other's noise alone: one sigma2 for the charge.
    assert chosen.rho_charged == chosen.rho
    assert chosen.noise_sigma2 == Fraction(pairs) / (2 * chosen.rho)
    two_way = plan.release("two_way")
    assert two_way.marginal_keys == ()
    assert sum(r.rho for r in plan.releases) + chosen.rho_charged <= plan.rho_total
    assert two_way.sigma2 == Fraction(pairs) / (2 * two_way.rho)  # the worst case: all pairs
    one = plan.resolve(two_way, [(0, 2)])
    assert len(one.marginal_keys) == 1 and one.sigma2 == 1 / (2 * two_way.rho)
    assert one.rho == two_way.rho
    none = plan.resolve(two_way, [])
    assert none.marginal_keys == () and none.rho == 0
    cells = plan.pair_cells()
    shape = chosen.noisy_shape(plan.used_chunk_sizes())
    assert chosen.bootstraps(cells) >= pairs * shape.noise_bootstraps + sum(cells)
    assert Fraction(4 ** shape.noise_bits) >= 1600 * chosen.noise_sigma2
    with pytest.raises(ValueError, match="waits"):
        plan.resolve(two_way, None)
    with pytest.raises(ValueError, match="rounds are for em"):
        SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), 1.0, 1e-6, 1000,
                                      parameter_set="test-small", selection="noisy-greedy",
                                      rounds=2, noise="two-server"))


def test_chained_chunk_sums_at_adult_width():
    """Regression: at k = 16 an ``add`` fed with an ``add``'s output lost carries until its
    widths were declared. A pair of 3 chunks, summed chunk by chunk: the last ``add`` takes
    an ``add``'s output (the compute server's tree of adds does too, from four chunks)."""
    k, n, cells = 16, 16, 16  # the failing configuration: Adult's widths, 16-cell chunks
    module = compile_noisy_scores(NoisyScoreShape(count_bits=k, chunk_sizes=(cells,),
                                                  score_bits=n, noise_bits=4), 2.0 ** -40)
    module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    indif = getattr(module, indif_name(cells))
    rng = np.random.default_rng(9)
    total, running = None, 0
    for _ in range(3):
        counts = rng.integers(0, 500, cells)
        expected = np.clip(counts + rng.integers(-300, 301, cells), 0, None)
        mask = rng.integers(0, 2 ** k, cells)
        masked, _ = indif.encrypt(digits_of((counts + mask) % 2 ** k, k), None)
        score = indif.run(masked, digits_of(indif_offset(mask, expected, k), k))
        running += indif_exact(counts, expected)
        total = score if total is None else module.add.run(total, score)
        assert module.add.decrypt(total).tolist() == digits(running, n)
