"""Pass objects, their composition and the instruments that observe a pass run.

A pass is an object callable on a [`PrimFunc`][loopir.ir.stmt.PrimFunc] that returns a new PrimFunc.
Subclasses implement [`Pass.transform`][loopir.passes.base.Pass.transform]; calling the pass reads
the current [`PassContext`][loopir.passes.context.PassContext], skips the pass when its optimization
level is above the context's or when it is disabled, and calls the context's instruments around it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from loopir.errors import LoopIRError, PassError
from loopir.ir.stmt import PrimFunc
from loopir.passes.context import PassContext, register_config

__all__ = [
    "require_lowered",
    "Pass",
    "FunctionPass",
    "Sequential",
    "PassInstrument",
    "PrintIRInstrument",
    "RecordIRInstrument",
]

logger = logging.getLogger(__name__)

register_config(
    "tir.dump_ir_after",
    str,
    "",
    "comma-separated pass names (or '*') whose output IR is logged at INFO level",
)


def _text(func: PrimFunc) -> str:
    try:
        from loopir.ir.printer import script

        return script(func)
    except Exception:  # the printer is optional for logging: never hide the real pass result
        return repr(func)


class PassInstrument:
    """Observer of a pass run; override any of the hooks (all default to no-ops)."""

    def enter_pass_ctx(self, ctx: PassContext) -> None:
        """Called when a context holding this instrument is entered."""

    def exit_pass_ctx(self, ctx: PassContext) -> None:
        """Called when that context is exited."""

    def run_before_pass(self, func: PrimFunc, pass_: Pass) -> None:
        """Called before ``pass_`` runs on ``func``."""

    def run_after_pass(self, func: PrimFunc, pass_: Pass) -> None:
        """Called with the output ``func`` of ``pass_``."""


class PrintIRInstrument(PassInstrument):
    """Log (logger ``loopir.passes.base``, INFO) the IR after each pass.

    Parameters
    ----------
    passes
        Names of the passes to log; None logs every pass.
    """

    def __init__(self, passes: Sequence[str] | None = None) -> None:
        self.passes = None if passes is None else frozenset(passes)

    def run_after_pass(self, func: PrimFunc, pass_: Pass) -> None:
        if self.passes is None or pass_.name in self.passes:
            logger.info("IR after %s:\n%s", pass_.name, _text(func))


class RecordIRInstrument(PassInstrument):
    """Record ``(pass name, output PrimFunc)`` after each pass in ``history``."""

    def __init__(self) -> None:
        self.history: list[tuple[str, PrimFunc]] = []

    def run_after_pass(self, func: PrimFunc, pass_: Pass) -> None:
        self.history.append((pass_.name, func))

    def names(self) -> list[str]:
        """Names of the recorded passes, in run order."""
        return [n for n, _ in self.history]

    def after(self, name: str) -> PrimFunc:
        """The IR after the (last run of the) pass called ``name``.

        Raises
        ------
        PassError
            If no pass of that name was recorded.
        """
        for n, f in reversed(self.history):
            if n == name:
                return f
        raise PassError(f"RecordIRInstrument: no pass named {name!r} was recorded; got {self.names()}")


# name -> required, of every pass class defined and every FunctionPass made so far: what
# ``PassContext(disabled_passes=...)`` checks names against.
_PASS_NAMES: dict[str, bool] = {}


def known_passes() -> dict[str, bool]:
    """``{name: required}`` of the passes known so far (built-in ones and those defined).

    Required passes cannot be disabled: they are needed for correct lowering.
    """
    import loopir.passes  # noqa: F401  (the built-in passes are defined at import)

    return dict(_PASS_NAMES)


def declare_pass(name: str, required: bool) -> None:
    """Make a pass defined by a backend known before the backend is imported (for
    ``disabled_passes``, which refuses unknown names)."""
    _PASS_NAMES.setdefault(name, required)


class Pass:
    """Base class of passes.

    Attributes
    ----------
    name
        Name shown by instruments and used by ``disabled_passes`` / ``tir.dump_ir_after``.
    opt_level
        The pass runs only when the context's ``opt_level`` is at least this.
    required
        Required passes (needed for correct lowering) ignore ``opt_level`` and
        ``disabled_passes``.
    """

    name: str = "Pass"
    opt_level: int = 0
    required: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _PASS_NAMES[cls.name] = bool(cls.required)

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        """Return the transformed ``func``; subclasses override this."""
        raise NotImplementedError(f"pass {self.name} does not implement transform()")

    def __call__(self, func: PrimFunc) -> PrimFunc:
        if not isinstance(func, PrimFunc):
            raise PassError(f"pass {self.name}: expected a PrimFunc, got {type(func).__name__}")
        ctx = PassContext.current()
        if not self.required and (
            ctx.opt_level < self.opt_level or self.name in ctx.disabled_passes
        ):
            logger.debug("pass %s skipped (opt_level %d)", self.name, ctx.opt_level)
            return func
        for inst in ctx.instruments:
            inst.run_before_pass(func, self)
        try:
            out = self.transform(func, ctx)
        except LoopIRError:
            raise
        except Exception as exc:  # turn internal failures into a PassError naming the pass
            raise PassError(f"pass {self.name} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, PrimFunc):
            raise PassError(f"pass {self.name} returned {type(out).__name__}, not a PrimFunc")
        if not isinstance(self, Sequential):
            for inst in ctx.instruments:
                inst.run_after_pass(out, self)
            dump = ctx.get("tir.dump_ir_after")
            if dump and (dump.strip() == "*" or self.name in {s.strip() for s in dump.split(",")}):
                logger.info("IR after %s:\n%s", self.name, _text(out))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def require_lowered(func: PrimFunc, pass_name: str) -> None:
    """Raise [`PassError`][loopir.errors.PassError] if ``func`` still has blocks (LowerBlocks must
    run first)."""
    from loopir.ir.functor import post_order_stmts
    from loopir.ir.stmt import Block, BlockRealize

    found: list[str] = []

    def f(n: object) -> None:
        if isinstance(n, (Block, BlockRealize)) and not found:
            found.append(n.name if isinstance(n, Block) else n.block.name)

    post_order_stmts(func.body, f)
    if found:
        raise PassError(
            f"pass {pass_name} needs lowered IR, but block {found[0]!r} is still there; "
            "run LowerBlocks first (or use loopir.lower)"
        )


class FunctionPass(Pass):
    """A pass made from a function ``fn(func, ctx) -> func``.

    Parameters
    ----------
    fn
        The transformation.
    name
        Pass name.
    opt_level, required
        See [`Pass`][loopir.passes.base.Pass].
    """

    def __init__(
        self,
        fn: Callable[[PrimFunc, PassContext], PrimFunc],
        name: str,
        opt_level: int = 0,
        required: bool = True,
    ) -> None:
        self.fn = fn
        self.name = name
        self.opt_level = opt_level
        self.required = required
        _PASS_NAMES[name] = required

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        return self.fn(func, ctx)


class Sequential(Pass):
    """Run passes in order; each one is instrumented separately.

    Parameters
    ----------
    passes
        The passes to run.
    name
        Name of the whole sequence.
    """

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential") -> None:
        for p in passes:
            if not isinstance(p, Pass):
                raise PassError(f"Sequential {name}: expected Pass objects, got {type(p).__name__}")
        self.passes: tuple[Pass, ...] = tuple(passes)
        self.name = name

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        for p in self.passes:
            func = p(func)
        return func

    def __repr__(self) -> str:
        inner = ", ".join(repr(p) for p in self.passes)
        return f"Sequential([{inner}], name={self.name!r})"

    def __iter__(self) -> Any:
        return iter(self.passes)
