"""Primitives 2 and 3 in one key set: InDif digits flow into the selection without decryption.

The compute server must feed Primitive 2's encrypted outputs into Primitive 3, so the two
cannot be separate circuits (each would have its own keys): they are functions of one concrete
module, wired so that an output of one is a valid input of another:

* ``indif_<s>(masked_digits, offset_digits)``, one function per chunk size s: InDif of one
  chunk of one pair's cells (``crypto.indif``: base-4 digits of M encrypted, of c in clear),
  as exactly ``score_bits`` binary digits. Several sizes, because a chunk's digit
  conversion costs the same whatever its padding: a pair is cut into the chunks of least
  total cost (``params.session_plan``); only the sizes a session's pairs use are compiled;
* ``add(x, y)``: a ripple-carry sum of two digit vectors (a pair wider than one chunk is the
  sum of its chunks' scores; two 2-bit lookups per digit);
* ``select(score_0, ..., score_{S-1}, active, r_ks, priority, xor_twice, xor_shift)``:
  Primitive 3 (``crypto.selection``), one argument per candidate so that the compute server
  can pass them in its secret random order, one output per position so it can put them back;
  ``r_ks`` and ``priority`` are the key server's encrypted shares of the coins and the order.

Widths. ``count_bits`` here is P2's k (|C - K| < 2^(k-1)), not P1's: the key server encrypts
M mod 2^k. ``score_bits`` must hold every pair's InDif: with K clipped so that sum K <= rows,
InDif <= sum C + sum K <= 2 * max_rows, so score_bits = bit length of 2 * max_rows, and
truncating a chunk's digits (or a sum's carry-out) to it is exact.

Cost (measured in ``bench/bench_selection.py``): every lookup is at most 3 bits wide (P2's
digits included, ``crypto.indif``), so one key set serves all three functions.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
from concrete import fhe

from crypto._concrete import ensure_tag_stack
from crypto.indif import _indif_bits_function, indif_inputset
from crypto.selection import SelectionShape, clear_arguments, select_core

__all__ = ["PrivateSelectionShape", "compile_private_selection", "add_plaintext",
           "score_functions", "score_inputsets", "indif_name", "indif_definitions",
           "check_chunk_sizes"]

_SUM_DIGIT = fhe.LookupTable([0, 1, 0, 1])
_SUM_CARRY = fhe.LookupTable([0, 0, 1, 1])


@dataclass(frozen=True)
class PrivateSelectionShape:
    count_bits: int      # P2's k
    chunk_sizes: tuple[int, ...]  # one ``indif_<s>`` function per size
    selection: SelectionShape  # its score_bits is every score's digit count

    def __post_init__(self) -> None:
        if self.selection.batch != 1:
            raise ValueError("the service selects one pair per call (batch = 1)")
        check_chunk_sizes(self.chunk_sizes)


def check_chunk_sizes(sizes: tuple[int, ...]) -> None:
    if not sizes or len(set(sizes)) != len(sizes) or min(sizes) < 1:
        raise ValueError("chunk sizes: one or more distinct positive cell counts")


def indif_name(size: int) -> str:
    """The module function that runs P2 on a chunk of ``size`` cells."""
    return f"indif_{size}"


def add_plaintext(x: list[int], y: list[int]) -> list[int]:
    """``add``'s exact model: digits of (x + y) mod 2^n, least significant first."""
    n = len(x)
    total = sum(b << i for i, b in enumerate(x)) + sum(b << i for i, b in enumerate(y))
    return [(total >> i) & 1 for i in range(n)]


def _indif_function(count_bits: int, cells: int, score_bits: int):
    n = score_bits
    chunk_bits = _indif_bits_function(count_bits, cells)

    def indif(masked_digits, offset_digits):
        digits = list(chunk_bits(masked_digits=masked_digits, offset_digits=offset_digits))[:n]
        digits += [digits[0] * 0] * (n - len(digits))
        return fhe.array(digits)

    indif.__name__ = indif_name(cells)  # concrete names a module's functions by __name__
    return indif


def score_functions(count_bits: int, chunk_sizes: tuple[int, ...], score_bits: int):
    """``{indif_<s>: function}`` and ``add`` (module docstring) for digit vectors of
    ``score_bits`` digits; shared with ``crypto.noisy_scores``."""
    n = score_bits
    indifs = {indif_name(size): _indif_function(count_bits, size, n) for size in chunk_sizes}

    def add(x, y):
        out, carry = [], None
        for j in range(n):
            # Declared widths (as everywhere in these circuits): each input digit is a bit and
            # the column total at most 3. Without them concrete sized add's inputs from the
            # input set alone, and at k = 16 an add fed with an add's output lost carries
            # (Adult-width chained sums off by 2-6; bench/bench_indif_chunks.py caught it).
            xj = fhe.hint(x[j], can_store=1)
            yj = fhe.hint(y[j], can_store=1)
            total = fhe.hint(xj + yj + (0 if carry is None else carry), can_store=3)
            out.append(_SUM_DIGIT[total])
            if j + 1 < n:
                carry = _SUM_CARRY[total]
        return fhe.array(out)

    return indifs, add


def score_inputsets(count_bits: int, chunk_sizes: tuple[int, ...], score_bits: int,
                    rng: np.random.Generator) -> tuple[dict, list, list]:
    """Input sets of every ``indif_<s>`` and of ``add`` (and the digit vectors they use),
    drawn from ``rng`` in a fixed order so that a module compiled from them is reproducible."""
    k, n = count_bits, score_bits
    indif_inputs = {indif_name(cells): indif_inputset(k, cells, rng) for cells in chunk_sizes}
    digit_inputs = [rng.integers(0, 2, n) for _ in range(8)] + [np.ones(n, dtype=np.int64)]
    add_inputs = [(a, b) for a, b in zip(digit_inputs, digit_inputs[1:] + digit_inputs[:1])]
    return indif_inputs, add_inputs, digit_inputs


def _functions(shape: PrivateSelectionShape, c: list[int]):
    n, s = shape.selection.score_bits, shape.selection.candidates
    indifs, add = score_functions(shape.count_bits, shape.chunk_sizes, n)

    def select(**kwargs):
        scores = [kwargs[f"score_{r}"] for r in range(s)]
        columns = [fhe.array([[score[j] for score in scores]]) for j in range(n)]
        return select_core(shape.selection, c, columns, kwargs["active"], kwargs["r_ks"],
                           kwargs["priority"], kwargs["xor_twice"], kwargs["xor_shift"])

    names = [f"score_{r}" for r in range(s)] + ["active", "r_ks", "priority", "xor_twice",
                                                "xor_shift"]
    select.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in names])
    statuses = {f"score_{r}": "encrypted" for r in range(s)}
    statuses.update(active="clear", r_ks="encrypted", priority="encrypted", xor_twice="clear",
                    xor_shift="clear")
    return indifs, add, select, statuses


def indif_definitions(indifs: dict) -> dict:
    return {name: fhe.function({"masked_digits": "encrypted", "offset_digits": "clear"})(fn)
            for name, fn in indifs.items()}


def compile_private_selection(shape: PrivateSelectionShape, c: list[int], p_error: float):
    """Compile the module (``module.indif_<s>`` per chunk size, ``module.add``,
    ``module.select``) for the selection thresholds ``c`` (``crypto.selection.thresholds``)."""
    ensure_tag_stack()
    indifs, add, select, select_statuses = _functions(shape, c)
    indif_defs = indif_definitions(indifs)
    add_def = fhe.function({"x": "encrypted", "y": "encrypted"})(add)
    select_def = fhe.function(select_statuses)(select)
    s = shape.selection.candidates
    wires = set()
    sources = [fhe.Output(d, 0) for d in indif_defs.values()] + [fhe.Output(add_def, 0)]
    for source in sources:
        for target in [fhe.Input(add_def, 0), fhe.Input(add_def, 1)] + [
                fhe.Input(select_def, r) for r in range(s)]:
            wires.add(fhe.Wire(source, target))
    module_class = type("PrivateSelection", (), {**indif_defs, "add": add_def,
                                                  "select": select_def,
                                                  "composition": fhe.Wired(wires)})
    compiler = fhe.module()(module_class)

    n = shape.selection.score_bits
    w = shape.selection.random_bits
    pw = shape.selection.priority_bits
    rng = np.random.default_rng(0)
    indif_inputs, add_inputs, _ = score_inputsets(shape.count_bits, shape.chunk_sizes, n, rng)
    select_inputs = []
    for i in range(10):
        digits = (np.ones((1, s, n), dtype=np.int64) if i == 0
                  else rng.integers(0, 2, (1, s, n)))
        args = clear_arguments(digits, rng.integers(0, 2, s) | (i % 2),
                               rng.integers(0, 2, (1, s, w)), rng.integers(0, 2, (1, s, w)),
                               rng.integers(0, 2, (1, s, pw)) if i else np.ones((1, s, pw)))
        select_inputs.append(tuple(args[0][0, r] for r in range(s)) + tuple(args[1:]))
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None, show_progress=False,
                                      compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile({**indif_inputs, "add": add_inputs, "select": select_inputs},
                            configuration)
