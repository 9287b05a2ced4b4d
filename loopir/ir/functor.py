"""Generic visitors and mutators over the IR.

Both walk every ``attrs`` field of a node, so a new node type needs no new traversal code.
Override ``visit_<ClassName>`` to intercept a node type; call ``self.generic_visit(node)``
inside it to continue into the children. A subclass of ``Var`` without its own method goes to
``visit_Var``.

Mutators rebuild a node only when a child changed and otherwise return the very same object,
so ``new is old`` tells whether anything happened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, cast

import attrs

from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import BufferLoad, PrimExpr, Var
from loopir.ir.stmt import Allocate, Block, BufferStore, For, IterVar, PrimFunc, Stmt

Node = Any


@cache
def _child_fields_of(cls: Any) -> tuple[str, ...]:
    """Names of the fields of ``cls`` that may hold IR children (skips plain data)."""
    skip = {"name", "dtype", "op", "kind", "thread_tag", "annotations", "attrs", "lanes",
            "value_str", "scope", "symbol"}  # fmt: skip
    return tuple(f.name for f in attrs.fields(cls) if f.name not in skip and f.init)


# Typed as a plain function: the checker takes IR classes (whose __hash__ is object's, set in
# the class body) for unhashable arguments of the cache wrapper.
_child_fields = cast(Callable[[Any], tuple[str, ...]], _child_fields_of)


# Fields that *define* a variable: mutators keep them (substituting a definition is never
# meant); rename a loop or iter var by rebuilding the node explicitly.
_DEF_FIELDS = {"For": "loop_var", "IterVar": "var"}


def _is_node(value: Any) -> bool:
    return isinstance(value, (PrimExpr, Stmt, Buffer, Range, BufferRegion, IterVar, PrimFunc))


_NO_METHOD: Any = object()
_CACHE_ATTR = "_dispatch_cache"


def _method_for(owner: type, node_type: type) -> Any:
    """The ``visit_<ClassName>`` function of visitor class ``owner`` for ``node_type`` (None:
    ``generic_visit``), cached in ``owner``'s own dict: dispatch runs for every node of every
    pass, and building the name and looking it up each time was a tenth of lowering."""
    cache: dict[type, Any] | None = owner.__dict__.get(_CACHE_ATTR)
    if cache is None:
        cache = {}
        setattr(owner, _CACHE_ATTR, cache)
    got = cache.get(node_type, _NO_METHOD)
    if got is _NO_METHOD:
        got = getattr(owner, "visit_" + node_type.__name__, None)
        if got is None and issubclass(node_type, Var):
            # a Var subclass (te's reduce axes) is a variable to every visitor
            got = getattr(owner, "visit_Var", None)
        cache[node_type] = got
    return got


class Visitor:
    """Read-only traversal. ``visit`` dispatches to ``visit_<ClassName>`` or ``generic_visit``.

    Buffers are visited (``visit_Buffer``) but their shapes are not walked unless
    ``visit_buffer_shapes`` is True.
    """

    visit_buffer_shapes = False

    def visit(self, node: Node) -> None:
        method = _method_for(type(self), type(node))
        if method is not None:
            method(self, node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        if isinstance(node, Buffer) and not self.visit_buffer_shapes:
            return
        for name in _child_fields(type(node)):
            self._visit_value(getattr(node, name))

    def _visit_value(self, value: Any) -> None:
        if isinstance(value, tuple):
            for v in value:
                self._visit_value(v)
        elif _is_node(value):
            self.visit(value)


class Mutator:
    """Rebuilding traversal. ``visit`` returns the (possibly new) node.

    Buffers go through ``visit_Buffer`` (identity by default), so a subclass can redirect
    every load, store and region of one buffer to another by overriding it.
    """

    def visit(self, node: Node) -> Node:
        method = _method_for(type(self), type(node))
        if method is not None:
            return method(self, node)
        return self.generic_visit(node)

    def visit_Buffer(self, node: Buffer) -> Buffer:
        return node

    def generic_visit(self, node: Node) -> Node:
        if isinstance(node, Buffer):
            return node
        changes: dict[str, Any] = {}
        defined = _DEF_FIELDS.get(type(node).__name__)
        for name in _child_fields(type(node)):
            if name == defined:
                continue
            old = getattr(node, name)
            new = self._visit_value(old)
            if new is not old:
                changes[name] = new
        if not changes:
            return node
        return attrs.evolve(node, **changes)

    def _visit_value(self, value: Any) -> Any:
        if isinstance(value, tuple):
            new = tuple(self._visit_value(v) for v in value)
            if all(a is b for a, b in zip(new, value)):
                return value
            return new
        if _is_node(value):
            return self.visit(value)
        return value


class _Substitute(Mutator):
    def __init__(self, vmap: Mapping[Var, PrimExpr]) -> None:
        self.vmap = vmap

    def visit_Var(self, node: Var) -> PrimExpr:
        return self.vmap.get(node, node)


def substitute(node: Node, vmap: Mapping[Var, PrimExpr] | Callable[[Var], PrimExpr | None]) -> Node:
    """Replace variables in ``node`` by expressions (a dict, or a function returning None to keep)."""
    if callable(vmap) and not isinstance(vmap, Mapping):
        fn = vmap

        class _FnSub(Mutator):
            def visit_Var(self, v: Var) -> PrimExpr:
                r = fn(v)
                return v if r is None else r

        return _FnSub().visit(node)
    if not vmap:
        return node
    return _Substitute(vmap).visit(node)


class _PostOrder(Visitor):
    def __init__(self, fn: Callable[[Node], None]) -> None:
        self.fn = fn

    def visit(self, node: Node) -> None:
        self.generic_visit(node)
        self.fn(node)


def post_order_visit(node: Node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""
    _PostOrder(fn).visit(node)


def _gather_vars(value: Any, seen: dict[Var, None]) -> None:
    # post-order, as post_order_visit: a Var subclass's fields (a reduce axis's domain) first
    if isinstance(value, tuple):
        for v in value:
            _gather_vars(v, seen)
    elif _is_node(value) and not isinstance(value, Buffer):
        for name in _child_fields(type(value)):
            _gather_vars(getattr(value, name), seen)
        if isinstance(value, Var):
            seen.setdefault(value, None)


def collect_vars(node: Node) -> list[Var]:
    """Variables used in ``node`` (in first-use order, without duplicates; buffer shapes are not
    walked, as for every [`Visitor`][loopir.ir.functor.Visitor])."""
    seen: dict[Var, None] = {}
    _gather_vars(node, seen)
    return list(seen)


def uses_var(node: Node, pred: Callable[[Var], bool]) -> bool:
    """Whether any variable in ``node`` satisfies ``pred``."""
    return any(pred(v) for v in collect_vars(node))


def touches_buffer(node: Node, buffer: Buffer) -> bool:
    """Whether ``node`` loads or stores ``buffer`` (compared by identity)."""
    found = False

    def visit(n: Node) -> None:
        nonlocal found
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer is buffer:
            found = True

    post_order_visit(node, visit)
    return found


def all_buffers(func: PrimFunc) -> list[Buffer]:
    """``func``'s parameter buffers, then the buffers its blocks and Allocates allocate."""
    out: list[Buffer] = list(func.params)

    def visit(n: Node) -> None:
        if isinstance(n, Block):
            out.extend(n.alloc_buffers)
        elif isinstance(n, Allocate):
            out.append(n.buffer)

    post_order_visit(func.body, visit)
    return out


class _FreshLoops(Mutator):
    def __init__(self) -> None:
        self.buffers: dict[int, tuple[Buffer, Buffer]] = {}  # id(old) -> (old, new)

    def visit_For(self, node: For) -> Stmt:
        new = Var(node.loop_var.name, node.loop_var.dtype)
        body = self.visit(substitute(node.body, {node.loop_var: new}))
        return attrs.evolve(node, loop_var=new, body=body)

    def visit_Allocate(self, node: Allocate) -> Stmt:
        # a buffer allocated in the copy is the copy's own (one allocation per Buffer object)
        self.buffers[id(node.buffer)] = (node.buffer, attrs.evolve(node.buffer))
        out: Stmt = self.generic_visit(node)
        return out

    def visit_Buffer(self, node: Buffer) -> Buffer:
        hit = self.buffers.get(id(node))
        return hit[1] if hit is not None and hit[0] is node else node


def fresh_loop_vars(stmt: Stmt) -> Stmt:
    """``stmt`` with a new Var for each of its loops and a new Buffer for each of its
    allocations: a copy that can sit next to the original (each loop defines its own Var, each
    Allocate its own Buffer; ``loopir.verify`` rejects one Var defined twice, and a script
    reads two allocations as two buffers)."""
    out: Stmt = _FreshLoops().visit(stmt)
    return out
