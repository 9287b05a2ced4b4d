"""Write IR as Python, the TVMScript way: ``@T.prim_func`` and ``from_source``.

>>> from loopir.script import T
>>> @T.prim_func
... def scale(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
...     for i in range(8):
...         with T.block("B"):
...             vi = T.axis.spatial(8, i)
...             B[vi] = A[vi] * 2.0
>>> print(scale.script().splitlines()[1])
def scale(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):

A decorated function is parsed, never run: its text is read and turned into a
[`PrimFunc`][loopir.ir.stmt.PrimFunc]. [`from_source`][loopir.script.parser.from_source] parses
text, such as what the printer (``func.script()``) prints: the printer prints what the parser
parses, and ``from_source(f.script())`` is structurally equal to ``f``.

The language is TVM's TVMScript for TensorIR (a script written for TVM 0.27, ``from tvm.script
import tir as T``, parses with its import changed to ``from loopir.script import tir as T``):

- parameters ``A: T.Buffer((M, K), "float32")`` (or ``a: T.handle`` with
  ``A = T.match_buffer(a, (M, K), "float32")``); symbolic sizes are ``T.int32`` names
  (``n = T.int32()`` at the top, or a name first used in a parameter's shape); Python names of
  the enclosing module (``M = 128``) are constants;
- loops ``for i in range(n)``, ``T.serial/parallel/vectorized/unroll(n)`` or ``(begin, end)``,
  ``T.thread_binding(n, thread="threadIdx.x")``, ``for i, j in T.grid(M, N)``;
- blocks ``with T.block("name"):`` (``T.sblock``) with ``T.axis.spatial/reduce(dom, value)`` or
  ``T.axis.remap("SSR", [i, j, k])``, ``T.where``, ``T.reads``/``T.writes`` (inferred when
  absent), ``T.block_attr``, ``T.alloc_buffer``, ``with T.init():``; buffers allocated at the
  top level go to the implicit root block;
- ``if``/``else``, stores ``A[i] = x`` (and ``A[i] += x``), ``T.evaluate``, intrinsic calls
  (``T.exp``, ``T.tvm_storage_sync("shared")``, ``T.loopir.thread_allreduce(...)``: any
  registered intrinsic by name), ``T.if_then_else``/``T.Select``, ``T.Cast``, ``T.min/max``,
  constants ``T.float32(0)``, and lowered IR's ``X = T.allocate(shape, dtype, scope)``.

``loopir.script`` is also callable: ``loopir.script(node)`` prints ``node``
([`loopir.ir.printer.script`][loopir.ir.printer.script]).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from loopir.script.namespace import CONSTRUCTS, I, T, TNamespace
from loopir.script.parser import from_source, prim_func

tir = T
"""The same as ``T``, for ``from loopir.script import tir as T`` (TVM's import, renamed)."""

tirx = T
"""The same as ``T``, for ``from loopir.script import tirx as T`` (TVM 0.27's import, renamed)."""

ir = I
"""The same as ``I``, for ``from loopir.script import ir as I``."""

__all__ = ["T", "I", "tir", "tirx", "ir", "prim_func", "from_source", "CONSTRUCTS", "TNamespace"]


class _CallableModule(types.ModuleType):
    """``loopir.script`` is this package and, called, the printer (``loopir.script(func)``), as
    before the package existed."""

    def __call__(self, node: Any, mark: Any = None) -> str:
        from loopir.ir.printer import script

        return script(node, mark)


sys.modules[__name__].__class__ = _CallableModule
