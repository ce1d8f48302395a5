import numpy as np
from scipy import stats

from feddpsyn.crypto.masking import expand_masks, mask_counts, new_seed, seed_commitment, unmask_sum


def test_both_ends_expand_the_same_masks_and_domains_are_separated():
    seed = new_seed()
    a = expand_masks(seed, "s", "c1", 1000, 20)
    assert (a == expand_masks(seed, "s", "c1", 1000, 20)).all()
    assert not (a == expand_masks(seed, "s", "c2", 1000, 20)).all()
    assert not (a == expand_masks(seed, "t", "c1", 1000, 20)).all()
    assert a.min() >= 0 and a.max() < 2 ** 20


def test_masks_are_uniform():
    masks = expand_masks(bytes(range(32)), "s", "c", 64_000, 16)
    observed = np.bincount(masks % 64, minlength=64)
    assert stats.chisquare(observed).pvalue > 1e-6


def test_sum_of_masked_vectors_minus_masks_is_the_sum_of_counts():
    rng = np.random.default_rng(1)
    counts = [rng.integers(0, 5000, 50) for _ in range(4)]
    masks = [expand_masks(new_seed(), "s", f"c{i}", 50, 16) for i in range(4)]
    masked = [mask_counts(c, m, 16) for c, m in zip(counts, masks)]
    assert (unmask_sum(sum(masked), sum(masks), 16) == sum(counts)).all()


def test_commitment_binds_seed_session_and_client():
    seed = new_seed()
    c = seed_commitment(seed, "s", "c")
    assert c == seed_commitment(seed, "s", "c")
    assert c != seed_commitment(new_seed(), "s", "c")
    assert c != seed_commitment(seed, "s", "d")
