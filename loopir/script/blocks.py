"""Blocks of scripts: ``with T.block(name):`` with its axes, predicate, regions, annotations,
allocations and init."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import attrs

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import IntImm, PrimExpr, Var, make_const
from loopir.ir.stmt import Block, BlockRealize, IterKind, IterVar, Stmt
from loopir.script.exprs import is_weak
from loopir.script.namespace import AXIS_KINDS
from loopir.script.regions import infer_regions
from loopir.script.stmts import StmtParser

__all__ = ["BlockParser"]


@dataclass
class _BlockParts:
    """What the directives of one block declared so far."""

    iter_vars: list[IterVar] = field(default_factory=list)
    values: list[PrimExpr] = field(default_factory=list)
    predicate: PrimExpr | None = None
    reads: list[BufferRegion] | None = None
    writes: list[BufferRegion] | None = None
    annotations: dict[str, Any] | None = None
    allocs: list[Buffer] = field(default_factory=list)
    init: Stmt | None = None


class BlockParser(StmtParser):
    """Blocks; see [`StmtParser`][loopir.script.stmts.StmtParser] for the other statements."""

    def block_stmt(self, s: ast.stmt) -> Stmt:
        assert isinstance(s, ast.With)
        call = s.items[0].context_expr
        assert isinstance(call, ast.Call)
        args, _ = self.ev.expect(call, 1, 1)
        name = self.ev.string(args[0], call.args[0], "the block's name")
        parts = _BlockParts()
        with self.ev.scope():
            rest = [x for x in s.body if not self.block_item(x, parts)]
            body = self.body(rest)
        realize = self.make_block(name, parts, body, s)
        return realize

    def make_block(self, name: str, parts: _BlockParts, body: Stmt, node: ast.AST,
                   implicit_root: bool = False) -> BlockRealize:  # fmt: skip
        try:
            block = Block(
                name, parts.iter_vars, parts.reads or (), parts.writes or (), body, parts.init,
                parts.allocs, parts.annotations or {},
            )
            if not implicit_root and (parts.reads is None or parts.writes is None):
                reads, writes = infer_regions(block)
                block = attrs.evolve(
                    block,
                    reads=reads if parts.reads is None else parts.reads,
                    writes=writes if parts.writes is None else parts.writes,
                )
            pred = parts.predicate if parts.predicate is not None else IntImm(1, "bool")
            realize = BlockRealize(parts.values, pred, block)
        except (TypeError, ValueError) as e:
            return self.fail(f"block {name!r}: {e}", node)
        self.src.mark(block, node)
        self.src.mark(realize, node)
        return realize

    # --- the directives at the top of a block -----------------------------------------------
    def block_item(self, x: ast.stmt, parts: _BlockParts) -> bool:
        """Handle ``x`` if it is a directive of the block; False when it is a body statement."""
        if isinstance(x, ast.Assign) and len(x.targets) == 1:
            call = self.ns_call(x.value)
            if call is not None and call[0].startswith("axis."):
                self.axis(x.targets[0], call[0], call[1], parts)
                return True
            if call is not None and call[0] in ("alloc_buffer", "sblock_alloc_buffer"):
                parts.allocs.append(self.alloc_buffer(x, call[1]))
                return True
            return False
        if isinstance(x, ast.With) and len(x.items) == 1:
            call = self.ns_call(x.items[0].context_expr)
            if call is not None and call[0] == "init":
                self.ev.expect(call[1], 0, 0)
                if parts.init is not None:
                    self.fail("a block has one T.init()", x)
                with self.ev.scope():
                    parts.init = self.body(x.body)
                return True
            return False
        if not isinstance(x, ast.Expr):
            return False
        call = self.ns_call(x.value)
        if call is None or call[0] not in ("where", "reads", "writes", "block_attr"):
            return False
        name, node = call
        if name == "where":
            args, _ = self.ev.expect(node, 1, 1)
            if parts.predicate is not None:
                self.fail("a block has one T.where", x)
            parts.predicate = self.ev.to_bool(args[0], node.args[0])
        elif name == "block_attr":
            args, _ = self.ev.expect(node, 1, 1)
            if not isinstance(args[0], dict):
                self.fail("T.block_attr takes a dict", node)
            parts.annotations = {**(parts.annotations or {}), **args[0]}
        else:
            if getattr(parts, name) is not None:
                self.fail(f"a block has one T.{name}", x)
            setattr(parts, name, self.regions(node))
        return True

    def alloc_buffer(self, x: ast.Assign, call: ast.Call) -> Buffer:
        target = x.targets[0]
        if not isinstance(target, ast.Name):
            return self.fail("T.alloc_buffer is assigned to one name", x)
        args, kw = self.ev.expect(call, 1, 2, ("dtype", "scope", "strides", "align", "offset_factor"))
        dtype = args[1] if len(args) > 1 else kw.get("dtype", "float32")
        buf = self.make_buffer(target.id, args[0], dtype, kw.get("scope", "global"), kw.get("strides"),
                               call, "T.alloc_buffer")  # fmt: skip
        self.ev.define(target.id, buf)
        self.src.mark(buf, x)
        return buf

    def regions(self, node: ast.Call) -> list[BufferRegion]:
        """The arguments of ``T.reads`` / ``T.writes``: ``A[i, 0:4]``, ``A`` (all of it), or lists."""
        if node.keywords:
            self.fail(f"{ast.unparse(node.func)} takes no keyword arguments", node)
        out: list[BufferRegion] = []
        todo: list[ast.expr] = list(node.args)
        while todo:
            a = todo.pop(0)
            if isinstance(a, (ast.List, ast.Tuple)):
                todo[:0] = a.elts
            elif isinstance(a, ast.Subscript):
                out.append(self.region(a))
            else:
                buf = self.ev.eval(a)
                if not isinstance(buf, Buffer):
                    self.fail("expected a buffer region such as A[i, 0:4]", a)
                out.append(BufferRegion.full(buf))
        return out

    def region(self, a: ast.Subscript) -> BufferRegion:
        buf = self.ev.eval(a.value)
        if not isinstance(buf, Buffer):
            return self.fail(f"{ast.unparse(a.value)} is not a buffer", a.value)
        idx = self.ev.indices(a.slice)
        if len(idx) != buf.ndim:
            self.fail(f"buffer {buf.name} has {buf.ndim} dimensions, the region gives {len(idx)}", a)
        ranges = []
        for d, (i, n) in enumerate(idx):
            if isinstance(i, slice):
                lo = 0 if i.start is None else i.start
                hi = buf.shape[d] if i.stop is None else i.stop
                assert isinstance(n, ast.Slice)
                ranges.append(self.ev.bounds(lo, hi, n, n.upper))
            else:
                e = self.ev.to_expr(i, n, what="an index")
                ranges.append(Range(e, make_const(1, e.dtype)))
        try:
            return BufferRegion(buf, tuple(ranges))
        except (TypeError, ValueError) as e:
            return self.fail(str(e), a)

    # --- axes -------------------------------------------------------------------------------
    def axis(self, target: ast.expr, name: str, call: ast.Call, parts: _BlockParts) -> None:
        kind = name.split(".", 1)[1]
        if kind == "remap":
            self.remap(target, call, parts)
            return
        if kind not in AXIS_KINDS:
            self.fail(f"T.axis.{kind}: loopir blocks have spatial and reduce axes only "
                      "(T.axis.spatial / T.axis.reduce / T.axis.remap)", call.func)  # fmt: skip
        if not isinstance(target, ast.Name):
            self.fail(f"T.axis.{kind} is assigned to one name", target)
        assert isinstance(target, ast.Name)
        if len(call.args) != 2 or call.keywords:
            self.fail(f"T.axis.{kind} takes a domain and the value bound to the axis", call)
        dom_node, value_node = call.args
        value = self.ev.eval(value_node)
        dom = self.domain(dom_node)
        if is_weak(value):
            value = make_const(value, dom.extent.dtype) if dt.is_int(dom.extent.dtype) else value
        v = self.ev.to_expr(value, value_node, what="the axis' value")
        lo, ext = dom.min, dom.extent
        if isinstance(lo, IntImm) and isinstance(ext, IntImm) and ext.dtype != v.dtype and _is_weak_node(dom_node):
            # a domain written as plain numbers takes the bound value's type
            dom = Range(make_const(lo.value, v.dtype), make_const(ext.value, v.dtype))
        self.add_axis(target.id, dom, AXIS_KINDS[kind], v, target, parts)

    def domain(self, node: ast.expr) -> Range:
        call = self.ns_call(node)
        if call is not None and call[0] == "Range":
            args, _ = self.ev.expect(call[1], 2, 2)
            return self.ev.bounds(args[0], args[1], node, call[1].args[1])
        if isinstance(node, ast.Tuple):
            if len(node.elts) != 2:
                self.fail("an axis domain is an extent or a (begin, end) pair", node)
            lo, hi = self.ev.eval(node.elts[0]), self.ev.eval(node.elts[1])
            return self.ev.bounds(lo, hi, node, node.elts[1])
        ext = self.ev.to_expr(self.ev.eval(node), node, what="an axis extent")
        if not dt.is_int(ext.dtype):
            self.fail(f"an axis extent must be an integer, got {ext} ({ext.dtype})", node)
        return Range(make_const(0, ext.dtype), ext)

    def add_axis(self, name: str, dom: Range, kind: str, value: PrimExpr, node: ast.AST,
                 parts: _BlockParts) -> None:  # fmt: skip
        var = Var(name, value.dtype)
        iv = IterVar(var, dom, IterKind(kind))
        self.src.mark(iv, node)
        parts.iter_vars.append(iv)
        parts.values.append(value)
        self.ev.define(name, var)

    def remap(self, target: ast.expr, call: ast.Call, parts: _BlockParts) -> None:
        args, _ = self.ev.expect(call, 2, 2)
        kinds = self.ev.string(args[0], call.args[0], "T.axis.remap's kinds")
        values = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        if not (len(kinds) == len(values) == len(names)):
            self.fail(f"T.axis.remap: {len(kinds)} kinds, {len(values)} loop variables and "
                      f"{len(names)} names must match", call)  # fmt: skip
        for k, v, n in zip(kinds, values, names):
            if k not in ("S", "R"):
                self.fail(f"T.axis.remap: kind {k!r} is not S (spatial) or R (reduce)", call.args[0])
            if not isinstance(v, Var) or v not in self.loops:
                self.fail(f"T.axis.remap binds loop variables; {v} is not one", call.args[1])
            if not isinstance(n, ast.Name):
                self.fail("T.axis.remap is assigned to plain names", n)
            assert isinstance(n, ast.Name) and isinstance(v, Var)
            self.add_axis(n.id, self.loops[v], AXIS_KINDS[k], v, n, parts)


def _is_weak_node(node: ast.expr) -> bool:
    """Whether the domain was written as a plain number (so it takes the value's dtype)."""
    return isinstance(node, ast.Constant) or (
        isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts)
    )
