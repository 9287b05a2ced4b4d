"""Expression-building helpers (the functional counterparts of the Python operators)."""

from __future__ import annotations

from functools import reduce

from loopir.ir import dtype as dt
from loopir.ir.expr import (
    And,
    Call,
    Cast,
    ExprLike,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Not,
    Or,
    PrimExpr,
    Select,
    _match,
    bitwise,
    convert,
    make_const,
)


def const(value: int | float | bool, dtype: str) -> PrimExpr:
    """A constant of ``dtype``: ``const(0, "float16")`` (a FloatImm for float dtypes, an IntImm
    for the others, broadcast for vector dtypes)."""
    return make_const(value, dtype)


def true() -> PrimExpr:
    """The bool constant true."""
    return IntImm(1, "bool")


def false() -> PrimExpr:
    """The bool constant false."""
    return IntImm(0, "bool")


def min_(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``min(a, b)`` as a [`Min`][loopir.ir.expr.Min] node."""
    return Min(*_match(a, b))


def max_(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``max(a, b)`` as a [`Max`][loopir.ir.expr.Max] node."""
    return Max(*_match(a, b))


def floordiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a // b``: integer division rounding toward -inf (Python's ``//``)."""
    return FloorDiv(*_match(a, b))


def floormod(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a % b`` with the sign of ``b`` (Python's ``%``)."""
    return FloorMod(*_match(a, b))


def ceildiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``ceil(a / b)`` for integers, as ``(a + b - 1) // b``."""
    x, y = _match(a, b)
    return FloorDiv(x + y - 1, y)


def cast(value: ExprLike, dtype: str) -> PrimExpr:
    """``value`` converted to ``dtype`` (a [`Cast`][loopir.ir.expr.Cast], or ``value`` itself when
    it already has that dtype); ``x.astype(dtype)`` is the same."""
    v = convert(value)
    d = dt.canonical(dtype)
    return v if v.dtype == d else Cast(d, v)


def if_then_else(cond: ExprLike, t: ExprLike, f: ExprLike) -> PrimExpr:
    """``t if cond else f`` as a [`Select`][loopir.ir.expr.Select]."""
    tv, fv = _match(t, f)
    return Select(convert(cond), tv, fv)


def all_(*conds: ExprLike) -> PrimExpr:
    """Conjunction of ``conds`` (true for none)."""
    items = [convert(c) for c in conds]
    return reduce(And, items) if items else true()


def any_(*conds: ExprLike) -> PrimExpr:
    """Disjunction of ``conds`` (false for none)."""
    items = [convert(c) for c in conds]
    return reduce(Or, items) if items else false()


def not_(cond: ExprLike) -> PrimExpr:
    """The negation of bool ``cond``."""
    return Not(convert(cond))


def call(op: str, *args: ExprLike, dtype: str | None = None) -> PrimExpr:
    """Call intrinsic ``op``; the result dtype defaults to the first argument's."""
    from loopir.ir.expr import INTRINSICS

    cargs = [convert(a) for a in args]
    if len(cargs) > 1 and all(isinstance(a, PrimExpr) for a in cargs):
        # math intrinsics take operands of one type: the first operand's (call('pow', f16, f32)
        # is float16; write the cast yourself for another type)
        first = cargs[0]
        cargs = [first] + [a.astype(first.dtype) if a.dtype != first.dtype else a for a in cargs[1:]]
    spec = INTRINSICS.get(op)
    if dtype is None:
        if spec is not None and spec.result != "same":
            dtype = spec.result
        else:
            dtype = cargs[0].dtype if cargs else "int32"
    return Call(dtype, op, tuple(cargs))


def _math(name: str, x: ExprLike) -> PrimExpr:
    """Call math intrinsic ``name`` on ``x``, cast to float32 unless it is a float."""
    v = convert(x)
    if not dt.is_float(v.dtype):
        v = v.astype("float32")
    return call(name, v)


def exp(x: ExprLike) -> PrimExpr:
    """``e ** x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("exp", x)


def exp2(x: ExprLike) -> PrimExpr:
    """``2 ** x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("exp2", x)


def log(x: ExprLike) -> PrimExpr:
    """The natural logarithm of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("log", x)


def log2(x: ExprLike) -> PrimExpr:
    """The base-2 logarithm of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("log2", x)


def log1p(x: ExprLike) -> PrimExpr:
    """``log(1 + x)``, accurate for small ``x``
    (elementwise; an integer ``x`` is cast to float32)."""
    return _math("log1p", x)


def sqrt(x: ExprLike) -> PrimExpr:
    """The square root of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("sqrt", x)


def rsqrt(x: ExprLike) -> PrimExpr:
    """``1 / sqrt(x)`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("rsqrt", x)


def tanh(x: ExprLike) -> PrimExpr:
    """The hyperbolic tangent of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("tanh", x)


def sigmoid(x: ExprLike) -> PrimExpr:
    """``1 / (1 + exp(-x))`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("sigmoid", x)


def erf(x: ExprLike) -> PrimExpr:
    """The error function of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("erf", x)


def sin(x: ExprLike) -> PrimExpr:
    """The sine of ``x`` (radians) (elementwise; an integer ``x`` is cast to float32)."""
    return _math("sin", x)


def cos(x: ExprLike) -> PrimExpr:
    """The cosine of ``x`` (radians) (elementwise; an integer ``x`` is cast to float32)."""
    return _math("cos", x)


def floor(x: ExprLike) -> PrimExpr:
    """``x`` rounded toward -inf (elementwise; an integer ``x`` is cast to float32)."""
    return _math("floor", x)


def ceil(x: ExprLike) -> PrimExpr:
    """``x`` rounded toward +inf (elementwise; an integer ``x`` is cast to float32)."""
    return _math("ceil", x)


def round(x: ExprLike) -> PrimExpr:  # noqa: A001 - mirrors te.round
    """``x`` rounded to the nearest integer, halves away from zero (C's ``round``)
    (elementwise; an integer ``x`` is cast to float32)."""
    return _math("round", x)


def fabs(x: ExprLike) -> PrimExpr:
    """The absolute value of ``x``, elementwise (integers stay integers)."""
    return call("fabs", convert(x))


def abs(x: ExprLike) -> PrimExpr:  # noqa: A001 - mirrors te.abs
    """The absolute value of ``x`` (the same as [`fabs`][loopir.ir.op.fabs])."""
    return fabs(x)


def pow(x: ExprLike, y: ExprLike) -> PrimExpr:  # noqa: A001
    """``x ** y``, elementwise, in the operands' common dtype."""
    a, b = _match(x, y)
    return call("pow", a, b)


def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> PrimExpr:
    """``a * b + c`` with one rounding (C's ``fma``), in ``a``'s dtype."""
    x, y = _match(a, b)
    x, z = _match(x, c)
    return call("fma", x, y.astype(x.dtype), z)


def storage_sync(scope: str = "shared") -> PrimExpr:
    """A barrier among the threads sharing ``scope`` (``__syncthreads()`` for shared)."""
    from loopir.ir.expr import StringImm

    return Call("int32", "tvm_storage_sync", (StringImm(scope),))


def thread_allreduce(reducer: str, acc: PrimExpr, extent: int) -> PrimExpr:
    """Combine ``acc`` (a load of an element of a thread's ``local`` accumulator: its one
    element, or one per virtual thread after InjectVirtualThread) across the ``extent``
    threads of a ``threadIdx.x`` row with ``reducer`` ("sum", "max", "min"), writing the
    row's total back into that element in every thread of the row.

    Lowered IR only (``LowerCrossThreadReduction`` makes it, for reductions over threadIdx.x
    alone; other thread axes combine through shared memory in IR). Every thread of the block
    must reach it. Over more than 32 threads it synchronizes the block like a barrier (the
    CUDA backend emits warp shuffles and a shared-memory combine across warps between
    barriers); over at most 32 it is warp shuffles alone and orders no memory
    ([`is_block_barrier`][loopir.ir.op.is_block_barrier]). The CPU executor runs it among the
    fibers of a thread region.
    """
    from loopir.ir.expr import BufferLoad, IntImm, StringImm

    if not isinstance(acc, BufferLoad) or acc.buffer.scope != "local":
        raise TypeError(f"thread_allreduce: expected a load of a local buffer, got {acc}")
    return Call("int32", "loopir.thread_allreduce", (StringImm(reducer), acc, IntImm(extent, "int32")))


def is_barrier(expr: object) -> bool:
    """Whether ``expr`` is a call that threads execute together: ``storage_sync`` or a
    ``thread_allreduce`` (every thread of its row must reach it; see
    [`is_block_barrier`][loopir.ir.op.is_block_barrier] for which of them order memory)."""
    return isinstance(expr, Call) and expr.op in ("tvm_storage_sync", "loopir.thread_allreduce")


#: The widest ``thread_allreduce`` that is warp shuffles alone (no shared memory, no barrier).
WARP_ALLREDUCE_MAX = 32


def is_block_barrier(expr: object) -> bool:
    """Whether ``expr`` orders shared memory across the thread block (``__syncthreads()``):
    ``storage_sync``, or a ``thread_allreduce`` over more than a warp (its warps' parts meet in
    shared memory between barriers). A reduction over at most 32 threads is warp shuffles
    only: it exchanges registers, orders no memory access, and emits no barrier, so ThreadSync
    plans the barriers around it that the shared accesses need (one inside a per-row loop of
    warp reductions would stall every warp of the block once per row)."""
    if not is_barrier(expr):
        return False
    assert isinstance(expr, Call)
    if expr.op != "loopir.thread_allreduce":
        return True
    extent = expr.args[2]
    return not (isinstance(extent, IntImm) and extent.value <= WARP_ALLREDUCE_MAX)


def bitwise_and(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a & b`` of integers (TVM's ``tir.bitwise_and``); see
    [`BITWISE_OPS`][loopir.ir.expr.BITWISE_OPS]."""
    return bitwise("bitwise_and", a, b)


def bitwise_or(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a | b`` of integers (TVM's ``tir.bitwise_or``)."""
    return bitwise("bitwise_or", a, b)


def bitwise_xor(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a ^ b`` of integers (TVM's ``tir.bitwise_xor``): XOR swizzles of shared layouts."""
    return bitwise("bitwise_xor", a, b)


def bitwise_not(a: ExprLike) -> PrimExpr:
    """``~a`` of an integer (TVM's ``tir.bitwise_not``)."""
    x = convert(a)
    if not dt.is_int(x.dtype):
        raise TypeError(f"bitwise_not (~) needs an integer operand, got {x.dtype}: {x}")
    return Call(x.dtype, "bitwise_not", (x,))


def shift_left(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a << b`` (TVM's ``tir.shift_left``): ``a * 2**b`` wrapped to the dtype, ``0 <= b <
    bits``."""
    return bitwise("shift_left", a, b)


def shift_right(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a >> b`` (TVM's ``tir.shift_right``): arithmetic for signed values, ``a // 2**b``."""
    return bitwise("shift_right", a, b)


# --------------------------------------------------------------------------------------------
# Tensor cores (sm_80+)
# --------------------------------------------------------------------------------------------

#: Calls that all 32 lanes of a warp execute together (``.sync.aligned`` in PTX).
WARP_COLLECTIVES = ("ptx_ldmatrix", "ptx_mma", "ptx_shfl_xor")
#: Calls that all 128 threads of a warpgroup issue together (sm_90a): ``ptx_wgmma``, its
#: asynchronous issue ``ptx_wgmma_async`` and the wait ``ptx_wgmma_wait``.
WARPGROUP_COLLECTIVES = ("ptx_wgmma", "ptx_wgmma_async", "ptx_wgmma_wait")
#: The calls that issue a ``wgmma`` (the operands ``shape, a, b, c`` alike).
WGMMA_ISSUES = ("ptx_wgmma", "ptx_wgmma_async")
#: Every tensor-core call: the collectives and the per-lane ``mma_fill`` / ``mma_store``.
TENSOR_CORE_OPS = (*WARP_COLLECTIVES, *WARPGROUP_COLLECTIVES, "mma_fill", "mma_store")
#: ``ptx_mma`` shapes.
MMA_SHAPES = ("m16n8k16",)
_FRAGMENT_SCOPES = ("warp", "local")


def is_warp_collective(expr: object) -> bool:
    """Whether ``expr`` is a call that the 32 lanes of a warp execute together
    (``ptx_ldmatrix``, ``ptx_mma``)."""
    return isinstance(expr, Call) and expr.op in WARP_COLLECTIVES


def is_tensor_core_call(expr: object) -> bool:
    """Whether ``expr`` is a tensor-core call (see ``TENSOR_CORE_OPS``)."""
    return isinstance(expr, Call) and expr.op in TENSOR_CORE_OPS


def ptx_ldmatrix(dst: PrimExpr, src: PrimExpr, num: int = 4, trans: bool = False) -> PrimExpr:
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: load ``num`` 8x8 matrices of
    16-bit elements from shared memory into the fragments of a warp (warp-collective).

    Parameters
    ----------
    dst
        This lane's fragment: a load ``W[..., lane, v]`` of a ``warp`` buffer (or ``W[..., v]``
        of a ``local`` one after ``LowerWarpMemory``); the lane receives ``2 * num`` elements
        at ``v, v + 1, ...``: from matrix ``q`` the elements ``2q`` and ``2q + 1``.
    src
        The row this lane supplies: a load ``S[..., r, c]`` of a ``shared`` buffer; the row is
        the 8 elements ``S[..., r, c:c + 8]`` (16 bytes, 16-byte aligned). Lanes ``8q`` to
        ``8q + 7`` supply the rows of matrix ``q``; lanes from ``8 * num`` on supply none.
    num
        1, 2 or 4 matrices.
    trans
        Transpose each matrix: lane ``l`` receives rows ``2 * (l % 4)`` and ``2 * (l % 4) + 1``
        of column ``l // 4`` instead of columns ``2 * (l % 4) + {0, 1}`` of row ``l // 4``.
    """
    call = Call("int32", "ptx_ldmatrix", (IntImm(int(bool(trans)), "bool"), IntImm(num, "int32"), dst, src))
    _raise_if_bad(call)
    return call


def ptx_mma(a: PrimExpr, b: PrimExpr, c: PrimExpr, shape: str = "m16n8k16") -> PrimExpr:
    """``mma.sync.aligned.m16n8k16.row.col``: ``C += A @ B`` on one warp's fragments
    (warp-collective), accumulating in place.

    ``a``, ``b`` and ``c`` are this lane's fragments (loads ``W[..., lane, v]`` of ``warp``
    buffers, or of ``local`` ones after ``LowerWarpMemory``): 8 elements of the 16x16 A, 4 of
    the 16x8 B and 4 of the 16x8 C starting at ``v``, laid out as PTX's fragments
    ([`loopir.tensor_intrin.layouts`][loopir.tensor_intrin.layouts]). A and B are both
    ``float16`` or both ``bfloat16``; C is ``float32``, or ``float16`` with ``float16`` inputs.
    """
    from loopir.ir.expr import StringImm

    call = Call("int32", "ptx_mma", (StringImm(shape), a, b, c))
    _raise_if_bad(call)
    return call


def wgmma_shape(n: int, k: int = 16, trans_b: bool = False) -> str:
    """The ``ptx_wgmma`` shape string of ``N = n`` and ``K = k``: ``"m64n{n}k{k}"``, with
    ``".trans_b"`` for an MN-major B (``imm-trans-b`` 1)."""
    return f"m64n{n}k{k}" + (_TRANS_B if trans_b else "")


_TRANS_B = ".trans_b"


def wgmma_nk(shape: PrimExpr) -> tuple[int, int] | None:
    """``(N, K)`` of a ``ptx_wgmma`` shape argument (None when it is not one of
    ``WGMMA_SHAPES``)."""
    text = getattr(shape, "value", None)
    if text not in WGMMA_SHAPES:
        return None
    n, k = text[4:].removesuffix(_TRANS_B).split("k")
    return int(n), int(k)


def wgmma_trans_b(shape: PrimExpr) -> bool:
    """Whether a ``ptx_wgmma`` shape names an MN-major B (``".trans_b"``)."""
    return str(getattr(shape, "value", "")).endswith(_TRANS_B)


#: K of a K-major operand in shared memory: 16 to 64 (``K / 16`` instructions ``m64nNk16``
#: along one 128-byte swizzle row), or whole 64-column blocks (up to 256, each block a further
#: index along the dimension before the rows).
WGMMA_K_MAJOR_DEPTHS = (16, 32, 48, 64, 128, 192, 256)
#: ``ptx_wgmma`` shapes: ``m64nNkK`` with N a multiple of 16 up to 256 (the accumulator is held
#: as 16 x 16 tiles) and K one of ``WGMMA_K_MAJOR_DEPTHS`` (then one wait); with an MN-major B
#: (``.trans_b``), N a multiple of 64 (whole 128-byte swizzle rows of B) and K a multiple of 16
#: up to 256 (B's rows are along K: the instructions step 16 rows at a time).
WGMMA_SHAPES = (*(wgmma_shape(n, k) for n in range(16, 257, 16) for k in WGMMA_K_MAJOR_DEPTHS),
                *(wgmma_shape(n, k, True) for n in range(64, 257, 64) for k in range(16, 257, 16)))  # fmt: skip


def ptx_wgmma(a: PrimExpr, b: PrimExpr, c: PrimExpr, n: int, k: int = 16, trans_b: bool = False) -> PrimExpr:
    """``k / 16`` instructions ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}`` with both
    operands in shared memory, K-major, through ``SWIZZLE_128B`` descriptors, completed before
    the call returns (fence, issue, commit, wait): one warp's rows ``C += A @ B`` of a
    warpgroup's 64 x n x k step (sm_90a).

    Per warp (the meaning the CPU executor gives it, exact): ``C[i, j] += A[i, kk] * B[j, kk]``
    for the warp's 16 x ``n`` accumulator, ``kk`` = 0 .. k - 1 in order, where

    * ``a`` is ``A_s[..., r, c]``, the first element of a 16 x k tile of a ``shared`` buffer
      stored with the 128-byte swizzle: element ``(i, kk)`` is at row ``r + i``, column
      ``sw128(r + i, sw128(r, c) + kk)``
      ([`sw128`][loopir.tensor_intrin.layouts.sw128]: how the tensor cores read a
      ``SWIZZLE_128B`` tile, the ``transform_layout`` map that stores one so);
    * ``b`` likewise, ``n`` rows: element ``(j, kk)`` of B, stored ``[N, K]`` (K-major);
    * ``k`` past 64 (128, 192, 256: whole 64-column blocks): a K-major tile's columns from 64
      on are further blocks of 64 along the dimension before the rows, element ``(i, kk)`` at
      ``[..., s + kk // 64, r + i, sw128(r + i, kk % 64)]`` of a tile starting at ``[..., s, r,
      0]`` (the descriptor's start address then steps to the next block every 4
      instructions);
    * ``c`` is this lane's fragment ``W[..., t, lane, v]`` (``v`` = 0) of a ``float32`` warp
      buffer: the ``n / 16`` tiles ``t, t + 1, ..`` of the 16 x 16 accumulator layout, one
      after the other along the dimension before the lane (``W[..., t, v]`` of a ``local``
      buffer after ``LowerWarpMemory``).

    Two other operand forms (FlashAttention 3's second GEMM, ``O += P V``):

    * ``a`` from registers: this lane's fragment ``P[..., t, lane, v]`` (``v`` = 0) of a warp
      buffer of the input type, the ``k / 16`` tiles ``t, t + 1, ..`` of the warp's 16 x k rows
      of A, each 16 x 16 tile in the ``MMA_A`` layout (PTX: the A operand as 4 x ``.b32``
      registers per 16-wide K step, the ``mma.m16n8k16`` A fragment per warp): element
      ``(i, kk)`` is ``P[..., t + kk // 16, MMA_A(i, kk % 16)]``;
    * ``trans_b``: B MN-major (``imm-trans-b`` 1; B stored ``[K, N]``, N contiguous), with the
      128-byte swizzle: ``b`` is ``B_s[..., s, r, c]`` and element ``(kk, j)`` of B, with ``x =
      sw128(r, c) + j`` its logical column, is at ``[..., s + x // 64, r + kk, sw128(r + kk, x %
      64)]``: rows of 64 elements along N, K down the rows, each 64 columns of N a further
      block along the dimension before the rows (``[r + kk, sw128(r + kk, x)]`` of a 2-D
      buffer). The tensor cores read it through a descriptor whose leading byte offset is the
      stride of those blocks (CUTLASS's ``Layout_MN_SW128_Atom``).

    ``k`` may then exceed 64 (up to 256, with ``trans_b``): B's K steps are rows, not columns
    of one 128-byte row.

    On the GPU the four warps of a warpgroup issue one instruction for 64 rows: the CUDA
    codegen proves that warp ``w % 4``'s ``a`` is 16 rows below warp 0's, its ``b`` the same,
    and the tiles aligned to the swizzle's 1024-byte atoms; else it refuses the kernel.
    """
    from loopir.ir.expr import StringImm

    call = Call("int32", "ptx_wgmma", (StringImm(wgmma_shape(n, k, trans_b)), a, b, c))
    _raise_if_bad(call)
    return call


def ptx_wgmma_async(a: PrimExpr, b: PrimExpr, c: PrimExpr, n: int, k: int = 16, trans_b: bool = False) -> PrimExpr:
    """[`ptx_wgmma`][loopir.ir.op.ptx_wgmma] issued without its wait: ``wgmma.fence``, the
    ``k / 16`` instructions and ``commit_group`` (one group per call), as CUTLASS's sm90
    mainloops issue them (``warpgroup_arrive``, ``gemm``, ``warpgroup_commit_batch``).

    Its sequential meaning, the CPU executor's, is ``ptx_wgmma``'s: the MMA happens at the
    issue. On the GPU the tensor cores read the shared tiles ``a`` and ``b`` and write the
    accumulator ``c`` until a [`ptx_wgmma_wait`][loopir.ir.op.ptx_wgmma_wait] retires the
    group: the race checker takes the tiles as read from the issue to that wait (and a barrier
    after the wait as what orders a later write of them), and the CUDA emitter refuses code
    that touches ``c`` in between.
    """
    from loopir.ir.expr import StringImm

    call = Call("int32", "ptx_wgmma_async", (StringImm(wgmma_shape(n, k, trans_b)), a, b, c))
    _raise_if_bad(call)
    return call


def ptx_wgmma_wait(pending: int, *retired: PrimExpr) -> PrimExpr:
    """``wgmma.wait_group.sync.aligned pending``: wait until at most ``pending`` of this
    thread's ``wgmma`` groups are in flight (warpgroup-collective).

    ``retired`` are the ``ptx_wgmma_async`` calls (or their operands) whose groups this wait
    completes: the call carries their ``shape, a, b, c`` as its arguments, so that an analysis
    that sees the wait as an ordinary statement sees it read their shared tiles (the in-flight
    read ends here), and the emitter knows which accumulator registers it completes. The CPU
    executor runs it as nothing (the MMAs happened at their issue).
    """
    args: list[PrimExpr] = [IntImm(pending, "int32")]
    for r in retired:
        if not (isinstance(r, Call) and r.op in WGMMA_ISSUES):
            raise TypeError(f"ptx_wgmma_wait: retired must be ptx_wgmma_async calls, got {r}")
        args.extend(r.args)
    call = Call("int32", "ptx_wgmma_wait", tuple(args))
    _raise_if_bad(call)
    return call


def wgmma_wait_groups(call: Call) -> list[tuple[PrimExpr, ...]]:
    """The ``(shape, a, b, c)`` of each group a ``ptx_wgmma_wait`` names."""
    rest = call.args[1:]
    return [tuple(rest[i:i + 4]) for i in range(0, len(rest), 4)]


def mma_fill(dst: PrimExpr, count: int, value: ExprLike) -> PrimExpr:
    """Set ``count`` elements of this lane's fragment, from ``dst`` (``W[..., lane, v]``) on,
    to ``value`` (per lane, not collective): the init of an accumulator fragment."""
    call = Call("int32", "mma_fill", (IntImm(count, "int32"), dst, cast(value, dst.dtype)))
    _raise_if_bad(call)
    return call


#: ``(fragment dtype, tile dtype)`` pairs ``mma_store`` converts between (a float32 accumulator
#: stored as a half-precision result, rounded to nearest as a ``Cast`` is).
STORE_CASTS = frozenset({("float32", "float16"), ("float32", "bfloat16")})


#: Element types ``ptx_shfl_xor`` moves (one 32-bit register per element).
SHFL_DTYPES = ("float32", "int32", "uint32")


def ptx_shfl_xor(dst: PrimExpr, src: PrimExpr, lane_mask: int) -> PrimExpr:
    """``dst = __shfl_xor_sync(0xffffffff, src, lane_mask)``: every lane ``l`` of the warp
    receives lane ``l ^ lane_mask``'s element (warp-collective: the 32 lanes exchange their
    values together, then each writes its own ``dst``; ``dst`` may be ``src``).

    ``dst`` and ``src`` are fragment elements ``W[..., lane, v]`` of ``warp`` buffers (one
    element per lane; ``W[..., v]`` of ``local`` ones after ``LowerWarpMemory``) of one
    32-bit type (``SHFL_DTYPES``); ``lane_mask`` a constant from 1 to 31. Its sequential
    meaning (the CPU executor's, exact): ``dst[..., l, v] = src[..., l ^ lane_mask, v]`` for
    every lane ``l`` at once. Registers only: it orders no memory and is no barrier
    ([`is_block_barrier`][loopir.ir.op.is_block_barrier]); the row reductions over ``mma``
    accumulator fragments combine a quad's lanes with it (``loopir.tensor_intrin.fragment``).
    """
    call = Call("int32", "ptx_shfl_xor", (dst, src, IntImm(lane_mask, "int32")))
    _raise_if_bad(call)
    return call


def mma_store(dst: PrimExpr, src: PrimExpr, rows: int = 16, cols: int = 16) -> PrimExpr:
    """Store this lane's part of an accumulator fragment into a ``rows`` x ``cols`` tile (per
    lane, not collective; the 32 lanes together write the whole tile). A ``float32`` fragment
    may be stored into a ``float16`` or ``bfloat16`` tile: each element is then converted
    (``loopir.ir.op.STORE_CASTS``).

    ``dst`` is the tile's first element, a load ``D[..., r0, c0]`` of a ``shared`` or
    ``global`` buffer (the tile is ``D[..., r0:r0 + rows, c0:c0 + cols]``); ``src`` is the
    lane's fragment ``W[..., lane, v]``: its ``rows * cols / 32`` elements from ``v`` on go to
    their places in the tile by the C fragment layout of the lane ``lane``.
    """
    call = Call("int32", "mma_store", (IntImm(rows, "int32"), IntImm(cols, "int32"), dst, src))
    _raise_if_bad(call)
    return call


def _raise_if_bad(call: Call) -> None:
    problem = tensor_core_problem(call)
    if problem is not None:
        raise TypeError(problem)


def _const_arg(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _fragment_problem(what: str, e: PrimExpr) -> str | None:
    from loopir.ir.expr import BufferLoad

    if not isinstance(e, BufferLoad) or e.buffer.scope not in _FRAGMENT_SCOPES:
        return f"{what} must be a load of a warp (or local) fragment buffer, got {e}"
    b = e.buffer
    if dt.lanes(e.dtype) != 1:
        return f"{what} must be a scalar load (the fragment's first element), got {e}"
    if b.strides is not None:
        return f"{what}: fragment buffer {b.name} must be compact (no explicit strides)"
    if b.scope == "warp":
        lanes = b.shape[-2] if len(b.shape) >= 2 else None
        if not (isinstance(lanes, IntImm) and lanes.value == 32):
            return (
                f"{what}: warp buffer {b.name} must have the lane (extent 32) as its "
                f"second-to-last dimension, got shape ({', '.join(str(x) for x in b.shape)})"
            )
    return None


def _tile_problem(what: str, e: PrimExpr, scopes: tuple[str, ...]) -> str | None:
    from loopir.ir.expr import BufferLoad

    if not isinstance(e, BufferLoad) or e.buffer.scope not in scopes or len(e.indices) < 2:
        return f"{what} must be a load of a {' or '.join(scopes)} buffer of rank >= 2, got {e}"
    if dt.lanes(e.dtype) != 1:
        return f"{what} must be a scalar load (the first element), got {e}"
    st = e.buffer.strides
    if st is not None and not (isinstance(st[-1], IntImm) and st[-1].value == 1):
        return f"{what}: the last dimension of {e.buffer.name} must be contiguous (stride 1)"
    return None


def _wgmma_wait_problem(args: tuple[PrimExpr, ...]) -> str | None:
    pending = _const_arg(args[0]) if args else None
    if pending is None or pending < 0 or args[0].dtype != "int32":
        return f"ptx_wgmma_wait: pending must be a non-negative int32 constant, got {args[:1]}"
    if (len(args) - 1) % 4:
        return f"ptx_wgmma_wait: the retired groups are (shape, a, b, c) each, got {len(args) - 1} arguments"
    for i in range(1, len(args), 4):
        if (prob := _wgmma_problem(args[i:i + 4])) is not None:
            return f"ptx_wgmma_wait: {prob}"
    return None


def _wgmma_problem(args: tuple[PrimExpr, ...]) -> str | None:
    from loopir.ir.expr import BufferLoad

    shape, a, b, c = args
    nk = wgmma_nk(shape)
    if nk is None:
        return (f"ptx_wgmma: shape must be m64nNkK with N a multiple of 16 up to 256 and K 16, 32, 48 "
                f"or 64 (or 128, 192, 256: whole 64-column blocks), or m64nNkK.trans_b with N a multiple of 64 "
                f"and K a multiple of 16 up to 256, got {shape}")
    n, k = nk
    trans_b = wgmma_trans_b(shape)
    in_registers = isinstance(a, BufferLoad) and a.buffer.scope in _FRAGMENT_SCOPES
    if in_registers:
        if (prob := _fragment_problem("ptx_wgmma a", a)) is not None:
            return prob
    if (not in_registers or not trans_b) and k not in WGMMA_K_MAJOR_DEPTHS:
        return (f"ptx_wgmma: K = {k} is not whole 64-column blocks of a K-major operand in shared memory "
                f"(one of {WGMMA_K_MAJOR_DEPTHS}; other K up to 256 need A in registers and B MN-major)")
    for what, e in ((("b", b),) if in_registers else (("a", a), ("b", b))):
        if (prob := _tile_problem(f"ptx_wgmma {what}", e, ("shared",))) is not None:
            return prob
        assert isinstance(e, BufferLoad)
        last = e.buffer.shape[-1]
        if e.buffer.strides is not None or not (isinstance(last, IntImm) and last.value % 64 == 0):
            return (f"ptx_wgmma {what}: shared buffer {e.buffer.name} must be compact with rows of a "
                    f"multiple of 64 elements (the 128-byte swizzle), got shape "
                    f"{tuple(str(x) for x in e.buffer.shape)}")
    if (prob := _fragment_problem("ptx_wgmma c", c)) is not None:
        return prob
    if not (a.dtype == b.dtype and a.dtype in ("float16", "bfloat16") and c.dtype == "float32"):
        return (f"ptx_wgmma: inputs must be float16 or bfloat16 (both alike) and the accumulator "
                f"float32, got {a.dtype}, {b.dtype}, {c.dtype}")
    return None


def wgmma_a_in_registers(call: Call) -> bool:
    """Whether a ``wgmma`` issue takes A from registers (a fragment operand)."""
    from loopir.ir.expr import BufferLoad

    a = call.args[1]
    return isinstance(a, BufferLoad) and a.buffer.scope in _FRAGMENT_SCOPES


def tensor_core_problem(call: Call) -> str | None:
    """Why ``call`` is not a well-formed tensor-core call (None when it is): the argument
    kinds, scopes, dtypes and constants documented by the builders of this module."""
    args = call.args
    prob: str | None
    if call.op == "ptx_ldmatrix":
        trans, num, dst, src = args
        if not (isinstance(trans, IntImm) and trans.dtype == "bool") or _const_arg(num) not in (1, 2, 4):
            return f"ptx_ldmatrix: trans must be a bool constant and num 1, 2 or 4, got {trans}, {num}"
        prob = _fragment_problem("ptx_ldmatrix dst", dst) or _tile_problem("ptx_ldmatrix src", src, ("shared",))
        if prob is None and (dst.dtype != src.dtype or dt.bits(dst.dtype) != 16):
            prob = f"ptx_ldmatrix: dst and src must have one 16-bit dtype, got {dst.dtype} and {src.dtype}"
        return prob
    if call.op == "ptx_mma":
        shape, a, b, c = args
        if getattr(shape, "value", None) not in MMA_SHAPES:
            return f"ptx_mma: shape must be one of {MMA_SHAPES}, got {shape}"
        for what, e in (("a", a), ("b", b), ("c", c)):
            if (prob := _fragment_problem(f"ptx_mma {what}", e)) is not None:
                return prob
        ok_in = a.dtype == b.dtype and a.dtype in ("float16", "bfloat16")
        ok_out = c.dtype == "float32" or (c.dtype == "float16" and a.dtype == "float16")
        if not (ok_in and ok_out):
            return (
                f"ptx_mma: inputs must be float16 or bfloat16 (both alike) and the accumulator "
                f"float32 (or float16 with float16 inputs), got {a.dtype}, {b.dtype}, {c.dtype}"
            )
        return None
    if call.op == "ptx_shfl_xor":
        dst, src, mask = args
        if not (isinstance(mask, IntImm) and 1 <= mask.value < 32):
            return f"ptx_shfl_xor: lane_mask must be a constant from 1 to 31, got {mask}"
        prob = _fragment_problem("ptx_shfl_xor dst", dst) or _fragment_problem("ptx_shfl_xor src", src)
        if prob is None and not (dst.dtype == src.dtype and dst.dtype in SHFL_DTYPES):
            prob = f"ptx_shfl_xor: dst and src must have one of {SHFL_DTYPES}, got {dst.dtype} and {src.dtype}"
        return prob
    if call.op in WGMMA_ISSUES:
        return _wgmma_problem(args)
    if call.op == "ptx_wgmma_wait":
        return _wgmma_wait_problem(args)
    if call.op == "mma_fill":
        count, dst, value = args
        if (_const_arg(count) or 0) < 1:
            return f"mma_fill: count must be a positive constant, got {count}"
        prob = _fragment_problem("mma_fill dst", dst)
        if prob is None and value.dtype != dst.dtype:
            prob = f"mma_fill: the value's dtype {value.dtype} differs from the fragment's {dst.dtype}"
        return prob
    if call.op == "mma_store":
        rows, cols, dst, src = args
        if _const_arg(rows) != 16 or _const_arg(cols) not in (8, 16):
            return f"mma_store: the tile must be 16 x 8 or 16 x 16, got {rows} x {cols}"
        prob = _tile_problem("mma_store dst", dst, ("shared", "global")) or _fragment_problem("mma_store src", src)
        if prob is None and dst.dtype != src.dtype and (src.dtype, dst.dtype) not in STORE_CASTS:
            prob = (f"mma_store: a {src.dtype} fragment cannot be stored as {dst.dtype} (same dtype, or "
                    f"one of the converting stores {sorted(STORE_CASTS)})")
        return prob
    return f"{call.op} is not a tensor-core call"


__all__ = [
    "const", "true", "false", "min_", "max_", "floordiv", "floormod", "ceildiv", "cast",
    "if_then_else", "all_", "any_", "not_", "call", "exp", "exp2", "log", "log2", "log1p",
    "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos", "floor", "ceil", "round", "fabs",
    "abs", "pow", "fma", "storage_sync", "make_const", "thread_allreduce", "is_barrier", "is_block_barrier",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right",
    "WARP_COLLECTIVES", "WARPGROUP_COLLECTIVES", "TENSOR_CORE_OPS", "MMA_SHAPES", "WGMMA_SHAPES",
    "is_warp_collective", "is_tensor_core_call", "ptx_ldmatrix", "ptx_mma", "ptx_wgmma", "ptx_wgmma_async",
    "ptx_wgmma_wait", "ptx_shfl_xor", "SHFL_DTYPES", "wgmma_wait_groups", "WGMMA_ISSUES", "WGMMA_K_MAJOR_DEPTHS", "wgmma_shape", "wgmma_nk", "wgmma_trans_b", "wgmma_a_in_registers", "mma_fill", "mma_store", "tensor_core_problem", "STORE_CASTS",
]  # fmt: skip
