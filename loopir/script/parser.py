"""Functions of scripts, and the entry points ``prim_func`` and ``from_source``."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from loopir.errors import ScriptError
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import IntImm, Var
from loopir.ir.functor import collect_vars, post_order_visit
from loopir.ir.stmt import Block, BlockRealize, PrimFunc, Stmt
from loopir.script.blocks import BlockParser, _BlockParts
from loopir.script.exprs import NS, Evaluator, _is_dtype
from loopir.script.source import Source, function_source

__all__ = ["prim_func", "from_source", "parse_function"]

_BUFFER_KWARGS = ("dtype", "scope", "strides", "align", "offset_factor")


class Parser(BlockParser):
    """Parses one ``def`` into a PrimFunc."""

    def __init__(self, src: Source, env: Mapping[str, Any] | None) -> None:
        self.src = src
        self.ev = Evaluator(src, env)
        self.loops: dict[Var, Range] = {}
        # symbolic sizes: declared (n = T.int32()) or first seen in a parameter's shape
        self.sizes: dict[str, Var] = {}

    def declare(self, name: str, node: ast.AST) -> Var:
        """A symbolic size named in a parameter's shape without a declaration: int32."""
        v = Var(name, "int32")
        self.sizes[name] = v
        self.ev.frames[0][name] = v
        return v

    def function(self, f: ast.FunctionDef) -> PrimFunc:
        a = f.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            self.fail("a PrimFunc's parameters are plain annotated names", f)
        stmts = list(f.body)
        if stmts and isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant) \
                and isinstance(stmts[0].value.value, str):  # fmt: skip
            stmts = stmts[1:]  # the docstring
        stmts = [s for s in stmts if not self.size_decl(s)]
        params: list[Buffer | str] = []
        for arg in a.args:
            p = self.param(arg)
            if p is not None:
                params.append(p)
        attrs_: dict[str, Any] = {}
        root = _BlockParts()
        body_nodes: list[ast.stmt] = []
        for s in stmts:
            call = self.ns_call(s.value) if isinstance(s, (ast.Assign, ast.Expr)) else None
            if call is None:
                body_nodes.append(s)
                continue
            name, node = call
            if name == "match_buffer" and isinstance(s, ast.Assign):
                self.match_buffer(s, node, params)
            elif name == "func_attr" and isinstance(s, ast.Expr):
                args, _ = self.ev.expect(node, 1, 1)
                if not isinstance(args[0], dict):
                    self.fail("T.func_attr takes a dict", s)
                attrs_.update(args[0])
            elif name in ("alloc_buffer", "sblock_alloc_buffer") and isinstance(s, ast.Assign) and len(s.targets) == 1:
                root.allocs.append(self.alloc_buffer(s, node))
            else:
                body_nodes.append(s)
        for p in params:
            if isinstance(p, str):
                self.fail(f"handle parameter {p!r} is never bound by T.match_buffer", f)
        body = self.body(body_nodes)
        body = self.root(body, root, f)
        self.check_sizes(params, f)
        func = PrimFunc(tuple(p for p in params if isinstance(p, Buffer)), body, f.name, attrs_)
        self.src.mark(func, f)
        return func

    def root(self, body: Stmt, root: _BlockParts, f: ast.FunctionDef) -> Stmt:
        """Wrap ``body`` in the implicit root block, as TVM does: when the function allocates
        buffers at its top level or contains blocks, unless the body already is one block
        without iter vars (an explicit root)."""
        explicit = (
            isinstance(body, BlockRealize)
            and not body.block.iter_vars
            and isinstance(body.predicate, IntImm)
            and body.predicate.value == 1
        )
        if not root.allocs and (explicit or not _contains_block(body)):
            return body
        return self.make_block("root", root, body, f, implicit_root=True)

    def size_decl(self, s: ast.stmt) -> bool:
        """``n = T.int32()`` at the top level declares symbolic size ``n``."""
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
            return False
        call = self.ns_call(s.value)
        if call is None or not _is_dtype(call[0]) or call[1].args or call[1].keywords:
            return False
        name = s.targets[0].id
        v = Var(name, call[0])
        self.sizes[name] = v
        self.ev.define(name, v)
        return True

    def check_sizes(self, params: list[Buffer | str], f: ast.FunctionDef) -> None:
        used: set[Var] = set()
        for p in params:
            if isinstance(p, Buffer):
                for e in (*p.shape, *(p.strides or ())):
                    used.update(collect_vars(e))
        for name, v in self.sizes.items():
            if v not in used:
                self.fail(f"symbolic size {name!r} does not size any parameter (a PrimFunc's sizes "
                          "are bound from its buffer arguments)", f)  # fmt: skip

    # --- parameters -------------------------------------------------------------------------
    def param(self, arg: ast.arg) -> Buffer | str | None:
        """A buffer parameter, a handle's name, or None for a symbolic size (``n: T.int32``)."""
        ann = arg.annotation
        if ann is None:
            return self.fail(f"parameter {arg.arg!r} needs a type: T.Buffer(shape, dtype) or T.handle", arg)
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:  # a string annotation (from __future__ import annotations keeps the AST anyway)
                ann = ast.copy_location(ast.parse(ann.value, mode="eval").body, ann)
            except SyntaxError:
                return self.fail(f"parameter {arg.arg!r}: cannot read its type", arg)
        kind = self.ev.eval(ann) if not isinstance(ann, (ast.Call, ast.Subscript)) else None
        if isinstance(kind, NS) and kind.path == ("handle",):
            return arg.arg
        if isinstance(kind, NS) and len(kind.path) == 1 and _is_dtype(kind.name):
            if arg.arg not in self.sizes:
                v = Var(arg.arg, kind.name)
                self.sizes[arg.arg] = v
                self.ev.frames[0][arg.arg] = v
            return None
        buf = self.buffer_annotation(arg.arg, ann)
        self.ev.define(arg.arg, buf)
        self.src.mark(buf, arg)
        return buf

    def buffer_annotation(self, name: str, ann: ast.expr) -> Buffer:
        self.ev.on_undefined = self.declare
        try:
            if isinstance(ann, ast.Subscript):  # the older T.Buffer[shape, dtype]
                head = self.ev.eval(ann.value)
                key = self.ev.eval(ann.slice)
                args = list(key) if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], str) else [key]
                kw: dict[str, Any] = {}
                call_node = ast.copy_location(ast.Call(func=ann.value, args=[], keywords=[]), ann)
            elif isinstance(ann, ast.Call):
                head = self.ev.eval(ann.func)
                args, kw = self.ev.expect(ann, 1, 2, _BUFFER_KWARGS)
                call_node = ann
            else:
                return self.fail("a parameter's type is T.Buffer(shape, dtype) or T.handle", ann)
        finally:
            self.ev.on_undefined = None
        if not (isinstance(head, NS) and head.path == ("Buffer",)):
            return self.fail("a parameter's type is T.Buffer(shape, dtype) or T.handle", ann)
        dtype = args[1] if len(args) > 1 else kw.get("dtype", "float32")
        return self.make_buffer(name, args[0], dtype, kw.get("scope", "global"), kw.get("strides"),
                                call_node, "T.Buffer")  # fmt: skip

    def match_buffer(self, s: ast.Assign, call: ast.Call, params: list[Buffer | str]) -> None:
        target = s.targets[0]
        if len(s.targets) != 1 or not isinstance(target, ast.Name):
            self.fail("T.match_buffer is assigned to one name", s)
        assert isinstance(target, ast.Name)
        if not call.args or not isinstance(call.args[0], ast.Name) or call.args[0].id not in params:
            self.fail("T.match_buffer's first argument is a T.handle parameter of the function", call)
        handle = call.args[0].id
        rest = ast.copy_location(ast.Call(func=call.func, args=call.args[1:], keywords=call.keywords), call)
        self.ev.on_undefined = self.declare
        try:
            args, kw = self.ev.expect(rest, 1, 2, _BUFFER_KWARGS)
        finally:
            self.ev.on_undefined = None
        dtype = args[1] if len(args) > 1 else kw.get("dtype", "float32")
        buf = self.make_buffer(target.id, args[0], dtype, kw.get("scope", "global"), kw.get("strides"),
                               call, "T.match_buffer")  # fmt: skip
        params[params.index(handle)] = buf
        self.ev.define(target.id, buf)
        self.src.mark(buf, s)


def _contains_block(s: Stmt) -> bool:
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        found = found or isinstance(n, Block)

    post_order_visit(s, visit)
    return found


def parse_function(src: Source, env: Mapping[str, Any] | None) -> PrimFunc:
    """Parse the one function definition of ``src``."""
    mod = src.parse()
    funcs = [s for s in mod.body if isinstance(s, ast.FunctionDef)]
    others = [s for s in mod.body if not isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    if len(funcs) != 1 or others:
        where = others[0] if others else (funcs[1] if len(funcs) > 1 else None)
        src.error(f"expected one function definition, found {len(funcs)} "
                  f"(and {len(others)} other statements)", where)  # fmt: skip
    return Parser(src, env).function(funcs[0])


def _env_of(func: Callable[..., Any]) -> dict[str, Any]:
    env = dict(getattr(func, "__globals__", {}))
    code = getattr(func, "__code__", None)
    closure = getattr(func, "__closure__", None) or ()
    if code is not None:
        for name, cell in zip(code.co_freevars, closure):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # an empty cell (assigned later)
                pass
    return env


def prim_func(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorator: parse a Python function's source into a [`PrimFunc`][loopir.ir.stmt.PrimFunc].

    The function is never called: its text is read with ``inspect`` and parsed. Names that
    the script does not define resolve in the function's module and closure (Python constants
    such as tile sizes, or IR objects).

    Parameters
    ----------
    func
        The decorated function.
    options
        TVM's ``private``, ``check_well_formed`` and ``s_tir`` are accepted and ignored: call
        ``loopir.verify`` on the result to check it.

    Returns
    -------
    PrimFunc
        Named after the function.

    Raises
    ------
    ScriptError
        With the file, line and column of the offending construct.
    """
    unknown = set(options) - {"private", "check_well_formed", "s_tir"}
    if unknown:
        raise ScriptError(f"@T.prim_func: unknown options {sorted(unknown)}")
    if func is None:
        return lambda f: prim_func(f)
    src = function_source(func)
    return parse_function(src, _env_of(func))


def from_source(text: str, file: str = "<string>", env: Mapping[str, Any] | None = None) -> PrimFunc:
    """Parse printed text (``func.script()``) or a script into a [`PrimFunc`][loopir.ir.stmt.PrimFunc].

    Parameters
    ----------
    text
        One ``def`` (decorated with ``@T.prim_func`` or not), optionally with imports.
    file
        The name shown in errors.
    env
        Python names the script may use besides ``T`` (constants, IR objects); none by default.

    Returns
    -------
    PrimFunc

    Raises
    ------
    ScriptError
        With the line and column of the offending construct.
    """
    import textwrap

    return parse_function(Source(textwrap.dedent(text), file), None if env is None else dict(env))

