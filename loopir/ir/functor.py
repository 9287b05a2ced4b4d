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
from typing import Any, cast, get_args, get_type_hints

import attrs

from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import BinaryOp, BufferLoad, PrimExpr, Var
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


def _holds_stmt(tp: Any) -> bool:
    if isinstance(tp, type):
        return issubclass(tp, Stmt)
    return any(_holds_stmt(a) for a in get_args(tp))


@cache
def _stmt_fields_of(cls: Any) -> tuple[str, ...]:
    """The child fields of ``cls`` whose declared type can hold a statement (a statement
    walk skips the others: loop bounds, indices, regions); all of them when the annotations
    cannot be resolved."""
    try:
        hints = get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: take every field
        return _child_fields(cls)
    return tuple(name for name in _child_fields(cls) if name not in hints or _holds_stmt(hints[name]))


stmt_fields = cast(Callable[[Any], tuple[str, ...]], _stmt_fields_of)


# Fields that *define* a variable: mutators keep them (substituting a definition is never
# meant); rename a loop or iter var by rebuilding the node explicitly.
_DEF_FIELDS = {"For": "loop_var", "IterVar": "var"}


_NODE_BASES = (PrimExpr, Stmt, Buffer, Range, BufferRegion, IterVar, PrimFunc)


def _is_node(value: Any) -> bool:
    return isinstance(value, _NODE_BASES)


# What a field value of each type is to a traversal (keyed by the value's type: an isinstance
# test against seven IR bases, per field of every node of every pass, was the largest single
# cost of the generic walks).
_LEAF, _NODE, _TUPLE = 0, 1, 2
_KINDS: dict[type, int] = {}


def _kind(t: type) -> int:
    k = _KINDS.get(t)
    if k is None:
        k = _TUPLE if issubclass(t, tuple) else _NODE if issubclass(t, _NODE_BASES) else _LEAF
        _KINDS[t] = k
    return k


# Node types whose children are exactly the expressions ``a`` and ``b``, built as ``cls(a, b)``
# (every BinaryOp: most nodes of an index expression); the walks take them without the field
# loop.
_BINARY: dict[type, bool] = {}


def _is_binary(t: type) -> bool:
    got = _BINARY.get(t)
    if got is None:
        got = _BINARY[t] = (
            issubclass(t, BinaryOp) and _child_fields(t) == ("a", "b")
            and _init_names(t) == (("a", "a"), ("b", "b"))
        )  # fmt: skip
    return got


@cache
def _init_names_of(cls: Any) -> tuple[tuple[str, str], ...]:
    """``(field name, __init__ argument name)`` of every field ``__init__`` takes."""
    return tuple((f.name, f.alias) for f in attrs.fields(cls) if f.init)


_init_names = cast(Callable[[Any], tuple[tuple[str, str], ...]], _init_names_of)


def _evolve(node: Node, changes: Mapping[str, Any]) -> Node:
    """``attrs.evolve(node, **changes)`` (``changes`` keyed by field name), without its
    per-call field introspection: mutators rebuild a node for every changed child."""
    cls = type(node)
    kwargs = {arg: changes[name] if name in changes else getattr(node, name)
              for name, arg in _init_names(cls)}  # fmt: skip
    return cls(**kwargs)


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
        cache = type(self).__dict__.get(_CACHE_ATTR)
        method = _NO_METHOD if cache is None else cache.get(type(node), _NO_METHOD)
        if method is _NO_METHOD:
            method = _method_for(type(self), type(node))
        if method is not None:
            method(self, node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        t = type(node)
        if _BINARY.get(t) or (t not in _BINARY and _is_binary(t)):
            self.visit(node.a)
            self.visit(node.b)
            return
        if not self.visit_buffer_shapes and isinstance(node, Buffer):
            return
        kinds = _KINDS
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            k = kinds.get(type(value))
            if k is None:
                k = _kind(type(value))
            if k == _NODE:
                self.visit(value)
            elif k == _TUPLE:
                self._visit_value(value)

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
        cache = type(self).__dict__.get(_CACHE_ATTR)
        method = _NO_METHOD if cache is None else cache.get(type(node), _NO_METHOD)
        if method is _NO_METHOD:
            method = _method_for(type(self), type(node))
        if method is not None:
            return method(self, node)
        return self.generic_visit(node)

    def visit_Buffer(self, node: Buffer) -> Buffer:
        return node

    def generic_visit(self, node: Node) -> Node:
        t = type(node)
        if _BINARY.get(t) or (t not in _BINARY and _is_binary(t)):
            a, b = node.a, node.b
            na, nb = self.visit(a), self.visit(b)
            return node if na is a and nb is b else t(na, nb)
        if isinstance(node, Buffer):
            return node
        changes: dict[str, Any] | None = None
        defined = _DEF_FIELDS.get(type(node).__name__)
        kinds = _KINDS
        for name in _child_fields(type(node)):
            if name == defined:
                continue
            old = getattr(node, name)
            k = kinds.get(type(old))
            if k is None:
                k = _kind(type(old))
            if k == _LEAF:
                continue
            new = self.visit(old) if k == _NODE else self._visit_value(old)
            if new is not old:
                if changes is None:
                    changes = {}
                changes[name] = new
        if changes is None:
            return node
        return _evolve(node, changes)

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


def _post_order(node: Node, fn: Callable[[Node], None]) -> None:
    # Visitor's walk (buffer shapes skipped, fields in order, nested tuples), children first,
    # as a plain recursive function: no dispatch per node.
    t = type(node)
    if _BINARY.get(t) or (t not in _BINARY and _is_binary(t)):
        _post_order(node.a, fn)
        _post_order(node.b, fn)
    elif not isinstance(node, Buffer):
        kinds = _KINDS
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            k = kinds.get(type(value))
            if k is None:
                k = _kind(type(value))
            if k == _NODE:
                _post_order(value, fn)
            elif k == _TUPLE:
                _post_order_tuple(value, fn)
    fn(node)


def _post_order_tuple(value: tuple[Any, ...], fn: Callable[[Node], None]) -> None:
    for v in value:
        if isinstance(v, tuple):
            _post_order_tuple(v, fn)
        elif _is_node(v):
            _post_order(v, fn)


def post_order_visit(node: Node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""
    _post_order(node, fn)


def post_order_stmts(node: Node, fn: Callable[[Stmt], None]) -> None:
    """Call ``fn`` on every statement below and including ``node``, in the order
    [`post_order_visit`][loopir.ir.functor.post_order_visit] meets them, without walking
    expressions (they hold no statements): the whole-function "is there a block / an annotated
    loop / an allocation" scans cost a few statements, not every index expression."""
    for name in stmt_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Stmt):
            post_order_stmts(value, fn)
        elif isinstance(value, tuple):  # (no IR field nests statements in deeper tuples)
            for v in value:
                if isinstance(v, Stmt):
                    post_order_stmts(v, fn)
    if isinstance(node, Stmt):
        fn(node)


def _gather_vars(value: Any, seen: dict[Var, None]) -> None:
    # post-order, as post_order_visit: a Var subclass's fields (a reduce axis's domain) first
    k = _KINDS.get(type(value))
    if k is None:
        k = _kind(type(value))
    if k == _TUPLE:
        for v in value:
            _gather_vars(v, seen)
    elif k == _NODE and _BINARY.get(type(value)):
        _gather_vars(value.a, seen)
        _gather_vars(value.b, seen)
    elif k == _NODE and not isinstance(value, Buffer):
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

    post_order_stmts(func.body, visit)
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
