"""Structural equality of IR nodes, modulo the identity of variables and buffers.

Two nodes are structurally equal when they have the same node types, the same data fields
and structurally equal children, where

* variables *defined* by the compared nodes (loop vars, block iter vars, the symbolic shape
  vars of a PrimFunc's parameters) are matched by position of definition;
* buffers defined by the compared nodes (PrimFunc params, block ``alloc_buffers``,
  ``Allocate``) are matched the same way and must agree in shape, dtype, scope and strides;
* *free* variables and buffers (used but not defined inside the compared nodes) are matched
  by a consistent one-to-one mapping when ``map_free_vars`` is true, and must be the very
  same objects otherwise;
* names of variables and buffers are not compared (they are only labels); names of blocks
  and of the function are compared, since schedules address blocks by name;
* annotations and function attributes are compared as values (dicts compare key sets and
  values; expression values compare structurally).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

import attrs

from loopir.errors import StructuralEqualError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import PrimExpr, Var
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    For,
    IterVar,
    PrimFunc,
    Stmt,
)

__all__ = ["structural_equal", "assert_structural_equal"]


class _Mismatch(Exception):
    """First difference found: where (a path of field names) and what."""

    def __init__(self, path: str, reason: str, lhs: Any, rhs: Any) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.lhs = lhs
        self.rhs = rhs


_IR_TYPES = (PrimExpr, Stmt, Buffer, Range, BufferRegion, IterVar, PrimFunc)


class _Comparer:
    """Walks two nodes in lockstep, recording the variable and buffer correspondence."""

    def __init__(self, map_free_vars: bool) -> None:
        self.map_free = map_free_vars
        # id(lhs object) -> rhs object and the reverse, for a one-to-one correspondence.
        self.fwd: dict[int, Any] = {}
        self.bwd: dict[int, Any] = {}
        # keep compared objects alive so that their ids stay unique while comparing
        self._keep: list[Any] = []
        # the IR node pairs being compared, outermost first (for error context)
        self.stack: list[tuple[Any, Any]] = []

    # --- helpers ----------------------------------------------------------------------------
    def fail(self, path: str, reason: str, a: Any, b: Any) -> None:
        if not isinstance(a, _IR_TYPES) and self.stack:
            # Plain data (an int, a dtype string...): show the innermost IR nodes holding it.
            a, b = self.stack[-1]
        raise _Mismatch(path, reason, a, b)

    def bind(self, a: Any, b: Any, path: str, what: str) -> None:
        """Record ``a <-> b``; refuse when either side is already matched to something else."""
        fa = self.fwd.get(id(a))
        fb = self.bwd.get(id(b))
        if fa is None and fb is None:
            self.fwd[id(a)] = b
            self.bwd[id(b)] = a
            self._keep.append((a, b))
            return
        if fa is b and fb is a:
            return
        if fa is not None and fa is not b:
            self.fail(
                path,
                f"{what} {_label(a)} already corresponds to {_label(fa)}, not to {_label(b)}",
                a,
                b,
            )
        self.fail(
            path,
            f"{what} {_label(b)} already corresponds to {_label(fb)}, not to {_label(a)}",
            a,
            b,
        )

    # --- variables and buffers --------------------------------------------------------------
    def define_var(self, a: Var, b: Var, path: str) -> None:
        if a.dtype != b.dtype:
            self.fail(path, f"variable dtype {a.dtype} != {b.dtype}", a, b)
        self.bind(a, b, path, "variable")

    def use_var(self, a: Var, b: Var, path: str) -> None:
        if a.dtype != b.dtype:
            self.fail(path, f"variable dtype {a.dtype} != {b.dtype}", a, b)
        mapped = self.fwd.get(id(a))
        if mapped is not None or id(b) in self.bwd:
            self.bind(a, b, path, "variable")
            return
        if self.map_free:
            self.bind(a, b, path, "free variable")
        elif a is not b:
            self.fail(
                path,
                f"free variables differ: {_label(a)} vs {_label(b)} (map_free_vars=False)",
                a,
                b,
            )

    def buffer_props(self, a: Buffer, b: Buffer, path: str, define_vars: bool) -> None:
        if a.dtype != b.dtype:
            self.fail(path + ".dtype", f"buffer dtype {a.dtype} != {b.dtype}", a, b)
        if a.scope != b.scope:
            self.fail(path + ".scope", f"buffer scope {a.scope} != {b.scope}", a, b)
        if len(a.shape) != len(b.shape):
            self.fail(path + ".shape", f"buffer rank {len(a.shape)} != {len(b.shape)}", a, b)
        for n, (x, y) in enumerate(zip(a.shape, b.shape)):
            self.shape_expr(x, y, f"{path}.shape[{n}]", define_vars)
        if (a.strides is None) != (b.strides is None):
            self.fail(path + ".strides", f"strides {a.strides} vs {b.strides}", a, b)
        if a.strides is not None and b.strides is not None:
            for n, (x, y) in enumerate(zip(a.strides, b.strides)):
                self.shape_expr(x, y, f"{path}.strides[{n}]", define_vars)

    def shape_expr(self, x: PrimExpr, y: PrimExpr, path: str, define_vars: bool) -> None:
        if define_vars and isinstance(x, Var) and isinstance(y, Var):
            self.define_var(x, y, path)
        else:
            self.expr_or_node(x, y, path)

    def define_buffer(self, a: Buffer, b: Buffer, path: str, define_vars: bool = False) -> None:
        self.buffer_props(a, b, path, define_vars)
        self.bind(a, b, path, "buffer")

    def use_buffer(self, a: Buffer, b: Buffer, path: str) -> None:
        mapped = self.fwd.get(id(a))
        if mapped is not None or id(b) in self.bwd:
            self.bind(a, b, path, "buffer")
            return
        if a is b:
            self.bind(a, b, path, "buffer")
            return
        if not self.map_free:
            self.fail(
                path, f"free buffers differ: {_label(a)} vs {_label(b)} (map_free_vars=False)", a, b
            )
        self.buffer_props(a, b, path, define_vars=False)
        self.bind(a, b, path, "free buffer")

    # --- generic walk -----------------------------------------------------------------------
    def value(self, a: Any, b: Any, path: str) -> None:
        """Compare two field values: IR nodes, tuples, mappings or plain data."""
        if isinstance(a, _IR_TYPES) or isinstance(b, _IR_TYPES):
            self.expr_or_node(a, b, path)
        elif isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            if type(a) is not type(b) or len(a) != len(b):
                self.fail(path, f"length {len(a)} != {len(b)}", a, b)
            for n, (x, y) in enumerate(zip(a, b)):
                self.value(x, y, f"{path}[{n}]")
        elif isinstance(a, Mapping) and isinstance(b, Mapping):
            ka, kb = list(a.keys()), list(b.keys())
            if set(ka) != set(kb):
                self.fail(path, f"keys {sorted(map(str, ka))} != {sorted(map(str, kb))}", a, b)
            for k in ka:
                self.value(a[k], b[k], f"{path}[{k!r}]")
        elif isinstance(a, float) and isinstance(b, float):
            if not (a == b or (math.isnan(a) and math.isnan(b))):
                self.fail(path, f"{a!r} != {b!r}", a, b)
        else:
            if type(a) is not type(b) or a != b:
                self.fail(path, f"{a!r} != {b!r}", a, b)

    def expr_or_node(self, a: Any, b: Any, path: str) -> None:
        if type(a) is not type(b):
            self.fail(path, f"node type {type(a).__name__} != {type(b).__name__}", a, b)
        self.stack.append((a, b))
        try:
            self._dispatch(a, b, path)
        finally:
            self.stack.pop()

    def _dispatch(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, Var):
            self.use_var(a, b, path)
        elif isinstance(a, Buffer):
            self.use_buffer(a, b, path)
        elif isinstance(a, For):
            self.for_(a, b, path)
        elif isinstance(a, Block):
            self.block(a, b, path)
        elif isinstance(a, BlockRealize):
            self.fields(a, b, path, ("iter_values", "predicate"))
            self.block(a.block, b.block, path + ".block")
        elif isinstance(a, Allocate):
            self.define_buffer(a.buffer, b.buffer, path + ".buffer")
            self.value(a.body, b.body, path + ".body")
        elif isinstance(a, PrimFunc):
            self.func(a, b, path)
        elif isinstance(a, IterVar):
            self.iter_var(a, b, path)
        else:
            self.fields(a, b, path, None)

    def fields(self, a: Any, b: Any, path: str, only: tuple[str, ...] | None) -> None:
        names = only if only is not None else tuple(f.name for f in attrs.fields(type(a)) if f.init)
        for name in names:
            self.value(getattr(a, name), getattr(b, name), f"{path}.{name}")

    # --- defining nodes ---------------------------------------------------------------------
    def for_(self, a: For, b: For, path: str) -> None:
        self.value(a.kind, b.kind, path + ".kind")
        self.value(a.thread_tag, b.thread_tag, path + ".thread_tag")
        self.value(a.min, b.min, path + ".min")
        self.value(a.extent, b.extent, path + ".extent")
        self.define_var(a.loop_var, b.loop_var, path + ".loop_var")
        self.value(a.annotations, b.annotations, path + ".annotations")
        self.value(a.body, b.body, path + ".body")

    def iter_var(self, a: IterVar, b: IterVar, path: str) -> None:
        self.value(a.kind, b.kind, path + ".kind")
        self.value(a.dom, b.dom, path + ".dom")
        self.define_var(a.var, b.var, path + ".var")

    def block(self, a: Block, b: Block, path: str) -> None:
        self.value(a.name, b.name, path + ".name")
        if len(a.iter_vars) != len(b.iter_vars):
            self.fail(
                path + ".iter_vars", f"{len(a.iter_vars)} iter vars != {len(b.iter_vars)}", a, b
            )
        for n, (x, y) in enumerate(zip(a.iter_vars, b.iter_vars)):
            self.iter_var(x, y, f"{path}.iter_vars[{n}]")
        if len(a.alloc_buffers) != len(b.alloc_buffers):
            self.fail(
                path + ".alloc_buffers",
                f"{len(a.alloc_buffers)} allocated buffers != {len(b.alloc_buffers)}",
                a,
                b,
            )
        for n, (xb, yb) in enumerate(zip(a.alloc_buffers, b.alloc_buffers)):
            self.define_buffer(xb, yb, f"{path}.alloc_buffers[{n}]")
        self.fields(a, b, path, ("reads", "writes", "annotations", "init", "body"))

    def func(self, a: PrimFunc, b: PrimFunc, path: str) -> None:
        self.value(a.name, b.name, path + ".name")
        if len(a.params) != len(b.params):
            self.fail(path + ".params", f"{len(a.params)} params != {len(b.params)}", a, b)
        for n, (x, y) in enumerate(zip(a.params, b.params)):
            # Shape vars of parameters are defined by the function (bound at call time).
            self.define_buffer(x, y, f"{path}.params[{n}]", define_vars=True)
        self.value(a.attrs, b.attrs, path + ".attrs")
        self.value(a.body, b.body, path + ".body")


def _label(x: Any) -> str:
    name = getattr(x, "name", None)
    kind = type(x).__name__
    return f"{kind} {name!r}" if name is not None else kind


def _compare(a: Any, b: Any, map_free_vars: bool) -> _Mismatch | None:
    from loopir.ir.module import IRModule

    if isinstance(a, IRModule) and isinstance(b, IRModule):
        if a.names != b.names:
            return _Mismatch("IRModule", "the modules have different functions", a.names, b.names)
        for name in a.names:
            m = _compare(a[name], b[name], map_free_vars)
            if m is not None:
                return m
        return None
    c = _Comparer(map_free_vars)
    try:
        if isinstance(a, Buffer) and isinstance(b, Buffer):
            # A buffer compared on its own is a definition: its shape vars are its own.
            c.define_buffer(a, b, "Buffer", define_vars=True)
        else:
            c.value(a, b, type(a).__name__)
    except _Mismatch as m:
        return m
    return None


def structural_equal(a: Any, b: Any, map_free_vars: bool = True) -> bool:
    """Whether ``a`` and ``b`` (PrimFunc, Stmt, PrimExpr, Buffer, ...) are structurally equal.

    Parameters
    ----------
    a, b
        The nodes to compare.
    map_free_vars
        Match variables and buffers that the nodes use without defining them by a one-to-one
        mapping (True), or require them to be the same objects (False).

    Returns
    -------
    bool
    """
    return _compare(a, b, map_free_vars) is None


def _show(x: Any) -> str:
    try:
        from loopir.ir.printer import script

        if isinstance(x, _IR_TYPES):
            return script(x)
    except Exception:  # pragma: no cover - showing must never hide the difference
        pass
    return repr(x)


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = True) -> None:
    """Raise [`loopir.errors.StructuralEqualError`][loopir.errors.StructuralEqualError] unless ``a``
    and ``b`` are equal.

    The message gives the path of the first difference, the two differing sub-nodes and a
    unified diff of the two printed scripts.
    """
    m = _compare(a, b, map_free_vars)
    if m is None:
        return
    lhs, rhs = _show(a), _show(b)
    diff = "".join(
        difflib.unified_diff(
            (lhs + "\n").splitlines(True), (rhs + "\n").splitlines(True), "lhs", "rhs", n=2
        )
    )
    if not diff:
        diff = (
            "(the printed scripts are identical: the difference is in the identity of "
            "variables or buffers, or in a detail the printer does not show)"
        )
    sub_l = _indent(_show(m.lhs))
    sub_r = _indent(_show(m.rhs))
    raise StructuralEqualError(
        f"structural mismatch at {m.path}: {m.reason}\n"
        f"  lhs:\n{sub_l}\n  rhs:\n{sub_r}\n"
        f"diff of the printed scripts:\n{diff}"
    )


def _indent(text: str, max_lines: int = 12) -> str:
    lines = text.splitlines()
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"... ({len(lines) - max_lines} more lines)"]
    return "\n".join("    " + line for line in lines)
