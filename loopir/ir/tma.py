"""Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarriers) as IR calls.

Six intrinsics (sm_90a), each an ``Evaluate`` of a [`Call`][loopir.ir.expr.Call] built here:

* [`mbarrier_init`][loopir.ir.tma.mbarrier_init]``(bar, count)``: a barrier that completes a
  phase when ``count`` threads have arrived and every expected byte has landed;
* [`mbarrier_arrive_expect_tx`][loopir.ir.tma.mbarrier_arrive_expect_tx]``(bar, bytes)``: this
  thread arrives and tells the barrier ``bytes`` more bytes are coming;
* [`mbarrier_arrive`][loopir.ir.tma.mbarrier_arrive]``(bar, count)``: this thread arrives
  ``count`` times (no bytes: a consumer releasing a buffer to its producer);
* [`mbarrier_wait`][loopir.ir.tma.mbarrier_wait]``(bar, phase)``: wait until the phase of
  parity ``phase`` has completed (``mbarrier.try_wait.parity`` in a loop);
* [`tma_load`][loopir.ir.tma.tma_load]``(dst, src, bar, box, swizzle)``: one thread copies a
  box of a global tensor into a shared tile (``cp.async.bulk.tensor``), the bytes counted on
  ``bar``;
* [`setmaxnreg`][loopir.ir.tma.setmaxnreg]``(count, increase)``: the executing warpgroup's
  register budget per thread becomes ``count`` (warp specialization: the producer gives
  registers back, the consumers take them).

``bar`` is a load of one element of a ``shared`` buffer of dtype ``uint64`` (or ``int64``): the
barrier object itself. Sequentially the mbarrier calls do nothing and the copy happens at
``tma_load``; in a thread region the CPU executor also models the barriers (a wait suspends
its thread until the phase completes: warp-specialized kernels need it, whose consumers wait
on a producer with no block barrier between); ``setmaxnreg`` does nothing on the CPU; [`loopir.tensor_intrin.tma`][loopir.tensor_intrin.tma] writes that
meaning and what each call touches, once, for the executor and the analyses alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopir.ir import dtype as dt
from loopir.ir.expr import BufferLoad, Call, ExprLike, IntImm, PrimExpr, convert

__all__ = [
    "MBARRIER_OPS", "TMA_DTYPES", "TMA_OPS", "TMA_SWIZZLES", "is_tma_call", "mbarrier_arrive",
    "mbarrier_arrive_expect_tx", "mbarrier_init", "mbarrier_wait", "setmaxnreg", "tile_box", "tma_box", "tma_bytes",
    "tma_load", "tma_problem", "tma_swizzle",
]  # fmt: skip

#: The mbarrier calls (each names its barrier as its first argument).
MBARRIER_OPS = ("ptx_mbarrier_init", "ptx_mbarrier_arrive_expect_tx", "ptx_mbarrier_wait", "ptx_mbarrier_arrive")
#: Every call of this module.
TMA_OPS = ("ptx_tma_load", *MBARRIER_OPS, "ptx_setmaxnreg")
#: Destination swizzles in bytes (0: none; else ``CU_TENSOR_MAP_SWIZZLE_{32,64,128}B``).
TMA_SWIZZLES = (0, 32, 64, 128)
#: Element types a tensor map can describe (``CUtensorMapDataType``).
TMA_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
              "float16", "bfloat16", "float32", "float64")  # fmt: skip
#: The most elements of a box along one dimension (``cuTensorMapEncodeTiled``'s ``boxDim``).
MAX_BOX = 256
_BARRIER_DTYPES = ("uint64", "int64")
#: The values a constant operand of an mbarrier call may take (PTX: arrival counts up to
#: 2**20 - 1, a transaction count up to 2**20 - 1 bytes per phase, a phase parity 0 or 1).
_RANGES = {"ptx_mbarrier_init": (1, (1 << 20) - 1), "ptx_mbarrier_arrive_expect_tx": (0, (1 << 20) - 1),
           "ptx_mbarrier_wait": (0, 1), "ptx_mbarrier_arrive": (1, (1 << 20) - 1)}  # fmt: skip


def is_tma_call(expr: object) -> bool:
    """Whether ``expr`` is a call of this module (see ``TMA_OPS``)."""
    return isinstance(expr, Call) and expr.op in TMA_OPS


def _checked(call: Call) -> Call:
    problem = tma_problem(call)
    if problem is not None:
        raise TypeError(problem)
    return call


def mbarrier_init(bar: PrimExpr, count: ExprLike) -> Call:
    """``mbarrier.init.shared::cta.b64 [bar], count``: phase 0 completes when ``count``
    threads have arrived and all the bytes announced by ``expect_tx`` have arrived.

    One thread initializes; a block barrier must follow before any other thread uses it (the
    race checker sees the init as a write of ``bar``, the other calls as reads)."""
    return _checked(Call("int32", "ptx_mbarrier_init", (bar, convert(count))))


def mbarrier_arrive_expect_tx(bar: PrimExpr, nbytes: ExprLike) -> Call:
    """``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], nbytes``: this thread arrives and
    the current phase also waits for ``nbytes`` bytes (of the ``tma_load`` calls that name
    ``bar``)."""
    return _checked(Call("int32", "ptx_mbarrier_arrive_expect_tx", (bar, convert(nbytes))))


def mbarrier_arrive(bar: PrimExpr, count: ExprLike = 1) -> Call:
    """``mbarrier.arrive.release.shared::cta.b64 _, [bar], count``: this thread arrives
    ``count`` times on the current phase, its earlier memory accesses released to the threads
    that wait on the phase (a consumer's arrival on an *empty* barrier: its reads of the buffer
    are done)."""
    return _checked(Call("int32", "ptx_mbarrier_arrive", (bar, convert(count))))


def setmaxnreg(count: int, increase: bool) -> Call:
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 count``: the executing warpgroup's registers per
    thread become ``count`` (24 to 256, a multiple of 8); every thread of the warpgroup
    executes it (warp specialization: a producer warpgroup decreases, consumers increase).
    Sequentially it does nothing."""
    return _checked(Call("int32", "ptx_setmaxnreg", (IntImm(count, "int32"), IntImm(int(increase), "int32"))))


def mbarrier_wait(bar: PrimExpr, phase: ExprLike) -> Call:
    """Wait until the phase of parity ``phase`` (0 or 1) of ``bar`` has completed
    (``mbarrier.try_wait.parity`` until it succeeds). The data of the copies counted in that
    phase is then visible to this thread. A barrier used once per loop iteration ``k`` waits
    on ``k % 2``."""
    return _checked(Call("int32", "ptx_mbarrier_wait", (bar, convert(phase))))


def tma_load(dst: PrimExpr, src: PrimExpr, bar: PrimExpr, box: tuple[int, ...], swizzle: int = 0) -> Call:
    """``cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes``: copy the
    box of ``src``'s buffer at ``src``'s indices into the shared tile at ``dst``; the bytes
    (``prod(box) * element size``) complete on ``bar``.

    Sequential meaning (the CPU executor's, exact): for every box index ``b`` (``b[i]`` from 0
    to ``box[i]``), with ``g = src.indices + b``::

        dst_tile[unflatten(tma_swizzle(flat(b)))] = src.buffer[g] if 0 <= g < shape else 0

    Parameters
    ----------
    dst
        The tile's first element: ``S[p..., 0, ..., 0]`` of a compact ``shared`` buffer whose
        last dimensions are ``box``, less leading extents of 1 (``tile_box``: a 2-D tile of a
        4-D box ``(1, 1, rows, cols)``); the tile is ``S[p..., :, ..., :]``.
    src
        ``G[o0, ..., o{n-1}]`` of a ``global`` buffer of rank ``n = len(box)`` (1 to 5), the
        box's origin (any int32 coordinates: elements out of bounds are read as zeros).
    bar
        The mbarrier, ``B[i]`` of a ``shared`` ``uint64`` buffer.
    box
        Elements per dimension, outermost first, each 1 to 256; the innermost times the
        element size a multiple of 16 bytes.
    swizzle
        0, or 32, 64, 128 bytes: the innermost box extent must then be exactly that many bytes
        (16-byte chunks of each 128-byte line XOR its line index, see ``tma_swizzle``).
    """
    args = (dst, src, bar, IntImm(swizzle, "int32"), *(IntImm(int(n), "int32") for n in box))
    return _checked(Call("int32", "ptx_tma_load", args))


def tma_box(call: Call) -> tuple[tuple[int, ...], int]:
    """``(box, swizzle)`` of a well-formed ``ptx_tma_load``."""
    ints = [a.value for a in call.args[3:] if isinstance(a, IntImm)]
    return tuple(ints[1:]), ints[0]


def tma_bytes(call: Call) -> int:
    """The bytes a well-formed ``ptx_tma_load`` brings to its mbarrier: ``prod(box) * element
    size`` (TMA counts the whole box, the zeros read out of bounds too)."""
    box, _ = tma_box(call)
    n = dt.bits(call.args[0].dtype) // 8
    for e in box:
        n *= e
    return n


def tma_swizzle(e: PrimExpr | int, elem_bytes: int, swizzle: int) -> PrimExpr | int:
    """Where TMA stores element ``e`` (in row-major order of the box) of a tile whose first
    element is 1024-byte aligned: byte offset ``o`` goes to ``o ^ ((o >> 7) % (swizzle / 16)) << 4``
    (CuTe's ``Swizzle<log2(swizzle / 16), 4, 3>``), in elements. With 128 and 16-bit elements
    this is [`sw128`][loopir.tensor_intrin.layouts.sw128] on rows of 64."""
    if swizzle == 0:
        return e
    line, chunk, m = 128 // elem_bytes, 16 // elem_bytes, swizzle // 16
    if isinstance(e, int):
        return e ^ (e // line % m * chunk)
    from loopir.ir.op import bitwise_xor

    return bitwise_xor(e, e // line % m * chunk)


def _barrier_problem(what: str, bar: PrimExpr) -> str | None:
    if not (isinstance(bar, BufferLoad) and bar.buffer.scope == "shared" and bar.dtype in _BARRIER_DTYPES):
        return f"{what}: the barrier must be a scalar load of a shared uint64 (or int64) buffer, got {bar}"
    return None


def _int_problem(what: str, e: PrimExpr) -> str | None:
    if not dt.is_int(e.dtype) or dt.lanes(e.dtype) != 1:
        return f"{what} must be a scalar integer, got {e} ({e.dtype})"
    return None


def tile_box(shape: Sequence[PrimExpr], box: Sequence[int]) -> tuple[int, ...] | None:
    """The dimensions of a tile of ``shape`` that a copy of ``box`` fills: ``box`` less the
    fewest leading extents of 1 for it to be ``shape``'s last dimensions (a box over a 4-D
    ``(batch, heads, seq, dim)`` tensor is ``(1, 1, rows, cols)``, its tile ``[rows, cols]``:
    the unit dimensions select, they add no element); None when no such suffix matches."""
    dims = [s.value if isinstance(s, IntImm) else None for s in shape]
    for drop in range(len(box)):
        k = len(box) - drop
        if len(dims) >= k and dims[len(dims) - k:] == list(box[drop:]):
            return tuple(box[drop:])
        if box[drop] != 1:
            return None
    return None


def _dst_problem(dst: PrimExpr, box: list[int]) -> str | None:
    if not (isinstance(dst, BufferLoad) and dst.buffer.scope == "shared" and dt.lanes(dst.dtype) == 1):
        return f"ptx_tma_load: dst must be a scalar load of a shared buffer, got {dst}"
    b = dst.buffer
    tile = tile_box(b.shape, box)
    if b.strides is not None or tile is None:
        return (f"ptx_tma_load: shared buffer {b.name} must be compact with its last {len(box)} dimensions "
                f"equal to the box {tuple(box)} (or less its leading 1s), got shape {tuple(str(s) for s in b.shape)}")
    k = len(tile)
    tail = dst.indices[len(dst.indices) - k:]
    if not all(isinstance(i, IntImm) and i.value == 0 for i in tail):
        return f"ptx_tma_load: dst must be the tile's first element (0 in the box's dimensions), got {dst}"
    return None


def _load_problem(args: tuple[PrimExpr, ...]) -> str | None:
    if len(args) < 5 or not all(isinstance(a, IntImm) for a in args[3:]):
        return f"ptx_tma_load: expected (dst, src, bar, swizzle, box...) with constant swizzle and box, got {args}"
    dst, src, bar = args[:3]
    swizzle, *box = (a.value for a in args[3:] if isinstance(a, IntImm))
    if not 1 <= len(box) <= 5 or not all(1 <= n <= MAX_BOX for n in box):
        return f"ptx_tma_load: the box must have 1 to 5 dimensions of 1 to {MAX_BOX} elements, got {tuple(box)}"
    if not (isinstance(src, BufferLoad) and src.buffer.scope == "global" and len(src.indices) == len(box)):
        return f"ptx_tma_load: src must be a load of a global buffer of rank {len(box)} (the box's), got {src}"
    if (prob := _dst_problem(dst, box) or _barrier_problem("ptx_tma_load", bar)) is not None:
        return prob
    if src.dtype != dst.dtype or src.dtype not in TMA_DTYPES:
        return f"ptx_tma_load: src and dst must have one dtype of {TMA_DTYPES}, got {src.dtype} and {dst.dtype}"
    for i in src.indices:
        if (prob := _int_problem("ptx_tma_load: a box coordinate", i)) is not None:
            return prob
    inner = box[-1] * dt.bits(src.dtype) // 8
    if inner % 16:
        return (f"ptx_tma_load: the box's inner dimension is {inner} bytes ({box[-1]} x {src.dtype}) "
                "of global buffer " f"{src.buffer.name}; TMA needs a multiple of 16 bytes")
    if swizzle not in TMA_SWIZZLES or (swizzle and inner != swizzle):
        return (f"ptx_tma_load: swizzle must be one of {TMA_SWIZZLES} bytes, and a swizzled box's inner "
                f"dimension exactly that many bytes; got swizzle {swizzle} with {inner} bytes")
    return None


def tma_problem(call: Call) -> str | None:
    """Why ``call`` is not a well-formed call of this module (None when it is): the operand
    kinds, scopes, dtypes and constants the builders document."""
    args = call.args
    if call.op == "ptx_tma_load":
        return _load_problem(args)
    if call.op == "ptx_setmaxnreg":
        if len(args) != 2 or not all(isinstance(a, IntImm) for a in args):
            return f"ptx_setmaxnreg: expected constant (count, increase), got {args}"
        n, inc = (a.value for a in args if isinstance(a, IntImm))
        if not 24 <= n <= 256 or n % 8 or inc not in (0, 1):
            return f"ptx_setmaxnreg: the count must be 24 to 256, a multiple of 8, and increase 0 or 1; got {n}, {inc}"
        return None
    if call.op in MBARRIER_OPS:
        what = {"ptx_mbarrier_init": "count", "ptx_mbarrier_arrive_expect_tx": "bytes",
                "ptx_mbarrier_wait": "phase", "ptx_mbarrier_arrive": "count"}[call.op]  # fmt: skip
        if len(args) != 2:
            return f"{call.op}: expected (barrier, {what}), got {len(args)} arguments"
        prob = _barrier_problem(call.op, args[0]) or _int_problem(f"{call.op}: the {what}", args[1])
        lo, hi = _RANGES[call.op]
        if prob is None and isinstance(args[1], IntImm) and not lo <= args[1].value <= hi:
            prob = f"{call.op}: the {what} must be {lo} to {hi}, got {args[1].value}"
        return prob
    return f"{call.op} is not a TMA or mbarrier call"
