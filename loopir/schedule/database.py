"""A database of tuned schedules: the best trace per workload and target, as JSON lines.

Each line is one measured candidate::

    {"format": 1, "loopir": "0.1.0", "workload": "<key>", "target": "cuda", "bucket": null,
     "time_ms": 0.21, "trace": {...Trace.as_json()...}}

The workload key hashes the function's printed IR (its name left out), so a schedule tuned
for a function applies to any structurally identical one. ``bucket`` names a range of shapes
(DietCode: one tuned schedule per bucket, local padding making the tile shape-independent).

Loading never fails on a bad file: a line that is not JSON, not a record, from another format or
loopir version, or whose trace does not load is skipped with a
[`DatabaseWarning`][loopir.schedule.database.DatabaseWarning] naming the file and line; a stored
trace that no longer applies to the function
([`Database.apply`][loopir.schedule.database.Database.apply]) is skipped the same way, so a stale
database gives the untuned function, never a wrong one.

>>> import loopir, tempfile, os
>>> from loopir.testing.workloads import matmul
>>> db = Database(os.path.join(tempfile.mkdtemp(), "tuned.jsonl"))
>>> sch = loopir.Schedule(matmul(16, 8, 12).func)
>>> i, j, k = sch.get_loops(sch.get_block("C"))
>>> _ = sch.split(i, [None, 4])
>>> db.commit(sch.trace, matmul(16, 8, 12).func, "cpu", time_ms=0.5)
>>> loopir.structural_equal(db.apply(matmul(16, 8, 12).func, "cpu"), sch.func)
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from loopir.errors import LoopIRError, LoopIRWarning
from loopir.ir.printer import script
from loopir.ir.stmt import PrimFunc

logger = logging.getLogger(__name__)

FORMAT = 1


class DatabaseWarning(LoopIRWarning):
    """A database line or stored trace was skipped (the message says which and why)."""


def bucket_label(ranges: Mapping[str, tuple[int, int]]) -> str:
    """The label of a shape bucket: ``{"n": (1, 256)}`` is ``"n=1..256"`` (both ends included;
    several sizes sorted by name, comma-separated)."""
    parts = []
    for name in sorted(ranges):
        lo, hi = ranges[name]
        if not (isinstance(lo, int) and isinstance(hi, int)) or isinstance(lo, bool) or isinstance(hi, bool) \
                or not 1 <= lo <= hi:  # fmt: skip
            raise LoopIRError(f"bucket: size {name!r} needs ints 1 <= lo <= hi, got {(lo, hi)!r}")
        parts.append(f"{name}={lo}..{hi}")
    if not parts:
        raise LoopIRError("bucket: no size ranges given")
    return ",".join(parts)


def parse_bucket(label: str) -> dict[str, tuple[int, int]]:
    """The ranges of a [`bucket_label`][loopir.schedule.database.bucket_label].

    Raises
    ------
    LoopIRError
        For a label that is not ``name=lo..hi[,name=lo..hi...]``.
    """
    out: dict[str, tuple[int, int]] = {}
    try:
        for part in label.split(","):
            name, rng = part.split("=")
            lo, hi = rng.split("..")
            out[name.strip()] = (int(lo), int(hi))
    except ValueError:
        raise LoopIRError(f"bucket: malformed label {label!r} (expected name=lo..hi[,...])") from None
    bucket_label(out)  # checks the ranges
    return out


def _version() -> str:
    from loopir import __version__

    return __version__


def workload_key(func: PrimFunc) -> str:
    """A key equal for functions that print the same (the function's name left out)."""
    text = script(attrs.evolve(func, name="main"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@attrs.frozen
class Record:
    """One measured candidate: the workload, target, shape bucket, trace and time."""

    workload: str
    target: str
    bucket: str | None
    time_ms: float
    trace: dict[str, Any]
    loopir: str

    def as_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "loopir": self.loopir, "workload": self.workload,
                "target": self.target, "bucket": self.bucket, "time_ms": self.time_ms,
                "trace": self.trace}  # fmt: skip


class Database:
    """Best traces per (workload, target, bucket), stored as JSON lines at ``path``.

    Parameters
    ----------
    path
        The file (created on the first [`commit`][loopir.schedule.database.Database.commit]; a
        missing file is an empty database).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._records: list[Record] = list(self._load())

    @classmethod
    def of(cls, value: Any, where: str) -> Database:
        """``value`` if it is a Database, else the database at the path ``value`` (what the
        ``database=`` parameters of ``build`` and ``tune`` take).

        Raises
        ------
        LoopIRError
            Naming ``where`` (``"tune"``, ``"build"``) when ``value`` is neither.
        """
        if isinstance(value, Database):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls(value)
        raise LoopIRError(
            f"{where}: database must be a Database or the path of one, got "
            f"{type(value).__name__}: {value!r}"
        )

    # -- reading -----------------------------------------------------------------------------
    def _load(self) -> Iterator[Record]:
        if not self.path.exists():
            return
        from loopir.schedule.trace import Trace

        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{self.path}:{n}"
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                if data.get("format") != FORMAT or data.get("loopir") != _version():
                    self._skip(where, f"written by format {data.get('format')!r} / loopir "
                               f"{data.get('loopir')!r}, this is format {FORMAT} / {_version()}")  # fmt: skip
                    continue
                rec = Record(
                    workload=str(data["workload"]), target=str(data["target"]),
                    bucket=None if data.get("bucket") is None else str(data["bucket"]),
                    time_ms=float(data["time_ms"]), trace=dict(data["trace"]),
                    loopir=str(data["loopir"]),
                )  # fmt: skip
                Trace.from_json(rec.trace)  # a trace that does not load is not a record
            except (ValueError, KeyError, TypeError, LoopIRError) as exc:
                self._skip(where, f"unreadable record ({type(exc).__name__}: {exc})")
                continue
            yield rec

    @staticmethod
    def _skip(where: str, why: str) -> None:
        warnings.warn(f"tuning database {where}: {why}; skipped", DatabaseWarning, stacklevel=3)

    def __len__(self) -> int:
        return len(self._records)

    def best(self, func: PrimFunc, target: str, bucket: str | None = None) -> Record | None:
        """The fastest record for ``func``'s workload on ``target`` (and ``bucket``), or None."""
        key = workload_key(func)
        hits = [r for r in self._records if r.workload == key and r.target == target and r.bucket == bucket]
        return min(hits, key=lambda r: r.time_ms, default=None)

    def buckets(self, func: PrimFunc, target: str) -> list[str]:
        """The shape buckets with records for ``func``'s workload on ``target``, sorted."""
        key = workload_key(func)
        return sorted({r.bucket for r in self._records if r.workload == key and r.target == target
                       and r.bucket is not None})  # fmt: skip

    def apply(self, func: PrimFunc, target: str, bucket: str | None = None) -> PrimFunc | None:
        """``func`` scheduled by its best stored trace, or None (no record, or a trace that no
        longer applies: a DatabaseWarning says so)."""
        from loopir.schedule.schedule import Schedule
        from loopir.schedule.trace import Trace

        rec = self.best(func, target, bucket)
        if rec is None:
            return None
        sch = Schedule(func)
        try:
            Trace.from_json(rec.trace).apply_to(sch)
        except LoopIRError as exc:
            self._skip(str(self.path), f"the best trace for {func.name!r} no longer applies ({exc})")
            return None
        return sch.func

    # -- writing -----------------------------------------------------------------------------
    def commit(self, trace: Any, func: PrimFunc, target: str, time_ms: float,
               bucket: str | None = None) -> None:  # fmt: skip
        """Append a measured candidate (``trace`` applied to ``func`` took ``time_ms``)."""
        if not (isinstance(time_ms, (int, float)) and not isinstance(time_ms, bool) and time_ms >= 0):
            raise LoopIRError(f"Database.commit: time_ms must be a non-negative number, got {time_ms!r}")
        rec = Record(workload_key(func), str(target), bucket, float(time_ms), trace.as_json(), _version())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec.as_json(), sort_keys=True) + "\n")
        self._records.append(rec)


__all__ = ["Database", "DatabaseWarning", "Record", "bucket_label", "parse_bucket", "workload_key"]
