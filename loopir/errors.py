"""The loopir error tree.

Every error a user can trigger derives from [`LoopIRError`][loopir.errors.LoopIRError], so
``except LoopIRError`` catches all of them; the subclasses say which layer refused the input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class LoopIRError(Exception):
    """Base class of every error raised by loopir."""


class LoopIRWarning(UserWarning):
    """Base class of the warnings loopir issues (a check that could not decide, say)."""


class IRValidationError(LoopIRError):
    """An IR node or function is ill-formed (raised by constructors and ``loopir.verify``).

    Parameters
    ----------
    message
        What is wrong, naming the check and the offending value.
    check
        Short name of the failed check (e.g. ``"undefined-var"``), or None.
    node
        The offending node, if any; shown in the message.
    """

    def __init__(self, message: str, *, check: str | None = None, node: Any = None) -> None:
        self.check = check
        self.node = node
        self.message = message
        text = message if check is None else f"[{check}] {message}"
        if node is not None:
            try:
                shown = str(node)
            except Exception:  # pragma: no cover - printing must never hide the real error
                shown = repr(node)
            text = f"{text}\n  offending node:\n    " + shown.replace("\n", "\n    ")
        super().__init__(text)


# How a ScheduleError shows the IR: the printer (loopir.ir.printer, a layer above this one)
# registers itself here when it is imported, so that errors never imports the IR.
_show_ir: Callable[[Any, Any], str] | None = None


def register_ir_printer(show: Callable[[Any, Any], str]) -> None:
    """Called by ``loopir.ir.printer``: ``show(func, marked_node)`` prints IR for errors."""
    global _show_ir
    _show_ir = show


class ScheduleError(LoopIRError):
    """A schedule primitive's precondition failed; the schedule is left unchanged.

    ``str()`` names the primitive and shows the current function with the offending loop or
    block marked (when both are known).
    """

    def __init__(
        self,
        message: str,
        *,
        primitive: str | None = None,
        func: Any = None,
        node: Any = None,
    ) -> None:
        self.primitive = primitive
        self.func = func
        self.node = node
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        head = f"{self.primitive}: {self.message}" if self.primitive else self.message
        if self.func is None:
            return head
        if _show_ir is None:  # pragma: no cover - loopir.ir registers the printer at import
            return head
        try:
            shown = _show_ir(self.func, self.node)
        except Exception:  # pragma: no cover - printing must never hide the real error
            return head
        return f"{head}\n{shown}"


class StructuralEqualError(LoopIRError, AssertionError):
    """Raised by ``loopir.assert_structural_equal``; its message shows a readable diff.

    Also an AssertionError so that test frameworks report it as a failed assertion.
    """


class ScriptError(LoopIRError):
    """A script (``@T.prim_func`` source or printed text) cannot be parsed into IR.

    ``str()`` gives the message, then the file, line and column with the source line and the
    offending construct underlined, like a compiler's diagnostic.

    Attributes
    ----------
    message
        What is wrong, naming the construct (``T.axis.spatial``, ``for``...).
    span
        Where (a [`loopir.ir.span.Span`][loopir.ir.span.Span]), or None.
    """

    def __init__(self, message: str, span: Any = None) -> None:
        self.message = message
        self.span = span
        super().__init__(message)

    def __str__(self) -> str:
        if self.span is None:
            return self.message
        return f"{self.message}\n{self.span.show()}"


class TraceError(ScheduleError):
    """A trace is malformed (bad JSON, wrong version, unknown instruction) or fails to replay."""


class PassError(LoopIRError):
    """A pass, its configuration or the PassContext refused the input."""


class CodegenError(LoopIRError):
    """Code generation or compilation (nvcc, gcc) failed or cannot handle the IR."""


class LaunchError(LoopIRError):
    """A built module cannot be called: bad arguments, no GPU, or a failed launch."""


class ArithError(LoopIRError):
    """The arithmetic analyzer (``loopir.arith``) refused its input: a non-integer expression
    where an integer one is needed, an unbound variable during evaluation, a bad range."""
