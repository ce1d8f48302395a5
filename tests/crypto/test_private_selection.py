"""P2 -> chunk sums -> P3 in one key set: InDif digits go into the selection encrypted, and
every stage decrypts to its plaintext model."""

import secrets
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.crypto.indif import digits_of, indif_exact, indif_offset
from feddpsyn.crypto.private_selection import (
    PrivateSelectionShape,
    add_plaintext,
    compile_private_selection,
    indif_name,
)
from feddpsyn.crypto.selection_randomness import random_priorities, random_share
from feddpsyn.crypto.tfhe_permute_and_flip import (
    SelectionShape,
    clear_arguments,
    select_plaintext,
    thresholds,
)

K, CELLS = 6, 6
SELECTION = SelectionShape(candidates=3, score_bits=6, drop_bits=0, nb=3, kappa_prime=(3, 3, 4))
# Two chunk sizes: a pair may be cut into chunks of different sizes (one function each).
SHAPE = PrivateSelectionShape(count_bits=K, chunk_sizes=(3, CELLS), selection=SELECTION)
EPS = Fraction(1, 2)


@pytest.fixture(scope="module")
def module():
    m = compile_private_selection(SHAPE, thresholds(SELECTION, EPS), 2.0 ** -40)
    m.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return m


def digits(value: int) -> list[int]:
    return [(value >> j) & 1 for j in range(SELECTION.score_bits)]


def test_indif_add_select_compose_and_match_their_models(module):
    rng = np.random.default_rng(11)
    # Four chunks: candidate 0 spans chunks 0 (6 cells) and 1 (3 cells): a pair wider than
    # one chunk, cut into two sizes.
    encrypted, clear = [], []
    for i in range(4):
        cells = 3 if i == 1 else CELLS
        indif = getattr(module, indif_name(cells))
        counts, expected = rng.integers(0, 6, cells), rng.integers(0, 6, cells)
        mask = rng.integers(0, 2 ** K, cells)
        masked, _ = indif.encrypt(digits_of((counts + mask) % 2 ** K, K), None)
        out = indif.run(masked, digits_of(indif_offset(mask, expected, K), K))
        assert indif.decrypt(out).tolist() == digits(indif_exact(counts, expected))
        encrypted.append(out)
        clear.append(indif_exact(counts, expected))
    pair = module.add.run(encrypted[0], encrypted[1])
    assert module.add.decrypt(pair).tolist() == add_plaintext(digits(clear[0]),
                                                              digits(clear[1]))
    scores = [clear[0] + clear[1], clear[2], clear[3]]
    candidates = [pair, encrypted[2], encrypted[3]]

    c = thresholds(SELECTION, EPS)
    for order in ([0, 1, 2], [2, 0, 1]):  # the compute server's secret order
        active = np.array([1, 1, 1])
        r_ks, r_cs = random_share(SELECTION), random_share(SELECTION)
        priority = random_priorities(SELECTION)
        args = clear_arguments(np.zeros((1, 3, SELECTION.score_bits), dtype=np.int64), active,
                               r_ks, r_cs, priority)
        encrypted_shares = module.select.encrypt(None, None, None, None, args[2], args[3],
                                                 None, None)
        out = module.select.run(*[candidates[i] for i in order], args[1], *encrypted_shares[4:6],
                                *args[4:])
        model = select_plaintext(np.array([digits(scores[i]) for i in order]), active,
                                 r_ks[0], r_cs[0], SELECTION, c, priority[0])
        # The compute server puts the outputs back in candidate order before the key server
        # decrypts them: every output position must decrypt any output.
        back = [None] * 3
        for position, candidate in enumerate(order):
            back[candidate] = out[position]
        one_hot = [int(np.asarray(v).ravel()[0]) for v in module.select.decrypt(*back)]
        assert one_hot == [int(model[order.index(i)]) for i in range(3)]
        assert sum(one_hot) == 1
