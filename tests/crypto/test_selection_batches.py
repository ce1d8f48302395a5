"""Primitive 3 by candidate batches (``crypto.selection_batches``): the batched
round decrypts to the same one-hot as the single ``select`` call on the same ciphertexts and
randomness, and to the integer model; each stage's intermediates decrypt to their model.

Cost: one tiny module (5 candidates in two batches of 3, one padding position; 4-digit
scores) compiled and keyed once for the file; every call is a few dozen bootstraps."""

import random
import secrets
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.crypto.private_selection import (
    PrivateSelectionShape,
    batch_names,
    compile_private_selection,
)
from feddpsyn.crypto.selection_batches import BatchLayout, batch_layout, batched_select_plaintext
from feddpsyn.crypto.selection_cost import batched_pbs_estimate
from feddpsyn.crypto.selection_randomness import batch_randomness, random_share
from feddpsyn.crypto.tfhe_permute_and_flip import (
    SelectionShape,
    clear_arguments,
    select_plaintext,
    thresholds,
)

SELECTION = SelectionShape(candidates=5, score_bits=4, drop_bits=0, nb=2, kappa_prime=(3, 3))
LAYOUT = BatchLayout(candidates=5, size=3)
SHAPE = PrivateSelectionShape(count_bits=4, chunk_sizes=(2,), selection=SELECTION,
                              batches=LAYOUT)
EPS = Fraction(1, 2)
C = thresholds(SELECTION, EPS)
NAMES = batch_names(LAYOUT)


@pytest.fixture(scope="module")
def module():
    m = compile_private_selection(SHAPE, C, 2.0 ** -40)
    m.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return m


def digits(value: int) -> np.ndarray:
    return np.array([(value >> j) & 1 for j in range(SELECTION.score_bits)], dtype=np.int64)


def encrypt_scores(module, values: list[int]) -> list:
    """Score digit vectors encrypted as ``add``'s input: the encoding every P2 output has, so
    one ciphertext serves the single call and every batched function (the wires)."""
    return [module.add.encrypt(digits(v), None)[0] for v in values]


def run_batched(module, scores: list, active, r_ks, r_cs, priority) -> dict:
    """One batched round as the compute server schedules it (positions already in its order,
    padding appended): stage 1 per batch, combine, stage 2 per batch, least, masks."""
    n, count, positions = LAYOUT.size, LAYOUT.count, LAYOUT.positions
    padded = scores + [scores[0]] * (positions - len(scores))  # padding: any ciphertext
    maximum, pick = getattr(module, NAMES["maximum"]), getattr(module, NAMES["pick"])
    combine, least = getattr(module, NAMES["combine_maximum"]), getattr(module, NAMES["least"])
    mask = getattr(module, NAMES["mask"])
    maxima = [maximum.run(*padded[LAYOUT.batch(b)], active[LAYOUT.batch(b)])
              for b in range(count)]
    top = combine.run(*maxima, np.ones(count, dtype=np.int64))
    hots, summaries = [], []
    for b in range(count):
        part = LAYOUT.batch(b)
        args = clear_arguments(np.zeros((1, n, 1)), active[part], r_ks[:, part],
                               r_cs[:, part], priority[:, part])
        shares = pick.encrypt(*([None] * (n + 2)), args[2], args[3], None, None)
        hot, summary = pick.run(*padded[part], top, args[1], shares[n + 2], shares[n + 3],
                                *args[4:])
        hots.append(hot)
        summaries.append(summary)
    chosen = least.run(*summaries)
    outputs = [out for b in range(count) for out in mask.run(hots[b], chosen[b])]
    return {"maxima": [maximum.decrypt(v).tolist() for v in maxima],
            "top": combine.decrypt(top).tolist(),
            "hots": [np.asarray(pick.decrypt(h)).ravel().tolist() for h in hots],
            "chosen": [int(np.asarray(least.decrypt(*chosen)[b]).ravel()[0])
                       for b in range(count)],
            # the key server decrypts every output with one output's spec (one encoding)
            "outputs": [int(np.asarray(mask.decrypt(o)).ravel()[0]) for o in outputs]}


def run_single(module, scores: list, active, r_ks, r_cs, priority) -> list[int]:
    s = SELECTION.candidates
    args = clear_arguments(np.zeros((1, s, 1)), active, r_ks, r_cs, priority)
    shares = module.select.encrypt(*([None] * (s + 1)), args[2], args[3], None, None)
    out = module.select.run(*scores, args[1], shares[s + 1], shares[s + 2], *args[4:])
    return [int(np.asarray(v).ravel()[0]) for v in module.select.decrypt(*out)]


def test_batched_round_equals_the_single_call_and_the_model(module):
    """Scores with ties, inactive candidates (a batch with none active, the maximum's holder
    inactive) and random shares: every stage decrypts to the batched model, whose one-hot
    is select_plaintext's (and the single select's on the same ciphertexts and shares, run
    on the first case: ``tests/crypto/test_selection.py`` proves select equal to select_plaintext;
    the last test here proves the two models equal over many draws)."""
    source = random.Random(16)
    s, positions = SELECTION.candidates, LAYOUT.positions
    cases = [([3, 3, 1, 0, 3], [1, 1, 1, 1, 1]), ([15, 2, 9, 14, 15], [0, 1, 1, 0, 0]),
             ([9, 12, 0, 13, 4], [1, 1, 1, 0, 1])]
    for case, (values, active_real) in enumerate(cases):
        scores = encrypt_scores(module, values)
        r_ks, priority = batch_randomness(SELECTION, LAYOUT, source.getrandbits)
        r_cs = random_share(SelectionShape(positions, 4, 0, 2, (3, 3)), source.getrandbits)
        active = np.array(active_real + [0] * (positions - s), dtype=np.int64)
        padded_digits = np.array([digits(v) for v in values + [values[0]] * (positions - s)])
        model = batched_select_plaintext(padded_digits, active, r_ks[0], r_cs[0], SELECTION, C,
                                         priority[0], LAYOUT)
        got = run_batched(module, scores, active, r_ks, r_cs, priority)
        assert [sum(b << j for j, b in enumerate(m)) for m in got["maxima"]] == model.maxima
        assert sum(b << j for j, b in enumerate(got["top"])) == model.top
        assert got["hots"] == [h.tolist() for h in model.hots]
        assert got["chosen"] == [int(b == model.chosen) for b in range(LAYOUT.count)]
        assert got["outputs"] == model.outputs.tolist()
        plain = select_plaintext(padded_digits[:s], active[:s], r_ks[0, :s], r_cs[0, :s],
                                 SELECTION, C, priority[0, :s]).tolist()
        assert got["outputs"][:s] == plain and sum(plain) == 1
        assert got["outputs"][s:] == [0] * (positions - s)
        if case == 0:
            assert run_single(module, scores, active[:s], r_ks[:, :s], r_cs[:, :s],
                              priority[:, :s]) == plain


def test_batched_model_equals_the_single_model_over_many_draws():
    """The integer models agree on 3,000 random rounds of a wider shape (cheap, no circuit)."""
    shape = SelectionShape(candidates=11, score_bits=5, drop_bits=0, nb=3,
                           kappa_prime=(3, 4, 4))
    layout = batch_layout(11, 4)
    assert (layout.size, layout.count, layout.positions) == (4, 3, 12)
    c = thresholds(shape, Fraction(1))
    source = random.Random(3)
    rng = np.random.default_rng(3)
    wide = SelectionShape(layout.positions, 5, 0, 3, (3, 4, 4))
    for _ in range(3000):
        values = rng.integers(0, 32, layout.positions)
        active = rng.integers(0, 2, layout.positions)
        active[rng.integers(0, 11)] = 1
        active[11:] = 0
        dig = np.array([[(v >> j) & 1 for j in range(5)] for v in values])
        r_ks, priority = batch_randomness(shape, layout, source.getrandbits)
        r_cs = random_share(wide, source.getrandbits)
        batched = batched_select_plaintext(dig, active, r_ks[0], r_cs[0], shape, c,
                                           priority[0], layout)
        single = select_plaintext(dig[:11], active[:11], r_ks[0, :11], r_cs[0, :11], shape,
                                  c, priority[0, :11])
        assert batched.outputs[:11].tolist() == single.tolist()
        assert batched.outputs[11:].sum() == 0


def test_batch_layouts_cover_every_candidate_count():
    for candidates in range(2, 300):
        for target in (2, 3, 8, 16):
            layout = batch_layout(candidates, target)
            if layout is None:
                assert candidates <= max(2, target)
                continue
            assert layout.size <= max(2, target) and layout.count >= 2
            assert 0 <= layout.positions - candidates < layout.size


def test_batched_bootstrap_count_bounds_the_compiled_counts(module):
    estimate = batched_pbs_estimate(SELECTION, LAYOUT)
    for stage, name in NAMES.items():
        compiled = getattr(module, name).statistics["programmable_bootstrap_count"]
        assert compiled == estimate[stage], stage


def test_the_plan_batches_large_rounds_and_counts_every_call():
    """The plan's layout (``params.selection_plan.candidate_batches``) and its bootstrap
    counts: a round's structural bound and, from compiled counts, every call of the round
    (B batch maxima, picks and masks, one combine and one least). No circuit."""
    from dataclasses import replace

    from feddpsyn.params.selection_plan import SelectionPlan, candidate_batches

    plan = SelectionPlan.build("em", pairs=66, max_rows=740, rho=Fraction(1, 10), rounds=4)
    layout = plan.batches
    assert layout == candidate_batches(66) == BatchLayout(candidates=66, size=5)
    assert plan.round_bootstraps() == batched_pbs_estimate(plan.shape, layout)["round"]
    assert plan.bootstraps_by_phase([4] * 66)["p3"] == 4 * plan.round_bootstraps()
    names = batch_names(layout)
    compiled = {name: 10 + i for i, name in enumerate(sorted(set(names.values())))}
    assert plan.round_bootstraps(compiled) == (
        layout.count * (compiled[names["maximum"]] + compiled[names["pick"]]
                        + compiled[names["mask"]])
        + compiled[names["combine_maximum"]] + compiled[names["least"]])
    assert replace(plan, batches=None).round_bootstraps({"select": 7}) == 7
    assert SelectionPlan.build("em", pairs=2, max_rows=740, rho=Fraction(1, 10),
                               rounds=1).batches is None
