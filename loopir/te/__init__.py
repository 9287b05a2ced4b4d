"""The te frontend: describe a computation as tensors, then ``create_prim_func``.

>>> A = placeholder((4, 8), "float32", name="A")
>>> k = reduce_axis(8, name="k")
>>> B = compute((4,), lambda i: sum(A[i, k], axis=k), name="B")
>>> func = create_prim_func([A, B])

What ``te`` offers (the names mirror ``tvm.te``):

| kind | names |
| --- | --- |
| tensors | [`placeholder`][loopir.te.placeholder], [`compute`][loopir.te.compute], [`reduce_axis`][loopir.te.reduce_axis], [`create_prim_func`][loopir.te.create_prim_func], [`var`][loopir.te.var] (a symbolic size) |
| reductions | [`sum`][loopir.te.sum], [`max`][loopir.te.max], [`min`][loopir.te.min] |
| math (elementwise; integers are cast to float32) | [`exp`][loopir.te.exp], [`exp2`][loopir.te.exp2], [`log`][loopir.te.log], [`log2`][loopir.te.log2], [`log1p`][loopir.te.log1p], [`sqrt`][loopir.te.sqrt], [`rsqrt`][loopir.te.rsqrt], [`tanh`][loopir.te.tanh], [`sigmoid`][loopir.te.sigmoid], [`erf`][loopir.te.erf], [`sin`][loopir.te.sin], [`cos`][loopir.te.cos], [`floor`][loopir.te.floor], [`ceil`][loopir.te.ceil], [`round`][loopir.te.round], [`pow`][loopir.te.pow], [`fma`][loopir.te.fma] |
| absolute value | [`abs`][loopir.te.abs], [`fabs`][loopir.te.fabs] |
| integer division | [`floordiv`][loopir.te.floordiv], [`floormod`][loopir.te.floormod], [`ceildiv`][loopir.te.ceildiv] |
| casts and constants | [`cast`][loopir.te.cast], [`const`][loopir.te.const], [`max_value`][loopir.te.max_value], [`min_value`][loopir.te.min_value] |
| conditions | [`if_then_else`][loopir.te.if_then_else], [`all`][loopir.te.all], [`any`][loopir.te.any] |

Python operators build the rest: ``+ - * // %``, ``/`` for floats, comparisons, the bitwise
``^ & | << >> ~`` on integers (``& | ~`` are logical on bool conditions), and
``x.astype(dtype)`` for a cast.
"""
from loopir.ir.expr import Var
from loopir.ir.op import (
    abs,
    cast,
    ceil,
    ceildiv,
    const,
    cos,
    erf,
    exp,
    exp2,
    fabs,
    floor,
    floordiv,
    floormod,
    fma,
    if_then_else,
    log,
    log1p,
    log2,
    pow,
    round,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
)
from loopir.ir.op import all_ as all  # noqa: A004 - mirrors tvm.te.all
from loopir.ir.op import any_ as any  # noqa: A004 - mirrors tvm.te.any
from loopir.te.create import create_prim_func
from loopir.te.tensor import (
    ComputeOp,
    PlaceholderOp,
    Reduce,
    ReduceAxis,
    Tensor,
    comm_reducer_identity,
    compute,
    max,
    max_value,
    min,
    min_value,
    placeholder,
    reduce_axis,
    sum,
)

var = Var
"""A symbolic size: ``n = te.var("n")`` (a [`Var`][loopir.ir.expr.Var], int32 unless a dtype
is given), usable wherever a shape or extent is."""

__all__ = [
    "Tensor", "ComputeOp", "PlaceholderOp", "Reduce", "ReduceAxis", "placeholder", "compute", "reduce_axis",
    "sum", "max", "min", "comm_reducer_identity", "create_prim_func", "if_then_else", "const",
    "var", "cast", "exp", "exp2", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid",
    "erf", "sin", "cos", "floor", "ceil", "round", "fabs", "abs", "pow", "fma", "floordiv",
    "floormod", "ceildiv", "all", "any", "max_value", "min_value",
]  # fmt: skip
