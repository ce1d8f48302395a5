"""Primitives 2 and 3 in one key set: InDif digits flow into the selection without decryption.

The compute server must feed Primitive 2's encrypted outputs into Primitive 3, so the two
cannot be separate circuits (each would have its own keys): they are functions of one concrete
module, wired so that an output of one is a valid input of another:

* ``indif_<s>(masked_digits, offset_digits)``, one function per chunk size s: InDif of one
  chunk of one pair's cells (``crypto.indif``: base-4 digits of M encrypted, of c in clear),
  as exactly ``score_bits`` binary digits. Several sizes, because a chunk's digit
  conversion costs the same whatever its padding: a pair is cut into the chunks of least
  total cost (``params.selection_plan``); only the sizes a session's pairs use are compiled;
* ``add(x, y)``: a ripple-carry sum of two digit vectors (a pair wider than one chunk is the
  sum of its chunks' scores; two 2-bit lookups per digit);
* ``select(score_0, ..., score_{S-1}, active, r_ks, priority, xor_twice, xor_shift)``:
  Primitive 3 (``crypto.tfhe_permute_and_flip``), one argument per candidate so that the
  compute server can pass them in its secret random order, one output per position so it can
  put them back; ``r_ks`` and ``priority`` are the key server's encrypted shares of the coins
  and the order;
* with candidate batches (``PrivateSelectionShape.batches``, ``crypto.selection_batches``):
  ``maximum_<n>`` and ``maximum_<B>`` (a batch's scores' maximum, the batches' maxima's),
  ``pick_<n>`` (a batch's acceptances and least accepted priority), ``least_<B>`` (the batch of
  least priority) and ``mask_<n>`` (a batch's outputs), wired so that a score, a maximum, a
  pick's one-hot and summary and a choice each flow on encrypted;
  ``select`` is compiled too unless ``single`` is off (a large S compiles slowly and its
  round does not shorten with workers).

Widths. ``count_bits`` here is P2's k (|C - K| < 2^(k-1)), not P1's: the key server encrypts
M mod 2^k. ``score_bits`` must hold every pair's InDif: with K clipped so that sum K <= rows,
InDif <= sum C + sum K <= 2 * max_rows, so score_bits = bit length of 2 * max_rows, and
truncating a chunk's digits (or a sum's carry-out) to it is exact.

Cost (measured in ``experiments/p3_lookup_cost/bench_selection.py``): every lookup is at most 3 bits
wide (P2's digits included, ``crypto.indif``), so one key set serves all three functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import ensure_tag_stack
from feddpsyn.crypto.indif import _indif_bits_function, indif_inputset
from feddpsyn.crypto.selection_batches import (
    BatchLayout,
    batch_least_core,
    batch_mask_core,
    batch_maximum_core,
    batch_pick_core,
)
from feddpsyn.crypto.tfhe_permute_and_flip import SelectionShape, clear_arguments, select_core

__all__ = ["PrivateSelectionShape", "compile_private_selection", "add_plaintext",
           "score_functions", "score_inputsets", "indif_name", "indif_names", "indif_definitions",
           "check_chunk_sizes", "check_widths", "batch_names"]

Array = np.ndarray[Any, Any]

_SUM_DIGIT = fhe.LookupTable([0, 1, 0, 1])
_SUM_CARRY = fhe.LookupTable([0, 0, 1, 1])


@dataclass(frozen=True)
class PrivateSelectionShape:
    count_bits: int      # P2's k
    chunk_sizes: tuple[int, ...]  # one ``indif_<s>`` function per size
    selection: SelectionShape  # its score_bits is every score's digit count
    # P3 by candidate batches (``crypto.selection_batches``), or None
    batches: BatchLayout | None = None
    single: bool = True  # compile the one-call ``select`` (always, without batches)
    # P2's narrower widths: ``indif_<s>_w<w>`` for each (``params.indif_widths``)
    widths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.selection.batch != 1:
            raise ValueError("the service selects one pair per call (batch = 1)")
        check_chunk_sizes(self.chunk_sizes)
        check_widths(self.widths, self.count_bits)
        if self.batches is None and not self.single:
            raise ValueError("P3 needs the one-call select or candidate batches")
        if self.batches is not None and (self.batches.candidates != self.selection.candidates
                                         or self.selection.drop_bits):
            raise ValueError("candidate batches: the selection's candidates, every digit kept")


def batch_names(layout: BatchLayout) -> dict[str, str]:
    """The module functions of a batched round, by stage (``crypto.selection_batches``):
    ``maximum`` and ``pick`` run once per batch, ``combine_maximum`` and ``least`` once,
    ``mask`` once per batch."""
    return {"maximum": f"maximum_{layout.size}", "combine_maximum": f"maximum_{layout.count}",
            "pick": f"pick_{layout.size}", "least": f"least_{layout.count}",
            "mask": f"mask_{layout.size}"}


def check_chunk_sizes(sizes: tuple[int, ...]) -> None:
    if not sizes or len(set(sizes)) != len(sizes) or min(sizes) < 1:
        raise ValueError("chunk sizes: one or more distinct positive cell counts")


def check_widths(widths: tuple[int, ...], count_bits: int) -> None:
    """P2's narrower widths: increasing, each from 2 to k - 1."""
    if list(widths) != sorted(set(widths)) or (widths and (widths[0] < 2
                                                            or widths[-1] >= count_bits)):
        raise ValueError(f"P2's narrower widths must increase from 2 to k - 1 = "
                         f"{count_bits - 1}: {list(widths)}")


def indif_name(size: int, width: int | None = None) -> str:
    """The module function that runs P2 on a chunk of ``size`` cells: at the module's full
    ``count_bits`` (``width`` None), or at a narrower width (``indif_<s>_w<width>``, the
    chunks whose public bound fits it: ``params.indif_widths``)."""
    return f"indif_{size}" if width is None else f"indif_{size}_w{width}"


def add_plaintext(x: list[int], y: list[int]) -> list[int]:
    """``add``'s exact model: digits of (x + y) mod 2^n, least significant first."""
    n = len(x)
    total = sum(b << i for i, b in enumerate(x)) + sum(b << i for i, b in enumerate(y))
    return [(total >> i) & 1 for i in range(n)]


def indif_names(chunk_sizes: tuple[int, ...], widths: tuple[int, ...] = ()) -> list[str]:
    """Every P2 function of a module: each size at the full width, then at each narrower."""
    return [indif_name(size) for size in chunk_sizes] + [
        indif_name(size, width) for width in widths for size in chunk_sizes]


def _indif_function(count_bits: int, cells: int, score_bits: int,
                    name: str) -> Callable[[Any, Any], Any]:
    n = score_bits
    chunk_bits = _indif_bits_function(count_bits, cells)

    def indif(masked_digits: Any, offset_digits: Any) -> Any:
        digits = list(chunk_bits(masked_digits=masked_digits, offset_digits=offset_digits))[:n]
        digits += [digits[0] * 0] * (n - len(digits))
        return fhe.array(digits)

    indif.__name__ = name  # concrete names a module's functions by __name__
    return indif


def score_functions(count_bits: int, chunk_sizes: tuple[int, ...], score_bits: int,
                    widths: tuple[int, ...] = ()
                    ) -> tuple[dict[str, Callable[[Any, Any], Any]], Callable[[Any, Any], Any]]:
    """``{indif_<s>: function}`` (and ``indif_<s>_w<w>`` for every narrower width ``w``) and
    ``add`` (module docstring) for digit vectors of ``score_bits`` digits; shared with
    ``crypto.noisy_scores``."""
    n = score_bits
    indifs = {indif_name(size): _indif_function(count_bits, size, n, indif_name(size))
              for size in chunk_sizes}
    for width in widths:
        for size in chunk_sizes:
            name = indif_name(size, width)
            indifs[name] = _indif_function(width, size, n, name)

    def add(x: Any, y: Any) -> Any:
        out, carry = [], None
        for j in range(n):
            # Declared widths (as everywhere in these circuits): each input digit is a bit and
            # the column total at most 3. Without them concrete sized add's inputs from the
            # input set alone, and at k = 16 an add fed with an add's output lost carries
            # (Adult-width chained sums off by 2-6; experiments/p2_chunk_sizes/bench_indif_chunks.py
            # caught it).
            xj = fhe.hint(x[j], can_store=1)
            yj = fhe.hint(y[j], can_store=1)
            total = fhe.hint(xj + yj + (0 if carry is None else carry), can_store=3)
            out.append(_SUM_DIGIT[total])
            if j + 1 < n:
                carry = _SUM_CARRY[total]
        return fhe.array(out)

    return indifs, add


def score_inputsets(count_bits: int, chunk_sizes: tuple[int, ...], score_bits: int,
                    rng: np.random.Generator, widths: tuple[int, ...] = ()
                    ) -> tuple[dict[str, list[tuple[Array, Array]]], list[tuple[Array, Array]],
                               list[Array]]:
    """Input sets of every ``indif_<s>`` (and ``indif_<s>_w<w>``) and of ``add`` (and the
    digit vectors they use), drawn from ``rng`` in a fixed order so that a module compiled
    from them is reproducible; the narrower widths' from a generator of their own, so that a
    module without them is the one earlier versions compiled."""
    k, n = count_bits, score_bits
    indif_inputs = {indif_name(cells): indif_inputset(k, cells, rng) for cells in chunk_sizes}
    digit_inputs = [rng.integers(0, 2, n) for _ in range(8)] + [np.ones(n, dtype=np.int64)]
    add_inputs = [(a, b) for a, b in zip(digit_inputs, digit_inputs[1:] + digit_inputs[:1])]
    narrow = np.random.default_rng(1)
    for width in widths:
        for cells in chunk_sizes:
            indif_inputs[indif_name(cells, width)] = indif_inputset(width, cells, narrow)
    return indif_inputs, add_inputs, digit_inputs


def _functions(shape: PrivateSelectionShape, c: list[int]
               ) -> tuple[dict[str, Callable[[Any, Any], Any]], Callable[[Any, Any], Any],
                          Callable[..., Any], dict[str, str]]:
    n, s = shape.selection.score_bits, shape.selection.candidates
    indifs, add = score_functions(shape.count_bits, shape.chunk_sizes, n, shape.widths)

    def select(**kwargs: Any) -> Any:
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


def _keyword_function(body: Callable[..., Any], name: str,
                      names: list[str]) -> Callable[..., Any]:
    """``body(**kwargs)`` as a module function ``name`` with these keyword parameters (concrete
    reads a function's parameters from its signature and names it by ``__name__``)."""
    def function(**kwargs: Any) -> Any:
        return body(**kwargs)

    function.__name__ = name
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in names])
    return function


def _batch_definitions(shape: PrivateSelectionShape, c: list[int]) -> dict[str, Any]:
    """The batched round's functions (``batch_names``), defined for the module."""
    # Only called for a shape with batches (compile_private_selection checks).
    selection, layout = shape.selection, cast(BatchLayout, shape.batches)
    names = batch_names(layout)
    n, count = layout.size, layout.count

    def maximum(size: int) -> Any:
        scores = [f"score_{r}" for r in range(size)]
        return fhe.function({**{p: "encrypted" for p in scores}, "active": "clear"})(
            _keyword_function(lambda **kw: batch_maximum_core(
                selection, [kw[p] for p in scores], kw["active"]),
                f"maximum_{size}", scores + ["active"]))

    out = {f"maximum_{size}": maximum(size) for size in sorted({n, count})}
    scores = [f"score_{r}" for r in range(n)]
    statuses = {p: "encrypted" for p in scores}
    statuses.update(top="encrypted", active="clear", r_ks="encrypted", priority="encrypted",
                    xor_twice="clear", xor_shift="clear")
    out[names["pick"]] = fhe.function(statuses)(_keyword_function(
        lambda **kw: batch_pick_core(selection, c, [kw[p] for p in scores], kw["top"],
                                     kw["active"], kw["r_ks"], kw["priority"],
                                     kw["xor_twice"], kw["xor_shift"]),
        names["pick"], list(statuses)))
    summaries = [f"summary_{b}" for b in range(count)]
    out[names["least"]] = fhe.function({p: "encrypted" for p in summaries})(_keyword_function(
        lambda **kw: batch_least_core(selection, [kw[p] for p in summaries]),
        names["least"], summaries))
    out[names["mask"]] = fhe.function({"hot": "encrypted", "chosen": "encrypted"})(
        _keyword_function(lambda **kw: batch_mask_core(kw["hot"], kw["chosen"], n),
                          names["mask"], ["hot", "chosen"]))
    return out


def _batch_wires(layout: BatchLayout, definitions: dict[str, Any],
                 score_sources: list[Any]) -> set[Any]:
    """Scores into the batch maxima and picks; a batch maximum into the combine; the combined
    maximum into every pick; a pick's one-hot into its mask and its summary into the least;
    the least's choices into the masks."""
    names = batch_names(layout)
    n, count = layout.size, layout.count
    maximum, combine = definitions[names["maximum"]], definitions[names["combine_maximum"]]
    pick, least, mask = (definitions[names[k]] for k in ("pick", "least", "mask"))
    wires = set()
    for source in score_sources:
        for r in range(n):
            wires.add(fhe.Wire(source, fhe.Input(maximum, r)))
            wires.add(fhe.Wire(source, fhe.Input(pick, r)))
    for b in range(count):
        wires.add(fhe.Wire(fhe.Output(maximum, 0), fhe.Input(combine, b)))
        wires.add(fhe.Wire(fhe.Output(pick, 1), fhe.Input(least, b)))
        wires.add(fhe.Wire(fhe.Output(least, b), fhe.Input(mask, 1)))
    wires.add(fhe.Wire(fhe.Output(combine, 0), fhe.Input(pick, n)))
    wires.add(fhe.Wire(fhe.Output(pick, 0), fhe.Input(mask, 0)))
    return wires


def _batch_inputsets(shape: PrivateSelectionShape,
                     rng: np.random.Generator) -> dict[str, list[tuple[Array, ...]]]:
    # Only called for a shape with batches (compile_private_selection checks).
    selection, layout = shape.selection, cast(BatchLayout, shape.batches)
    names = batch_names(layout)
    n, count = layout.size, layout.count
    width, w, pw = selection.score_bits, selection.random_bits, selection.priority_bits
    ones = np.ones(width, dtype=np.int64)
    out = {}
    for size in sorted({n, count}):
        out[f"maximum_{size}"] = [
            tuple(ones if i == 0 else rng.integers(0, 2, width) for _ in range(size))
            + (np.ones(size, dtype=np.int64) if i == 0 else rng.integers(0, 2, size) | (i % 2),)
            for i in range(8)]
    picks = []
    for i in range(8):
        args = clear_arguments(np.zeros((1, n, width), dtype=np.int64),
                               rng.integers(0, 2, n) | (i % 2), rng.integers(0, 2, (1, n, w)),
                               rng.integers(0, 2, (1, n, w)),
                               rng.integers(0, 2, (1, n, pw)) if i else np.ones((1, n, pw)))
        picks.append(tuple(ones if i == 0 else rng.integers(0, 2, width) for _ in range(n))
                     + (ones if i == 0 else rng.integers(0, 2, width),) + tuple(args[1:]))
    out[names["pick"]] = picks
    out[names["least"]] = [tuple(np.ones(pw + 1, dtype=np.int64) if i == 0
                                 else rng.integers(0, 2, pw + 1) for _ in range(count))
                           for i in range(8)]
    out[names["mask"]] = [(np.ones((1, n), dtype=np.int64), np.ones(1, dtype=np.int64))] + [
        (rng.integers(0, 2, (1, n)), rng.integers(0, 2, 1)) for _ in range(7)]
    return out


def indif_definitions(indifs: dict[str, Callable[[Any, Any], Any]]) -> dict[str, Any]:
    return {name: fhe.function({"masked_digits": "encrypted", "offset_digits": "clear"})(fn)
            for name, fn in indifs.items()}


def compile_private_selection(shape: PrivateSelectionShape, c: list[int],
                              p_error: float) -> fhe.Module:
    """Compile the module (``module.indif_<s>`` per chunk size, ``module.add``, and
    ``module.select`` and/or the batched round's functions, ``batch_names``) for the selection
    thresholds ``c`` (``crypto.tfhe_permute_and_flip.thresholds``)."""
    ensure_tag_stack()
    indifs, add, select, select_statuses = _functions(shape, c)
    indif_defs = indif_definitions(indifs)
    add_def = fhe.function({"x": "encrypted", "y": "encrypted"})(add)
    definitions = {**indif_defs, "add": add_def}
    s = shape.selection.candidates
    wires = set()
    sources = [fhe.Output(d, 0) for d in indif_defs.values()] + [fhe.Output(add_def, 0)]
    targets = [fhe.Input(add_def, 0), fhe.Input(add_def, 1)]
    if shape.single:
        definitions["select"] = fhe.function(select_statuses)(select)
        targets += [fhe.Input(definitions["select"], r) for r in range(s)]
    for source in sources:
        for target in targets:
            wires.add(fhe.Wire(source, target))
    if shape.batches is not None:
        batch_defs = _batch_definitions(shape, c)
        definitions.update(batch_defs)
        wires |= _batch_wires(shape.batches, batch_defs, sources)
    module_class = type("PrivateSelection", (), {**definitions,
                                                  "composition": fhe.Wired(wires)})
    compiler = fhe.module()(module_class)

    n = shape.selection.score_bits
    w = shape.selection.random_bits
    pw = shape.selection.priority_bits
    rng = np.random.default_rng(0)
    indif_inputs, add_inputs, _ = score_inputsets(shape.count_bits, shape.chunk_sizes, n, rng,
                                                  shape.widths)
    inputsets: dict[str, Sequence[tuple[Array, ...]]] = {**indif_inputs, "add": add_inputs}
    if shape.single:
        select_inputs = []
        for i in range(10):
            digits = (np.ones((1, s, n), dtype=np.int64) if i == 0
                      else rng.integers(0, 2, (1, s, n)))
            args = clear_arguments(digits, rng.integers(0, 2, s) | (i % 2),
                                   rng.integers(0, 2, (1, s, w)), rng.integers(0, 2, (1, s, w)),
                                   rng.integers(0, 2, (1, s, pw)) if i else np.ones((1, s, pw)))
            select_inputs.append(tuple(args[0][0, r] for r in range(s)) + tuple(args[1:]))
        inputsets["select"] = select_inputs
    if shape.batches is not None:
        inputsets.update(_batch_inputsets(shape, rng))
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None, show_progress=False,
                                      compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile(inputsets, configuration)
