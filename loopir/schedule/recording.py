"""The one recording decorator behind every ``loopir.schedule.Schedule`` primitive.

``instruction`` turns a method ``(self, ...) -> (func, targets)`` into a primitive: it
checks the arguments, records the call into the trace, makes the output handles and commits
the new function only when the method returned. It lives in its own module so that the
primitives can be spread over several modules (``schedule.py``, ``schedule_tvm.py``) that all
use it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from loopir.errors import ScheduleError
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc
from loopir.schedule import sampling
from loopir.schedule.trace import (
    _RV,
    ATTR,
    EITHER,
    HANDLE,
    HANDLES,
    INSTRUCTION_KINDS,
    VARHANDLES,
    Instruction,
    InstructionKind,
    Param,
    _is_literal,
    map_refs,
)

if TYPE_CHECKING:
    from loopir.schedule.schedule import Schedule

logger = logging.getLogger("loopir.schedule.schedule")

F = TypeVar("F", bound=Callable[..., Any])
# What a handle resolves through: a block name, a loop Var, or a root/inline mark.
Target = str | Var | sampling.Mark


_ROLE_KINDS = {
    "block": (HANDLE, "block"), "loop": (HANDLE, "loop"), "any": (HANDLE, "any"),
    "blocks": (HANDLES, "block"), "loops": (HANDLES, "loop"),
    "*blocks": (VARHANDLES, "block"), "*loops": (VARHANDLES, "loop"),
    "loop_or_blocks": (EITHER, "any"),
}  # fmt: skip


def _param_spec(p: inspect.Parameter, declared: str | None, kind: str) -> Param:
    """The role of parameter ``p``: the handle kind ``declared`` in ``inputs=``, else a literal.

    The declaration is checked against the signature, so that roles and annotations cannot
    drift apart: a ``*args`` parameter must be declared ``"*blocks"``/``"*loops"``, and a
    parameter annotated with a handle type must be declared.
    """
    ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
    has_default = p.default is not inspect.Parameter.empty
    default = p.default if has_default else None
    if declared is None:
        if "RV" in ann or p.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"instruction {kind}: parameter {p.name!r} ({ann}) takes handles; declare it in inputs=")
        return Param(p.name, ATTR, has_default=has_default, default=default)
    if declared not in _ROLE_KINDS:
        raise TypeError(f"instruction {kind}: unknown input kind {declared!r} for {p.name!r}")
    role, htype = _ROLE_KINDS[declared]
    if (role == VARHANDLES) != (p.kind is inspect.Parameter.VAR_POSITIONAL):
        raise TypeError(f"instruction {kind}: {p.name!r} is declared {declared!r} but is {p.kind.description}")
    return Param(p.name, role, htype, has_default, default)


def _normalize_literal(value: Any) -> Any:
    """Tuples become lists so that recorded attributes are exactly their JSON form, and NumPy
    scalars (``np.int64(4)`` from an array's shape, ``np.True_``) their Python values: every
    int a primitive takes may be a NumPy integer."""
    if isinstance(value, (tuple, list)):
        return [_normalize_literal(v) for v in value]
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def instruction(
    inputs: Mapping[str, str] | None = None,
    returns: str | None = None,
    resolve: Callable[[Schedule, dict[str, Any]], None] | None = None,
    unrecorded: Sequence[str] = (),
) -> Callable[[F], F]:
    """The recording decorator: turns a method ``(self, ...) -> (func, targets)`` into a primitive.

    The decorated method reads ``self.func``, calls a pure function and returns the new
    PrimFunc and the targets (block names / loop Vars) of its output handles (None, one, or a
    list, per ``returns``). The decorator registers the kind with the parameter roles declared
    in ``inputs`` (the other parameters are literal attributes), checks attribute literals,
    makes output handles, records the instruction and commits. Nothing is committed when the
    method raises.

    Parameters
    ----------
    inputs
        ``{parameter: kind}`` for the handle inputs: ``"block"``, ``"loop"``, ``"any"`` (one
        handle), ``"blocks"``, ``"loops"`` (a list), ``"*blocks"``, ``"*loops"`` (``*args``)
        or ``"loop_or_blocks"`` (one handle or a list of them; the primitive checks which).
    returns
        None, ``"block"``, ``"loop"``, ``"blocks"``, ``"loops"``, ``"expr"`` or ``"exprs"``
        (sampled ints). A sampling method returns ``(func, targets, decision)``; the decision
        is recorded as its ``decision`` attribute.
    resolve
        Converts arguments a trace cannot hold (a Buffer becomes its name or index).
    unrecorded
        Parameters that cannot change the result (TVM's ``preserve_unit_iters``, which loopir
        accepts for compatibility): the method gets and checks them, the trace leaves them
        out, so that traces print and replay exactly as without them.
    """

    def deco(method: F) -> F:
        kind = method.__name__
        sig = inspect.signature(method)
        declared = dict(inputs or {})
        rest = list(sig.parameters.values())[1:]
        unknown = (set(declared) | set(unrecorded)) - {p.name for p in rest}
        if unknown:
            raise TypeError(f"instruction {kind}: inputs= names unknown parameters {sorted(unknown)}")
        params = tuple(_param_spec(p, declared.get(p.name), kind) for p in rest if p.name not in unrecorded)
        spec = InstructionKind(kind, params, returns)
        INSTRUCTION_KINDS[kind] = spec

        @functools.wraps(method)
        def wrapper(self: Schedule, *args: Any, **kwargs: Any) -> Any:
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError as e:
                raise ScheduleError(f"bad arguments: {e}", primitive=kind) from None
            bound.apply_defaults()
            if resolve is not None:  # e.g. a Buffer argument becomes the literal a trace records
                resolve(self, bound.arguments)
            inputs: dict[str, Any] = {}
            attrs: dict[str, Any] = {}
            for name in unrecorded:
                bound.arguments[name] = _normalize_literal(bound.arguments[name])
            for p in params:
                value = bound.arguments[p.name]
                if p.role == ATTR:
                    # A sampled value of this schedule is recorded as a reference to it; one
                    # from elsewhere is just its int.
                    value = map_refs(_normalize_literal(value),
                                     lambda r: r if id(r) in self._exprs else int(r))
                    if not _is_literal(value):
                        raise ScheduleError(
                            f"argument {p.name}={value!r} must be None, a bool, int, float, str "
                            "or a list of those",
                            primitive=kind,
                        )
                    attrs[p.name] = value
                    # The primitive sees plain ints: IR nodes never hold an ExprRV.
                    bound.arguments[p.name] = map_refs(value, int)
                    continue
                if p.role == HANDLE:
                    if value is not None or not (p.has_default and p.default is None):
                        self._check_handle(value, p, kind)
                    inputs[p.name] = value
                    continue
                if p.role == EITHER and not isinstance(value, (list, tuple)):
                    self._check_handle(value, p, kind)
                    inputs[p.name] = value
                    continue
                if value is None and p.role == HANDLES and p.has_default and p.default is None:
                    inputs[p.name] = None
                    continue
                if isinstance(value, _RV) or not isinstance(value, (list, tuple)):
                    raise ScheduleError(
                        f"argument {p.name} must be a list of handles, got {value!r}",
                        primitive=kind,
                    )
                for v in value:
                    self._check_handle(v, p, kind)
                inputs[p.name] = tuple(value)
            try:
                new_func, targets, *decision = method(*bound.args, **bound.kwargs)
            except ScheduleError as e:
                if e.primitive is None:
                    e.primitive = kind
                raise
            if decision:
                attrs["decision"] = _normalize_literal(decision[0])
            # Commit: nothing above touched self.
            outputs = self._make_outputs(spec, targets)
            index = len(self._instructions)
            self._instructions.append(Instruction(kind, inputs, attrs, tuple(outputs)))
            if new_func is not self._func:
                self._func = new_func
                self._mark_stale(index, kind)
            logger.debug("schedule: %s -> %d outputs", kind, len(outputs))
            if returns is None:
                return None
            return outputs if spec.returns_list else outputs[0]

        return wrapper  # type: ignore[return-value]

    return deco


def _result(func: PrimFunc, targets: Any = None) -> Any:
    """What a primitive's body returns to ``instruction``: the new function and the
    targets (block names / loop Vars) of its output handles. Typed ``Any`` because the
    decorator turns it into the handles the method's signature promises."""
    return func, targets


def check_bool(value: Any, name: str, primitive: str) -> bool:
    """``value`` when it is a bool (NumPy's too); a ScheduleError naming ``name`` otherwise."""
    value = _normalize_literal(value)
    if not isinstance(value, bool):
        raise ScheduleError(f"{name} must be a bool, got {value!r}", primitive=primitive)
    return value
