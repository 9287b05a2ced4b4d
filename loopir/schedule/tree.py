"""Tree utilities for schedule primitives: find blocks and loops, paths, replacement, names.

Blocks are identified by their (unique) name and loops by their loop Var; both survive the
rebuilds that immutable IR needs, which is what lets handles (BlockRV, LoopRV) outlive a
rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import attrs

from loopir.ir.buffer import Range
from loopir.ir.expr import PrimExpr, Var
from loopir.ir.functor import all_buffers, stmt_fields
from loopir.ir.stmt import Allocate, Block, BlockRealize, For, PrimFunc, SeqStmt, Stmt, seq

Root = PrimFunc | Stmt


def _stmt_child_list(node: Stmt) -> list[Stmt]:
    out: list[Stmt] = []
    for name in stmt_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Stmt):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, Stmt))
    return out


def _stmt_children(node: Stmt) -> Iterator[Stmt]:
    yield from _stmt_child_list(node)


def walk(root: Root) -> Iterator[tuple[Stmt, tuple[Stmt, ...]]]:
    """Yield ``(stmt, ancestors)`` for every statement, pre-order; ancestors outermost first."""
    start = root.body if isinstance(root, PrimFunc) else root
    stack: list[tuple[Stmt, tuple[Stmt, ...]]] = [(start, ())]
    while stack:
        node, anc = stack.pop()
        yield node, anc
        children = _stmt_child_list(node)
        if children:
            # one ancestors tuple for all the children (every primitive walks the function)
            inner = anc + (node,)
            for child in reversed(children):
                stack.append((child, inner))


def find(root: Root, pred: Callable[[Stmt], bool]) -> tuple[Stmt, tuple[Stmt, ...]] | None:
    """The first statement (pre-order) satisfying ``pred``, with its ancestors."""
    for node, anc in walk(root):
        if pred(node):
            return node, anc
    return None


def find_block_realize(root: Root, name: str) -> tuple[BlockRealize, tuple[Stmt, ...]] | None:
    """The BlockRealize of the block called ``name`` and its ancestors, or None."""
    hit = find(root, lambda s: isinstance(s, BlockRealize) and s.block.name == name)
    return hit  # type: ignore[return-value]


def find_loop(root: Root, loop_var: Var) -> tuple[For, tuple[Stmt, ...]] | None:
    """The For whose loop var is ``loop_var`` (identity) and its ancestors, or None."""
    hit = find(root, lambda s: isinstance(s, For) and s.loop_var is loop_var)
    return hit  # type: ignore[return-value]


@attrs.frozen(eq=False)
class Locations:
    """Where every block (by name) and loop (by loop var) of one function is, with its
    ancestors: one walk answers every handle lookup until the function is rewritten."""

    root: Root
    blocks: dict[str, tuple[BlockRealize, tuple[Stmt, ...]]]
    loops: dict[Var, tuple[For, tuple[Stmt, ...]]]
    block_names: frozenset[str]  # of Blocks, realized or not (the root block has no realize)

    @classmethod
    def of(cls, root: Root) -> Locations:
        blocks: dict[str, tuple[BlockRealize, tuple[Stmt, ...]]] = {}
        loops: dict[Var, tuple[For, tuple[Stmt, ...]]] = {}
        names: set[str] = set()
        for node, anc in walk(root):
            if isinstance(node, BlockRealize):
                blocks.setdefault(node.block.name, (node, anc))
            elif isinstance(node, For):
                loops.setdefault(node.loop_var, (node, anc))
            elif isinstance(node, Block):
                names.add(node.name)
        return cls(root, blocks, loops, frozenset(names))


def block_names(root: Root) -> list[str]:
    """Names of all blocks, pre-order."""
    return [s.name for s, _ in walk(root) if isinstance(s, Block)]


def enclosing_loops(ancestors: tuple[Stmt, ...]) -> list[For]:
    """Loops among ``ancestors`` below the innermost enclosing block (outermost first)."""
    out: list[For] = []
    for a in reversed(ancestors):
        if isinstance(a, Block):
            break
        if isinstance(a, For):
            out.append(a)
    out.reverse()
    return out


def enclosing_block(ancestors: tuple[Stmt, ...]) -> Block | None:
    """The innermost Block among ``ancestors``."""
    for a in reversed(ancestors):
        if isinstance(a, Block):
            return a
    return None


class _Replace:
    """Replace one statement (by identity) and rebuild the path above it."""

    def __init__(self, old: Stmt, new: Stmt | None) -> None:
        self.old = old
        self.new = new
        self.done = False

    def visit(self, node: Stmt) -> Stmt | None:
        if node is self.old:
            self.done = True
            return self.new
        changes: dict[str, Any] = {}
        for name in stmt_fields(type(node)):  # (the other fields hold no statement)
            value = getattr(node, name)
            if isinstance(value, Stmt):
                nv = self.visit(value)
                if nv is not value:
                    if nv is None:
                        if name in ("else_case", "init"):
                            changes[name] = None
                            continue
                        raise ValueError(f"cannot remove the only statement of {type(node).__name__}.{name}")
                    changes[name] = nv
            elif isinstance(value, tuple) and value and isinstance(value[0], Stmt):
                items = [self.visit(v) for v in value]
                if any(a is not b for a, b in zip(items, value)):
                    if isinstance(node, SeqStmt):
                        return seq(*items) if any(i is not None for i in items) else None
                    changes[name] = tuple(i for i in items if i is not None)
            if self.done and changes:
                break
        if not changes:
            return node
        rebuilt: Stmt = attrs.evolve(cast(Any, node), **changes)  # every Stmt class is attrs
        return rebuilt


def replace(func: PrimFunc, old: Stmt, new: Stmt | None) -> PrimFunc:
    """``func`` with statement ``old`` (identity) replaced by ``new`` (None removes it)."""
    r = _Replace(old, new)
    body = r.visit(func.body)
    if not r.done:
        raise ValueError("statement to replace is not in the function")
    if body is None:
        raise ValueError("cannot remove the whole function body")
    return func.with_body(body)


def fresh_name(func: PrimFunc, base: str, taken: set[str] | None = None) -> str:
    """``base`` or ``base_1``, ``base_2``...: unique among block and buffer names of ``func``."""
    used = set(block_names(func)) | {b.name for b in all_buffers(func)} | (taken or set())
    if base not in used:
        return base
    k = 1
    while f"{base}_{k}" in used:
        k += 1
    return f"{base}_{k}"


# ------------------------------------------------------------------------------------------
# Analysis helpers shared by the loop primitives
# ------------------------------------------------------------------------------------------


def loop_ranges(ancestors: tuple[Stmt, ...]) -> dict[Var, Range]:
    """Ranges of every loop var and block iter var defined by ``ancestors``."""
    out: dict[Var, Range] = {}
    for a in ancestors:
        if isinstance(a, For):
            out[a.loop_var] = Range(a.min, a.extent)
        elif isinstance(a, Block):
            for iv in a.iter_vars:
                out[iv.var] = iv.dom
    return out


def simplify(e: PrimExpr, ranges: dict[Var, Range] | None = None) -> PrimExpr:
    """Simplify ``e`` knowing the ranges of some variables (``loopir.arith``)."""
    from loopir import arith

    return arith.simplify(e, ranges)


def can_prove(cond: PrimExpr, ranges: dict[Var, Range] | None = None) -> bool:
    """Whether ``cond`` is provably true under ``ranges`` (False when unsure)."""
    from loopir import arith

    return bool(arith.can_prove(cond, ranges))


def is_true(e: PrimExpr) -> bool:
    from loopir.ir.expr import IntImm

    return isinstance(e, IntImm) and e.dtype == "bool" and e.value == 1


def append_predicate(stmt: Stmt, pred: PrimExpr) -> Stmt:
    """Guard every outermost block realize in ``stmt`` by ``pred`` (conjoined).

    Statements outside any block (plain stores or evaluates) are wrapped in an IfThenElse, so
    the guard is never lost whatever the IR looks like.
    """
    from loopir.ir.stmt import IfThenElse

    if isinstance(stmt, BlockRealize):
        new = pred if is_true(stmt.predicate) else stmt.predicate & pred
        return attrs.evolve(stmt, predicate=new)
    if isinstance(stmt, (For, Allocate)):
        return attrs.evolve(stmt, body=append_predicate(stmt.body, pred))
    if isinstance(stmt, SeqStmt):
        return seq(*(append_predicate(s, pred) for s in stmt.seq))
    if isinstance(stmt, IfThenElse):
        return attrs.evolve(
            stmt,
            then_case=append_predicate(stmt.then_case, pred),
            else_case=None if stmt.else_case is None else append_predicate(stmt.else_case, pred),
        )
    return IfThenElse(pred, stmt)


def simplify_bindings(stmt: Stmt, ranges: dict[Var, Range]) -> Stmt:
    """Simplify the bindings and predicates of every block realize in ``stmt``.

    ``ranges`` holds the loops and iter vars enclosing ``stmt``; those defined inside are added
    on the way down, so ``i_0 * 8 + i_1`` style bindings simplify with full knowledge.
    """
    from loopir.ir.functor import Mutator

    env = dict(ranges)

    class _Simplify(Mutator):
        def visit(self, node: Any) -> Any:
            # Only block realizes change, and no expression, region or iter var holds one:
            # walking loop bounds and block regions would return them unchanged.
            if not isinstance(node, Stmt):
                return node
            return super().visit(node)

        def visit_For(self, node: For) -> Stmt:
            env[node.loop_var] = Range(node.min, node.extent)
            try:
                out: Stmt = self.generic_visit(node)
                return out
            finally:
                env.pop(node.loop_var, None)

        def visit_BlockRealize(self, node: BlockRealize) -> Stmt:
            values = tuple(simplify(v, env) for v in node.iter_values)
            pred = simplify(node.predicate, env)
            for iv in node.block.iter_vars:
                env[iv.var] = iv.dom
            try:
                block = self.generic_visit(node.block)
            finally:
                for iv in node.block.iter_vars:
                    env.pop(iv.var, None)
            return attrs.evolve(node, iter_values=values, predicate=pred, block=block)

        # Expressions elsewhere are left exactly as written.
        def visit_BufferStore(self, node: Stmt) -> Stmt:
            return node

        def visit_Evaluate(self, node: Stmt) -> Stmt:
            return node

    result: Stmt = _Simplify().visit(stmt)
    return result


def child_blocks(root: Stmt) -> list[BlockRealize]:
    """Block realizes directly below ``root`` (not nested inside another block), in order."""
    out: list[BlockRealize] = []
    stack = list(reversed(list(_stmt_children(root))))
    while stack:
        node = stack.pop()
        if isinstance(node, BlockRealize):
            out.append(node)
            continue
        stack.extend(reversed(list(_stmt_children(node))))
    return out


def replace_in(root: Stmt, old: Stmt, new: Stmt) -> Stmt:
    """``root`` with statement ``old`` (identity) replaced by ``new``: :func:`replace` for a
    subtree (a block or loop nest being rebuilt before it goes back into the function)."""
    r = _Replace(old, new)
    out = r.visit(root)
    if not r.done or out is None:
        raise ValueError("statement to replace is not in the subtree")
    return out
