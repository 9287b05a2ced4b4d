"""Traces: the recorded instructions of a schedule, printable as Python, storable as JSON.

An ``Instruction`` holds the primitive's ``kind``, its handle ``inputs`` (by parameter name), its
plain ``attrs`` (JSON-ready literals, by parameter name) and its handle ``outputs``. The parameter
roles of every kind come from the one recording decorator in
[`loopir.schedule.schedule`][loopir.schedule.schedule], which fills
[`INSTRUCTION_KINDS`][loopir.schedule.trace.INSTRUCTION_KINDS]; this module never lists primitives
itself.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from loopir.errors import ScheduleError, TraceError

if TYPE_CHECKING:
    from loopir.schedule.schedule import Schedule

logger = logging.getLogger(__name__)

#: Version of the JSON format written by ``Trace.as_json`` for traces whose attributes
#: refer to sampled values (``ExprRV``, written ``{"rv": "v3"}``); a trace without such
#: references is written as version 1, which every loopir reads. Both versions load.
TRACE_VERSION = 2
_READ_VERSIONS = (1, 2)


class _RV:
    """A handle to a block or loop of a schedule (resolved through the schedule's symbols)."""

    __slots__ = ("hint",)
    prefix = "v"

    def __init__(self, hint: str = "") -> None:
        # Only for messages: the block name or loop var name when the handle was made.
        self.hint = hint

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hint})" if self.hint else f"{type(self).__name__}()"


class BlockRV(_RV):
    """Handle to a block (resolved by the block's unique name)."""

    __slots__ = ()
    prefix = "b"


class LoopRV(_RV):
    """Handle to a loop (resolved by the loop's Var)."""

    __slots__ = ()
    prefix = "l"


class ExprRV(int):
    """A sampled integer (TVM's ExprRV): an ``int`` that remembers which instruction made it.

    It behaves as its value everywhere (``sch.split(l, sch.sample_perfect_tile(l, 2))``,
    ``math.prod(factors)``), and an instruction given one records a *reference* to it
    (``factors=[v2, v3]`` in the printed trace), so that replaying a trace with a changed
    decision feeds the new value to the instructions that use it. Arithmetic on it gives a
    plain ``int``: the result is recorded as a literal. Identity, not value, tells handles
    apart (two draws of ``4`` are two handles).
    """

    __slots__ = ()
    prefix = "v"


RV = BlockRV | LoopRV

# Parameter roles.
HANDLE = "handle"  # one handle (may be None when the default is None)
HANDLES = "handles"  # a list of handles (may be None when the default is None)
VARHANDLES = "varhandles"  # *args of handles
EITHER = "either"  # one handle or a list of handles (blockize's loop or list of blocks)
ATTR = "attr"  # a JSON-ready literal


@dataclass(frozen=True)
class Param:
    """One parameter of an instruction kind."""

    name: str
    role: str
    # For handle roles: "block", "loop" or "any".
    handle_type: str = "any"
    has_default: bool = False
    default: Any = None


@dataclass(frozen=True)
class InstructionKind:
    """Signature of a recorded primitive: its parameters and what it returns.

    ``returns`` is None, ``"block"``, ``"loop"`` (one handle) or ``"blocks"``, ``"loops"``
    (a list of handles).
    """

    name: str
    params: tuple[Param, ...]
    returns: str | None

    @property
    def returns_list(self) -> bool:
        return self.returns in ("blocks", "loops", "exprs")

    @property
    def output_type(self) -> type[_RV] | type[ExprRV] | None:
        if self.returns is None:
            return None
        if self.returns.startswith("expr"):
            return ExprRV
        return BlockRV if self.returns.startswith("block") else LoopRV

    @property
    def has_decision(self) -> bool:
        """Whether this is a sampling instruction (it has a ``decision`` attribute)."""
        return any(p.name == "decision" and p.role == ATTR for p in self.params)


#: Every recorded primitive, by name (filled by the recording decorator).
INSTRUCTION_KINDS: dict[str, InstructionKind] = {}


@dataclass(frozen=True)
class Instruction:
    """One recorded primitive call.

    Attributes
    ----------
    kind
        The primitive's name (a key of
        [`INSTRUCTION_KINDS`][loopir.schedule.trace.INSTRUCTION_KINDS]).
    inputs
        Handle arguments by parameter name: a handle, a tuple of handles, or None.
    attrs
        Other arguments by parameter name: JSON-ready literals (None, bool, int, float, str,
        lists of those).
    outputs
        The handles the call returned (empty for primitives returning nothing).
    """

    kind: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[_RV | ExprRV, ...] = ()

    def __post_init__(self) -> None:
        # Read-only views: a recorded instruction never changes.
        object.__setattr__(self, "inputs", MappingProxyType(dict(self.inputs)))
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))
        object.__setattr__(self, "outputs", tuple(self.outputs))


def _py_literal(value: Any, use: Any = None) -> str:
    """Python text of an attribute; ``use(rv)`` names the ExprRVs it refers to."""
    if isinstance(value, ExprRV) and use is not None:
        return str(use(value))
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value) if type(value) in (bool, float) or value is None else repr(int(value))
    if isinstance(value, str):
        return json.dumps(value)  # a valid Python string literal, double-quoted
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_literal(v, use) for v in value) + "]"
    raise TypeError(f"not a trace literal: {value!r}")


def _attr_json(value: Any, use: Any) -> Any:
    """JSON form of an attribute: ExprRV references become ``{"rv": name}``."""
    if isinstance(value, ExprRV):
        return {"rv": use(value)}
    if isinstance(value, (list, tuple)):
        return [_attr_json(v, use) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (float, str)):
        return value
    return int(value)


def _has_ref(value: Any) -> bool:
    if isinstance(value, ExprRV):
        return True
    return isinstance(value, (list, tuple)) and any(_has_ref(v) for v in value)


def map_refs(value: Any, fn: Any) -> Any:
    """``value`` with every ExprRV ``r`` in it replaced by ``fn(r)`` (lists rebuilt)."""
    if isinstance(value, ExprRV):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return [map_refs(v, fn) for v in value]
    return value


class _Namer:
    """Names handles in order of definition: b0, l1, l2, ... (one counter, TVM style)."""

    def __init__(self) -> None:
        # By identity: ExprRVs compare by value. The trace keeps every handle alive.
        self.names: dict[int, str] = {}

    def define(self, rv: Any) -> str:
        name = f"{rv.prefix}{len(self.names)}"
        self.names[id(rv)] = name
        return name

    def use(self, rv: Any, index: int) -> str:
        try:
            return self.names[id(rv)]
        except KeyError:
            raise TraceError(
                f"instruction {index} uses handle {rv!r} that no earlier instruction defines"
            ) from None



def _json_source(source: str | os.PathLike[str]) -> Any:
    """The JSON value of ``Trace.from_json``'s text or file argument.

    A ``str`` is a path when it names an existing file and does not start like JSON; JSON
    text keeps working as before.
    """
    path: str | os.PathLike[str] | None = source
    if isinstance(source, str):
        head = source.lstrip()[:1]
        path = source if head not in ("{", "[", "") and os.path.isfile(source) else None
    if path is None:
        text = str(source)
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            if text.lstrip()[:1] in ("{", "["):
                raise TraceError(f"Trace.from_json: not valid JSON: {e}") from None
            shown = text if len(text) <= 300 else text[:297] + "..."  # a path shows whole
            raise TraceError(
                f"Trace.from_json: not valid JSON and not an existing file: {shown!r} ({e})"
            ) from None
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise TraceError(f"Trace.from_json: no such file: {name!r}")
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"Trace.from_json: cannot read {name!r}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"Trace.from_json: the file {name!r} is not valid JSON: {e}") from None

class Trace:
    """An immutable sequence of ``Instruction``.

    ``str(trace)`` / [`as_python`][loopir.schedule.trace.Trace.as_python] give runnable Python
    (``def apply_trace(sch): ...``), [`as_json`][loopir.schedule.trace.Trace.as_json] a versioned
    JSON-ready dict, [`from_json`][loopir.schedule.trace.Trace.from_json] reads it back with
    validation, and [`apply_to`][loopir.schedule.trace.Trace.apply_to] replays the instructions on
    another schedule.
    """

    def __init__(self, instructions: Sequence[Instruction] = ()) -> None:
        self.instructions: tuple[Instruction, ...] = tuple(instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __getitem__(self, i: int) -> Instruction:
        return self.instructions[i]

    # --- Python ------------------------------------------------------------------------------
    def as_python(self, func_name: str = "apply_trace") -> str:
        """Runnable Python: ``def apply_trace(sch):`` with one line per instruction."""
        namer = _Namer()
        lines = [f"def {func_name}(sch):"]
        for index, inst in enumerate(self.instructions):
            spec = _kind(inst.kind, index)
            args: list[str] = []
            keyword = False
            for p in spec.params:
                if p.role == ATTR:
                    value = inst.attrs.get(p.name, p.default)
                    text = _py_literal(value, lambda rv, _i=index: namer.use(rv, _i))
                else:
                    value = inst.inputs.get(p.name)
                    if value is None:
                        text = "None"
                    elif isinstance(value, tuple):
                        names = [namer.use(v, index) for v in value]
                        if p.role == VARHANDLES:
                            args.extend(names)
                            continue
                        text = "[" + ", ".join(names) + "]"
                    else:
                        text = namer.use(value, index)
                # Parameters with defaults are passed by keyword (and kept explicit, so the
                # printed trace does not depend on today's defaults).
                keyword = keyword or p.has_default
                args.append(f"{p.name}={text}" if keyword else text)
            call = f"sch.{inst.kind}({', '.join(args)})"
            outs = [namer.define(o) for o in inst.outputs]
            if spec.returns is None:
                lines.append(f"    {call}")
            elif spec.returns_list:
                if len(outs) == 0:
                    lines.append(f"    _ = {call}")
                elif len(outs) == 1:
                    lines.append(f"    ({outs[0]},) = {call}")
                else:
                    lines.append(f"    {', '.join(outs)} = {call}")
            else:
                lines.append(f"    {outs[0]} = {call}")
        if len(lines) == 1:
            lines.append("    pass")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_python()

    def __repr__(self) -> str:
        return f"<Trace of {len(self.instructions)} instructions>"

    # --- JSON --------------------------------------------------------------------------------
    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict ``{"version": 1 or 2, "instructions": [...]}``.

        Each instruction is ``{"kind", "inputs", "attrs", "outputs"}``; handles are written as
        the names of the Python form (``"b0"``, ``"l1"``, ``"v2"``...). Sampling decisions
        are the ``decision`` attribute. An attribute that refers to a sampled value is
        written ``{"rv": "v2"}``; only such traces need (and get) version 2.
        """
        namer = _Namer()
        insts = []
        refs = False
        for index, inst in enumerate(self.instructions):
            _kind(inst.kind, index)
            inputs: dict[str, Any] = {}
            for name, value in inst.inputs.items():
                if value is None:
                    inputs[name] = None
                elif isinstance(value, tuple):
                    inputs[name] = [namer.use(v, index) for v in value]
                else:
                    inputs[name] = namer.use(value, index)
            refs = refs or any(_has_ref(v) for v in inst.attrs.values())
            attrs = {
                k: _attr_json(v, lambda rv, _i=index: namer.use(rv, _i))
                for k, v in inst.attrs.items()
            }
            insts.append(
                {
                    "kind": inst.kind,
                    "inputs": inputs,
                    "attrs": json.loads(json.dumps(attrs)),
                    "outputs": [namer.define(o) for o in inst.outputs],
                }
            )
        return {"version": TRACE_VERSION if refs else 1, "instructions": insts}

    @classmethod
    def from_json(cls, data: Any) -> Trace:
        """Read a trace written by [`as_json`][loopir.schedule.trace.Trace.as_json], validating
        every field.

        Parameters
        ----------
        data
            The dict [`as_json`][loopir.schedule.trace.Trace.as_json] gives, its JSON text, or
            the path of a file holding that text (an ``os.PathLike``, or a ``str`` naming an
            existing file).

        Raises
        ------
        TraceError
            On a missing or unreadable file, text that is not JSON, a wrong version, an
            unknown instruction kind, or a malformed field; the message names the file or the
            instruction index.
        """
        _ensure_kinds()
        if isinstance(data, (str, os.PathLike)):
            data = _json_source(data)
        if not isinstance(data, dict):
            raise TraceError(f"Trace.from_json: expected a dict, got {type(data).__name__}")
        version = data.get("version")
        # ``True == 1 == 1.0`` in Python: only the JSON integer 1 is version 1.
        if type(version) is not int or version not in _READ_VERSIONS:
            raise TraceError(
                f"Trace.from_json: unsupported trace version {version!r}; this loopir reads "
                "version 1 or 2"
            )
        extra = set(data) - {"version", "instructions"}
        if extra:
            raise TraceError(f"Trace.from_json: unknown top-level fields {sorted(extra)}")
        raw = data.get("instructions")
        if not isinstance(raw, list):
            raise TraceError("Trace.from_json: 'instructions' must be a list")
        handles: dict[str, _RV] = {}
        out: list[Instruction] = []
        for index, item in enumerate(raw):
            out.append(_instruction_from_json(item, index, handles, version))
        return cls(out)

    # --- decisions (what a tuner mutates) ----------------------------------------------------
    @property
    def decisions(self) -> dict[int, Any]:
        """The recorded decisions by instruction index (sampling instructions only)."""
        return {
            i: inst.attrs["decision"]
            for i, inst in enumerate(self.instructions)
            if _kind(inst.kind, i).has_decision and inst.attrs.get("decision") is not None
        }

    def with_decision(self, index: int, decision: Any) -> Trace:
        """A copy with instruction ``index``'s decision replaced (None removes it).

        The new decision is checked when the trace is replayed: an invalid one makes
        [`apply_to`][loopir.schedule.trace.Trace.apply_to] raise a TraceError naming the instruction
        and the decision.

        Raises
        ------
        TraceError
            When ``index`` is out of range or not a sampling instruction, or ``decision`` is
            not a JSON literal.
        """
        if type(index) is not int or not -len(self) <= index < len(self):
            raise TraceError(f"Trace.with_decision: no instruction {index!r} in a trace of {len(self)}")
        index %= len(self)
        inst = self.instructions[index]
        if not _kind(inst.kind, index).has_decision:
            raise TraceError(
                f"Trace.with_decision: instruction {index} ({inst.kind}) is not a sampling "
                "instruction and has no decision", primitive=inst.kind,
            )  # fmt: skip
        if isinstance(decision, tuple):
            decision = list(decision)
        if not _is_literal(decision) or _has_ref(decision):
            raise TraceError(f"Trace.with_decision: decision={decision!r} is not a JSON literal")
        attrs = dict(inst.attrs)
        attrs["decision"] = decision
        new = list(self.instructions)
        new[index] = Instruction(inst.kind, inst.inputs, attrs, inst.outputs)
        return Trace(new)

    def without_decisions(self) -> Trace:
        """A copy with every decision removed: replay resamples from the schedule's seed."""
        new = []
        for i, inst in enumerate(self.instructions):
            if _kind(inst.kind, i).has_decision and inst.attrs.get("decision") is not None:
                attrs = dict(inst.attrs)
                attrs["decision"] = None
                inst = Instruction(inst.kind, inst.inputs, attrs, inst.outputs)
            new.append(inst)
        return Trace(new)

    # --- replay ------------------------------------------------------------------------------
    def apply_to(self, sch: Schedule) -> None:
        """Replay every instruction on ``sch`` (which records them in its own trace).

        Raises
        ------
        TraceError
            When an instruction's preconditions fail on ``sch``'s function, or it produces a
            different number of handles than recorded: the message names the instruction index
            and kind, and shows the IR at that point. Replay never drifts silently.
        """
        from loopir.schedule.schedule import Schedule

        if not isinstance(sch, Schedule):
            raise TraceError(f"Trace.apply_to needs a loopir.Schedule, got {type(sch).__name__}")
        rv_map: dict[int, Any] = {}  # by identity: ExprRVs compare by value
        for index, inst in enumerate(self.instructions):
            spec = _kind(inst.kind, index)

            def mapped(rv: Any, _index: int = index, _kind_name: str = inst.kind) -> Any:
                try:
                    return rv_map[id(rv)]
                except KeyError:
                    raise TraceError(
                        f"replay: instruction {_index} ({_kind_name}) uses handle {rv!r} that no "
                        "earlier instruction defines"
                    ) from None

            args: list[Any] = []
            kwargs: dict[str, Any] = {}
            for p in spec.params:
                if p.role == ATTR:
                    if p.name in inst.attrs:
                        kwargs[p.name] = map_refs(inst.attrs[p.name], mapped)
                    continue
                value = inst.inputs.get(p.name)
                if p.role == VARHANDLES:
                    args.extend(mapped(v) for v in (value or ()))
                    continue
                if value is None:
                    new: Any = None
                elif isinstance(value, tuple):
                    new = [mapped(v) for v in value]
                else:
                    new = mapped(value)
                kwargs[p.name] = new
            method = getattr(sch, inst.kind)
            try:
                result = method(*args, **kwargs) if args else method(**kwargs)
            except ScheduleError as e:
                raise TraceError(
                    f"replay of instruction {index} ({inst.kind}) failed: {e.message}",
                    primitive=inst.kind,
                    func=e.func if e.func is not None else sch.func,
                    node=e.node,
                ) from e
            produced = [] if result is None else list(result) if spec.returns_list else [result]
            if len(produced) != len(inst.outputs):
                raise TraceError(
                    f"replay of instruction {index} ({inst.kind}) produced {len(produced)} "
                    f"handles where the trace recorded {len(inst.outputs)}: the function differs "
                    "from the one the trace was made on",
                    primitive=inst.kind,
                    func=sch.func,
                )
            for old, new_rv in zip(inst.outputs, produced):
                rv_map[id(old)] = new_rv
        logger.debug("replayed %d instructions", len(self.instructions))

    # --- TVM's names -------------------------------------------------------------------------
    def apply_to_schedule(self, sch: Schedule, remove_postproc: bool = False) -> None:
        """TVM's name of ``apply_to`` (a loopir trace has no postprocessing part, so
        ``remove_postproc`` changes nothing)."""
        self.apply_to(sch)

    @staticmethod
    def apply_json_to_schedule(json_obj: Any, sch: Schedule) -> None:
        """Replay the trace that ``as_json`` wrote (a dict or its JSON text) on ``sch``
        (TVM's ``Trace.apply_json_to_schedule``)."""
        Trace.from_json(json_obj).apply_to(sch)

    def show(self, style: str | None = None, black_format: bool = False) -> None:
        """Print the trace as Python (TVM's ``show``; ``style`` and ``black_format`` are
        TVM's highlighting options: loopir prints plain text)."""
        print(self.as_python())


def _ensure_kinds() -> None:
    # The kinds are registered when the Schedule class is defined.
    import loopir.schedule.schedule  # noqa: F401


def _kind(name: str, index: int) -> InstructionKind:
    _ensure_kinds()
    try:
        return INSTRUCTION_KINDS[name]
    except KeyError:
        raise TraceError(
            f"instruction {index}: unknown instruction kind {name!r}; known kinds: "
            f"{sorted(INSTRUCTION_KINDS)}"
        ) from None


def _is_literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_is_literal(v) for v in value)
    return False


def _instruction_from_json(
    item: Any, index: int, handles: dict[str, Any], version: int = TRACE_VERSION
) -> Instruction:
    def fail(msg: str) -> TraceError:
        return TraceError(f"Trace.from_json: instruction {index}: {msg}")

    if not isinstance(item, dict):
        raise fail(f"expected a dict, got {type(item).__name__}")
    keys = set(item)
    if keys != {"kind", "inputs", "attrs", "outputs"}:
        raise fail(
            f"fields must be exactly kind, inputs, attrs, outputs; got {sorted(keys)}"
        )
    kind = item["kind"]
    if not isinstance(kind, str) or kind not in INSTRUCTION_KINDS:
        raise fail(f"unknown instruction kind {kind!r}; known kinds: {sorted(INSTRUCTION_KINDS)}")
    spec = INSTRUCTION_KINDS[kind]
    raw_inputs, raw_attrs, raw_outputs = item["inputs"], item["attrs"], item["outputs"]
    if not isinstance(raw_inputs, dict):
        raise fail(f"{kind}: 'inputs' must be a dict")
    if not isinstance(raw_attrs, dict):
        raise fail(f"{kind}: 'attrs' must be a dict")
    if not isinstance(raw_outputs, list):
        raise fail(f"{kind}: 'outputs' must be a list")
    handle_params = {p.name: p for p in spec.params if p.role != ATTR}
    attr_params = {p.name: p for p in spec.params if p.role == ATTR}
    unknown = (set(raw_inputs) - set(handle_params)) | (set(raw_attrs) - set(attr_params))
    if unknown:
        raise fail(f"{kind}: unknown parameters {sorted(unknown)}")

    def handle(name: Any, p: Param) -> _RV:
        if not isinstance(name, str):
            raise fail(f"{kind}: input {p.name!r} must name a handle, got {name!r}")
        rv = handles.get(name)
        if rv is None:
            raise fail(f"{kind}: input {p.name!r} uses handle {name!r} defined by no earlier instruction")
        want = {"block": BlockRV, "loop": LoopRV}.get(p.handle_type, _RV)
        if not isinstance(rv, _RV):
            raise fail(f"{kind}: input {p.name!r} must be a block or loop handle, got {name!r}")
        if want is not None and not isinstance(rv, want):
            raise fail(f"{kind}: input {p.name!r} must be a {p.handle_type} handle, got {name!r}")
        return rv

    inputs: dict[str, Any] = {}
    for name, p in handle_params.items():
        if name not in raw_inputs:
            if p.has_default or p.role == VARHANDLES:
                continue
            raise fail(f"{kind}: missing input {name!r}")
        value = raw_inputs[name]
        if value is None:
            if not (p.has_default and p.default is None):
                raise fail(f"{kind}: input {name!r} may not be null")
            inputs[name] = None
        elif p.role == HANDLE or (p.role == EITHER and not isinstance(value, list)):
            inputs[name] = handle(value, p)
        else:
            if not isinstance(value, list):
                raise fail(f"{kind}: input {name!r} must be a list of handles, got {value!r}")
            inputs[name] = tuple(handle(v, p) for v in value)
    attrs: dict[str, Any] = {}
    for name, p in attr_params.items():
        if name not in raw_attrs:
            if p.has_default:
                continue
            raise fail(f"{kind}: missing attribute {name!r}")
        value = raw_attrs[name]
        if version >= 2:
            value = _attr_refs(value, handles, lambda msg, _n=name: fail(f"{kind}: attribute {_n!r}: {msg}"))
        if not _is_literal(value):
            raise fail(f"{kind}: attribute {name!r} is not a JSON literal: {value!r}")
        attrs[name] = value
    out_type = spec.output_type
    if out_type is None and raw_outputs:
        raise fail(f"{kind} returns nothing, but outputs are {raw_outputs!r}")
    if out_type is not None and not spec.returns_list and len(raw_outputs) != 1:
        raise fail(f"{kind} returns one handle, but outputs are {raw_outputs!r}")
    outputs: list[_RV | ExprRV] = []
    for name in raw_outputs:
        if not isinstance(name, str) or not name:
            raise fail(f"{kind}: output names must be non-empty strings, got {name!r}")
        if name in handles:
            raise fail(f"{kind}: output handle {name!r} is already defined")
        # A loaded ExprRV's value is unknown until replay; only its identity matters.
        rv = out_type(0) if out_type is ExprRV else out_type(name)  # type: ignore[misc]
        handles[name] = rv
        outputs.append(rv)
    return Instruction(kind, inputs, attrs, tuple(outputs))


def _attr_refs(value: Any, handles: dict[str, Any], fail: Any) -> Any:
    """Resolve ``{"rv": name}`` references (version 2) to the ExprRVs defined so far."""
    if isinstance(value, dict):
        if set(value) != {"rv"} or not isinstance(value["rv"], str):
            raise fail(f"a reference must be {{'rv': name}}, got {value!r}")
        rv = handles.get(value["rv"])
        if not isinstance(rv, ExprRV):
            raise fail(f"{value['rv']!r} is not a sampled value defined by an earlier instruction")
        return rv
    if isinstance(value, list):
        return [_attr_refs(v, handles, fail) for v in value]
    return value
