"""One noise for both servers' views: Primitive 1's release with a noise neither server knows.

Design note
-----------
**Construction.** Per released cell the noise is Z = sum_j w_j (a_j xor b_j) - sum_j w_j / 2
over K bit positions with public weights w_j (:class:`dp.joint_noise_accounting.JointNoiseShape`).
The key server (KS) draws a_j offline, before any data, from ``secrets`` and encrypts them;
the compute server (CS) draws b_j from ``secrets`` and never shows them. With b_j clear,

    w_j (a_j xor b_j) = w_j b_j + (w_j (1 - 2 b_j)) Enc(a_j),

so the CS adds sum_j s_j Enc(a_j) (s_j = +-w_j, clear) inside the P1 circuit and folds
sum_j w_j b_j - sum_j w_j / 2 into P1's clear offset (``crypto.aggregation.release_offset``,
in place of its own Gaussian draw). The circuit stays leveled: additions and clear
multiplications, no bootstrap, no evaluation keys. The KS decrypts and publishes the centred
residue (``decode_release``) **without adding noise of its own**.

**Why each view is exactly the shape's law.** For fixed b, a_j xor b_j is a bijection of
a_j, so the KS's uniform a makes (a xor b) uniform on {0,1}^K given the CS's bits; for fixed a
the same holds with b. Z is the same function of a uniform K-bit vector in both cases. The
KS's view is its a, the decryption count + Z (mod 2^k, with P1's fresh bit above) and public
data, so it is a post-processing of count + Z with Z independent of what it holds. The CS's
view is its b, the masks, ciphertexts under the KS's key (semantically secure: computational
DP as for the rest of the protocol) and the published count + Z. Shapes:

* coins (K = n, w_j = 1): Z = Binomial(n, 1/2) - n/2, variance n/4;
* uniforms (n_u groups of w bits, w_j = 2^(j mod w)): each group is the XOR of two w-bit
  values, bit by bit, hence uniform on {0..2^w - 1}; Z is a centred discrete Irwin-Hall sum,
  variance n_u (4^w - 1) / 12. XOR has no carry, so no reduction mod 2^w (no lookup) is
  needed: the additive form (a + b) mod 2^w needs one lookup per uniform, and in the k-bit
  release circuit that lookup did not fit (concrete's compile passed 20 GB at k = 20, w = 7;
  alone, 5-bit lookups ran at 0.28 s each: ``experiments/joint_noise/bench_joint_noise.py``).

**Width.** Negative intermediates (s_j = -w_j) do not widen the circuit: concrete's widths
come from the input set's node ranges, the input set keeps every node below 2^k, and the
run-time arithmetic is modular (mod 2^(k+1)) exactly as P1's mask wrap-around; the compile
checks the width equals ``count_bits``. The only clear-type constraint is that s_j fits the
signed width the input set gave it (it is drawn from the same +-w_j range).

**Cost** (``experiments/joint_noise/bench_joint_noise.py``, 2 shared cores, the servers' plans
at eps 1, ``bench/results/joint_noise.json``): K encrypted bits per released cell, 24 bytes each
compressed; KS draw + encryption ~0.1 ms and CS run ~0.17 ms per bit (leveled; concrete
expands the inputs at run time, about 36 KB a bit, so a call holds at most
``JOINT_MAX_BITS_PER_CALL`` = 32,768 bits, the plan's cap: 256 cells x 252 bits peaked at
2.8 GB in one call, two concurrent calls of 128 cells x 256 bits at 2.5 GB). Per released
cell against the two-noise release of the same cells: online x44-58, offline x90-445 (x2.2-2.6 for
noisy-greedy's split release, whose fallback's Gaussians are drawn too), per-count variance
x0.50-0.62 (Fed-Heart-Disease's 1-way: 2046 against 2 sigma^2 = 3944). Coins would need
K = n ~ 4 sigma^2: 7,892 bits per 1-way count, x2574 of P1's run (measured with coins
and uniforms side by side), against 120 bits for 24 XOR-shared 5-bit uniforms at 1.04
sigma^2. Compile and keys are free (no evaluation keys; the circuit's shape is fixed per
session).

**Where a bit's time goes** (``experiments/encryption_cost/bench_encryption_cost.py``, and ``perf
record`` on each side): not in the arithmetic, which is about 1% of the compute server's
run. Each bit is one LWE ciphertext of 1,537 64-bit words (k = 20, p_error 2^-40), sent
compressed as a seed and a body. The key server expands the seed into the mask to encrypt,
the compute server expands it again to compute, and concrete-python's wheel does both with
its software AES generator: about 60% of either side's time (94 and 98 us a bit at 256
cells x 128 bits). So every construction with one ciphertext a bit costs the same per bit;
it gets cheaper only with fewer bits a count, or with a concrete built with its AES-NI
generator. Per released cell the joint release handles K + n ciphertexts where plain P1
handles the n clients' (4 clients, K = 120-256 bits): 31-65x P1's work, whatever is
computed on them. Full ciphertexts (the mask sent) would save the compute server's
expansion at ~500x the bytes. The key server's compressed encryption also draws every seed
from the CPU's RDSEED, which the cores share: two encrypting processes ran no faster than
one (x1.00; full ciphertexts x1.79 in the same run), so its offline job does not speed up
with ``--workers`` on this project's machines.

**When it fits.** The servers' rule is ``params.noise_rules.joint_shape_for``:
each release takes the shape of :func:`choose_shape` (the fewest bits among the smallest
matching coins and the matching uniforms within 10% of the coins' variance; its M-fold
conditioned Renyi curve below a * rho_R at the orders of the session's conversion, the
session's eps confirmed end to end), searched within that rule's caps, and is joint when the
shape lowers the published variance, its conditioning mass stays within 1% of delta, the count
width has room (max_rows + span/2 < 2^(k-1): no tail, |Z| <= span/2 always) and a chunk's
encrypted bits stay within 65,536. One circuit serves every release of a session, so its
``coins`` width is the widest release's K (narrower ones leave zero weights). Cells of one
chunk may carry different shapes (noisy-greedy's split 2-way release, one shape per pair
size: :func:`joint_operands`); each cell's bits and weights are its own, so the argument
above holds cell by cell: every count carries exactly its own shape given either server's
bits.

>>> shape = JointNoiseShape(uniforms=2, bits=2)
>>> ks = np.array([[1, 0, 1, 1]]); cs = np.array([[1, 1, 0, 0]])
>>> joint_noise_plaintext(shape, ks, cs).tolist()  # (0 + 2*1) + (1 + 2*1) - 3
[2]
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import ensure_tag_stack
from feddpsyn.crypto.aggregation import release_offset
from feddpsyn.dp.joint_noise_accounting import (
    JointNoiseShape,
    cheapest_uniforms,
    orders_for,
    smallest_coins,
)

__all__ = ["JointNoiseShape", "compile_joint_release", "columns_for", "padded_weights",
           "draw_bits", "signed_weights",
           "joint_offset", "joint_operands", "encrypt_key_server_bits", "joint_noise_plaintext",
           "joint_release_plaintext", "check_room", "choose_shape", "COINS_ARGUMENT"]

Array = np.ndarray[Any, Any]

# The KS's encrypted bits follow the n client inputs in the circuit's signature.
COINS_ARGUMENT = "coins"
# A uniforms shape is chosen over coins only within this factor of the coins' variance.
VARIANCE_SLACK = Fraction(11, 10)


def _release_function(n_clients: int) -> Callable[..., Any]:
    # concrete traces by calling with keyword arguments named after the signature.
    def release(**kwargs: Any) -> Any:
        total = kwargs["m0"]
        for i in range(1, n_clients):
            total = total + kwargs[f"m{i}"]
        noise = np.sum(kwargs[COINS_ARGUMENT] * kwargs["weights"], axis=1)
        return total * kwargs["select"] + kwargs["offset"] + noise

    names = [f"m{i}" for i in range(n_clients)] + [COINS_ARGUMENT, "weights", "select",
                                                   "offset"]
    release.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names])
    return release


def compile_joint_release(n_clients: int, chunk_cells: int, count_bits: int,
                          shapes: JointNoiseShape | Sequence[JointNoiseShape],
                          p_error: float, compress_inputs: bool = True) -> fhe.Circuit:
    """P1 over ``chunk_cells`` cells plus a joint noise of any of ``shapes`` on every cell.

    Inputs: m0..m{n-1} (encrypted masked vectors), ``coins`` (encrypted KS bits,
    chunk_cells x :func:`columns_for` ``shapes``), ``weights`` (clear s_j = +-w_j,
    :func:`signed_weights`, zero past a shape's own K and on a two-server release),
    ``select`` and ``offset`` (clear, :func:`joint_offset` or ``release_offset``). One circuit
    serves every release of a session: a shape narrower than the widest leaves its extra
    columns at weight 0. ``compress_inputs`` False only to measure what the compression
    costs (``experiments/encryption_cost/bench_encryption_cost.py``): the servers always
    compress, since a full ciphertext is ~500x the seeded one."""
    shapes = [shapes] if isinstance(shapes, JointNoiseShape) else list(shapes)
    if n_clients < 1:
        raise ValueError("need at least one client")
    if not shapes:
        raise ValueError("need at least one shape")
    span = max(s.span for s in shapes)
    top_weight = max(max(s.weights()) for s in shapes)
    columns = columns_for(shapes)
    if span >= 1 << (count_bits - 1):
        raise ValueError("the noise's span does not fit the count width")
    ensure_tag_stack()
    encryption = {f"m{i}": "encrypted" for i in range(n_clients)}
    encryption.update({COINS_ARGUMENT: "encrypted", "weights": "clear", "select": "clear",
                       "offset": "clear"})
    compiler = fhe.Compiler(_release_function(n_clients), encryption)
    widest = max(shapes, key=lambda s: s.span)
    cells = np.zeros(chunk_cells, dtype=np.int64)
    zero_bits = np.zeros((chunk_cells, columns), dtype=np.int64)
    one_bits = np.ones((chunk_cells, columns), dtype=np.int64)
    plus = np.tile(np.array(padded_weights(widest, columns), dtype=np.int64), (chunk_cells, 1))
    heavy = np.zeros_like(plus)
    heavy[:, 0] = top_weight
    # Every node of this input set stays in [0, 2^k): the coin sum is at most span, so the
    # counts leave it that room. The weights' extremes +-w_max fix their clear type.
    top = (1 << count_bits) - 1 - span
    share = np.full(chunk_cells, top // n_clients, dtype=np.int64)
    one = np.ones(chunk_cells, dtype=np.int64)
    full = np.full(chunk_cells, top, dtype=np.int64)
    inputset = [
        tuple([cells] * n_clients + [zero_bits, -plus, cells, cells]),
        tuple([share] * n_clients + [one_bits, plus, one, cells]),
        tuple([cells] * n_clients + [one_bits, -plus, one, full + span]),
        tuple([cells] * n_clients + [zero_bits, heavy, one, full]),
        tuple([cells] * n_clients + [zero_bits, -heavy, one, full]),
    ]
    configuration = fhe.Configuration(compress_input_ciphertexts=compress_inputs,
                                      compress_evaluation_keys=True, show_progress=False,
                                      p_error=p_error, global_p_error=None)
    circuit = compiler.compile(inputset, configuration)
    width = circuit.graph.maximum_integer_bit_width()
    if width != count_bits:
        raise RuntimeError(f"joint release width {width} != count_bits {count_bits}")
    if circuit.statistics["programmable_bootstrap_count"]:
        raise RuntimeError("the joint release must be leveled")
    return circuit


def columns_for(shapes: Sequence[JointNoiseShape]) -> int:
    """The circuit's encrypted bits per cell: the widest shape's K."""
    return max(s.ciphertexts for s in shapes)


def padded_weights(shape: JointNoiseShape | None, columns: int) -> list[int]:
    """The shape's public weights, then zeros up to ``columns`` (None: all zeros, a
    two-server release through the joint circuit)."""
    weights = [] if shape is None else shape.weights()
    if len(weights) > columns:
        raise ValueError(f"the shape has {len(weights)} bits, the circuit {columns}")
    return weights + [0] * (columns - len(weights))


def draw_bits(cells: int, shape: JointNoiseShape | int,
              token_bytes: Callable[[int], bytes] = secrets.token_bytes) -> Array:
    """One server's uniform bits (cells x K, K = the shape's bits or a column count) from a
    CSPRNG; a short answer from the source raises (fail closed) instead of padding."""
    columns = shape if isinstance(shape, int) else shape.ciphertexts
    count = cells * columns
    need = -(-count // 8)
    raw = token_bytes(need)
    if len(raw) != need:
        raise RuntimeError("the random source returned too few bytes")
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:count]
    return bits.astype(np.int64).reshape(cells, columns)


def signed_weights(shape: JointNoiseShape, cs_bits: Array,
                   select: Array, columns: int | None = None) -> Array:
    """The CS's clear multipliers w_j (1 - 2 b_j); zero on unselected cells, so padding
    cells carry no noise and spend no coins' worth of anything, and zero past the shape's
    own K up to ``columns`` (:func:`padded_weights`)."""
    columns = shape.ciphertexts if columns is None else columns
    weights = np.array(padded_weights(shape, columns), dtype=np.int64)
    bits = np.asarray(cs_bits, dtype=np.int64)
    if bits.shape[1] < columns:
        bits = np.pad(bits, ((0, 0), (0, columns - bits.shape[1])))
    signs = 1 - 2 * bits[:, :columns]
    out: Array = weights * signs * np.asarray(select, dtype=np.int64)[:, None]
    return out


def joint_offset(shape: JointNoiseShape, mask_sum: Array, cs_bits: Array,
                 select: Array, count_bits: int) -> Array:
    """P1's clear offset with the clear half of the XOR identity, sum_j w_j b_j - span/2, in
    place of the CS's own noise (``crypto.aggregation.release_offset``: mod 2^k, plus a fresh
    uniform multiple of 2^k)."""
    weights = np.array(shape.weights(), dtype=np.int64)
    bits = np.asarray(cs_bits, dtype=np.int64)[:, :shape.ciphertexts]
    clear_part = bits @ weights - shape.span // 2
    return release_offset(mask_sum, clear_part, select, count_bits)


def joint_operands(shapes: Sequence[JointNoiseShape | None], cs_bits: Array,
                   select: Array, columns: int) -> tuple[Array, Array]:
    """The CS's clear operands for a chunk whose cells carry different shapes (one per cell;
    None only on an unselected cell, a padding one: a selected cell without a shape is an
    error): the multipliers w_j (1 - 2 b_j) as
    :func:`signed_weights`, and each cell's clear half sum_j w_j b_j - span/2 (to pass to
    ``release_offset`` as its noise). Cell by cell this is :func:`signed_weights` and
    :func:`joint_offset` of that cell's shape over the first K of its ``columns`` bits, so a
    cell's noise is exactly its shape's law whatever the other cells carry."""
    bits = np.asarray(cs_bits, dtype=np.int64)
    if bits.shape != (len(shapes), columns):
        raise ValueError(f"need {len(shapes)} x {columns} bits, got {bits.shape}")
    chosen = np.asarray(select, dtype=np.int64) != 0
    # Fail closed: a selected cell without a shape would be released with no noise at all.
    shapeless = [cell for cell, shape in enumerate(shapes) if shape is None and chosen[cell]]
    if shapeless:
        raise ValueError(f"cells {shapeless[:8]} are selected but carry no joint noise shape; "
                         "a joint release never runs a count without its noise")
    weights = np.zeros((len(shapes), columns), dtype=np.int64)
    clear = np.zeros(len(shapes), dtype=np.int64)
    rows_of: dict[JointNoiseShape, list[int]] = {}
    for cell, shape in enumerate(shapes):  # bounded: one pass per cell
        if shape is not None:
            rows_of.setdefault(shape, []).append(cell)
    for shape, cells in rows_of.items():  # bounded: one pass per distinct shape
        rows = np.zeros(len(shapes), dtype=bool)
        rows[cells] = True
        rows &= chosen
        w = np.array(padded_weights(shape, columns), dtype=np.int64)
        weights[rows] = w * (1 - 2 * bits[rows])
        clear[rows] = bits[rows] @ w - shape.span // 2
    return weights, clear


def encrypt_key_server_bits(client: Any, n_clients: int, ks_bits: Array) -> fhe.Value:
    """The KS's offline step: encrypt one chunk's bits as the circuit's ``coins`` input.
    ``client`` is the circuit's ``fhe.Client`` (or the circuit): only the KS can do this."""
    args: list[Any] = [None] * (n_clients + 4)
    args[n_clients] = np.asarray(ks_bits, dtype=np.int64)
    return client.encrypt(*args)[n_clients]


def joint_noise_plaintext(shape: JointNoiseShape, ks_bits: Array,
                          cs_bits: Array) -> Array:
    """Z per cell: sum_j w_j (a_j xor b_j) - span/2 (the noise the release carries)."""
    weights = np.array(shape.weights(), dtype=np.int64)
    k = shape.ciphertexts
    both = np.bitwise_xor(np.asarray(ks_bits)[:, :k], np.asarray(cs_bits)[:, :k])
    return (both.astype(np.int64) @ weights) - shape.span // 2


def joint_release_plaintext(masked: list[Array], ks_bits: Array,
                            weights: Array, select: Array, offset: Array,
                            count_bits: int) -> Array:
    """The exact integer model of the circuit, modulo its plaintext space 2^(k+1)."""
    total = np.sum(np.asarray(masked, dtype=np.int64), axis=0)
    noise = np.sum(np.asarray(ks_bits, dtype=np.int64) * weights, axis=1)
    out: Array = (total * np.asarray(select) + np.asarray(offset) + noise) % (1 << (count_bits + 1))
    return out


def check_room(shape: JointNoiseShape, max_rows: int, count_bits: int) -> None:
    """A count plus the noise must decode from k bits: |Z| <= span/2 always (no tail)."""
    if max_rows + shape.span // 2 >= 1 << (count_bits - 1):
        raise ValueError(f"max_rows {max_rows} plus the noise's half-span {shape.span // 2} "
                         f"does not fit {count_bits}-bit counts")


def choose_shape(marginals: int, rho: Fraction, rho_total: Fraction, delta: float,
                 tail: float, *, max_bits: int | None = None, max_span: int | None = None,
                 max_variance: Fraction | None = None) -> JointNoiseShape:
    """The release's shape: the cheapest (fewest encrypted bits) of the smallest matching
    coins and the cheapest matching uniforms within VARIANCE_SLACK of the coins' variance.

    The caps bound the search to what a session could use (a caller's rule would refuse
    anything beyond them anyway): at most ``max_bits`` encrypted bits per count, a span of at
    most ``max_span``, and, when no coin count within ``max_bits`` matches, uniforms of
    variance below ``max_variance``. Raises ValueError when nothing within them matches."""
    orders = orders_for(rho_total, delta)
    coins = None
    if max_span is None or max_span >= 2:
        try:
            coins = smallest_coins(marginals, rho, orders,
                                   n_max=min(x for x in (max_bits, max_span, 1 << 24)
                                             if x is not None))
        except ValueError:
            coins = None
    if coins is not None:
        cap = coins.variance * VARIANCE_SLACK
    elif max_variance is not None:
        cap = Fraction(max_variance)
    else:
        raise ValueError("no coin count within the caps matches the budget")
    try:
        uniforms = cheapest_uniforms(marginals, rho, orders, tail, cap,
                                     max_bits=max_bits, max_span=max_span)
    except ValueError:
        if coins is None:
            raise
        return coins
    if coins is None or uniforms.ciphertexts < coins.ciphertexts:
        return uniforms
    return coins
