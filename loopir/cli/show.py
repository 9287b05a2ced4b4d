"""``python -m loopir show FILE``: print a workload's IR, trace, lowered IR or CUDA source.

``FILE`` is a Python file run as a script (``__name__`` is not ``"__main__"``). It defines one
of (first match wins, or the one named with ``--name``):

- ``schedule`` or ``sch``: a [`loopir.Schedule`][loopir.schedule.schedule.Schedule], or a function
  of no arguments returning one (names defined in the file win over imported functions);
- ``func``: a [`loopir.PrimFunc`][loopir.ir.stmt.PrimFunc], or a function of no arguments returning
  one; with ``apply_trace(sch)`` (what ``print(sch.trace)`` writes) next to it, the trace is applied
  to ``Schedule(func)``.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import attrs

from loopir.cli.term import Console
from loopir.errors import LoopIRError

__all__ = ["ShowError", "ShowOptions", "load_workload", "run_show"]

_SCHEDULE_NAMES = ("schedule", "sch")
_FUNC_NAMES = ("func",)


class ShowError(LoopIRError):
    """The file given to ``show`` cannot be run or defines no workload."""


@attrs.define
class ShowOptions:
    """What ``show`` prints (the command-line options)."""

    name: str | None = None
    trace: bool = True
    json: bool = False
    lower: bool = False
    local_pad: bool = False
    cuda: bool = False


def _resolve(value: Any, name: str, path: Path) -> Any:
    """``value`` itself, or its result when it is a function of no arguments."""
    from loopir import PrimFunc, Schedule

    if isinstance(value, (PrimFunc, Schedule)):
        return value
    if callable(value):
        try:
            value = value()
        except TypeError as exc:
            raise ShowError(
                f"show: {path}: {name} is a function; it must take no arguments and return a "
                f"Schedule or PrimFunc ({exc})"
            ) from exc
        if isinstance(value, (PrimFunc, Schedule)):
            return value
    raise ShowError(
        f"show: {path}: {name} must be a loopir.Schedule or loopir.PrimFunc (or a function of no "
        f"arguments returning one), got {type(value).__name__}"
    )


_RUN_NAME = "__loopir_show__"


def _defined_in_file(value: Any) -> bool:
    """Whether ``value`` was made by the file (objects) or defined in it (functions)."""
    if callable(value) and hasattr(value, "__module__"):
        made_here: bool = value.__module__ == _RUN_NAME
        return made_here
    return True


def load_workload(path: str | Path, name: str | None = None) -> Any:
    """Run ``path`` and return the Schedule or PrimFunc it defines (see the module doc).

    Raises
    ------
    ShowError
        If the file is missing, raises while running, or defines no workload.
    """
    from loopir import Schedule

    path = Path(path)
    if not path.is_file():
        raise ShowError(f"show: no such file: {path}")
    try:
        ns = runpy.run_path(str(path), run_name=_RUN_NAME)
    except LoopIRError:
        raise
    except Exception as exc:
        raise ShowError(f"show: running {path} raised {type(exc).__name__}: {exc}") from exc
    if name is not None:
        if name not in ns:
            raise ShowError(f"show: {path} defines no {name!r}")
        return _resolve(ns[name], name, path)
    # What the file defines itself wins over what it imported: `from loopir.examples.dense
    # import schedule` next to the file's own `sch = ...` must show `sch`.
    names = [n for n in _SCHEDULE_NAMES + _FUNC_NAMES if n in ns]
    names.sort(key=lambda n: not _defined_in_file(ns[n]))
    for n in names:
        if n in _SCHEDULE_NAMES:
            return _resolve(ns[n], n, path)
        if n in _FUNC_NAMES:
            value = _resolve(ns[n], n, path)
            apply = ns.get("apply_trace")
            if callable(apply) and not isinstance(value, Schedule):
                sch = Schedule(value)
                apply(sch)
                return sch
            return value
    raise ShowError(
        f"show: {path} defines none of {', '.join(_SCHEDULE_NAMES + _FUNC_NAMES)} "
        "(or pass --name NAME)"
    )


def run_show(con: Console, path: str | Path, opts: ShowOptions) -> int:
    """Print what ``opts`` asks for about the workload in ``path``; returns the exit status."""
    import json

    import loopir
    from loopir import Schedule

    work = load_workload(path, opts.name)
    sch = work if isinstance(work, Schedule) else None
    func = sch.func if sch is not None else work
    con.heading(f"{func.name}: the {'scheduled ' if sch is not None else ''}function")
    con.write(func.script())
    if sch is not None and opts.trace:
        con.heading(f"trace ({len(sch.trace)} instructions)")
        con.write(str(sch.trace))
    if sch is not None and opts.json:
        con.heading("trace as JSON")
        con.write(json.dumps(sch.trace.as_json(), indent=1))
    lowered = None
    # --local-pad is about the lowered IR: on its own it means "--lower with local padding"
    # (it used to print nothing more than without it).
    show_lowered = opts.lower or (opts.local_pad and not opts.cuda)
    if show_lowered or opts.cuda:
        with loopir.PassContext(config={"tir.enable_local_pad": opts.local_pad}):
            lowered = loopir.lower(func)
    if show_lowered and lowered is not None:
        con.heading(f"lowered (tir.enable_local_pad={opts.local_pad})")
        con.write(lowered.script())
    if opts.cuda and lowered is not None:
        from loopir.codegen_cuda import emit_cuda

        con.heading("CUDA source")
        con.write(emit_cuda(lowered).source.rstrip("\n"))
    return 0
