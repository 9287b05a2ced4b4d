"""Answers of the symbolic race proof, remembered by the question they answer.

ThreadSync and the emitted kernel's race check ask
[`prove_exclusive`][loopir.passes.race_prove.prove_exclusive] about the same accesses: ThreadSync
asks about one store in two planning contexts (the summary of a compound statement and that of
the store itself give two access objects), and the race check of the lowered kernel asks again
about the statements ThreadSync left as they were (a write-back after the last barrier, whose
barrier count is one constant for every thread). Each proof costs about a millisecond of
expression rewriting; the answer is a function of the question alone, so it is kept.

The key is everything the proof reads, compared exactly: the ``who`` / ``fixed`` tags, the flags,
and per access its buffer (by identity), the structural keys of its indices, guards and (with
``counts``) barrier count, every enclosing loop's variable (by identity), start, extent, kind and
tag, and (with ``counts``) its barrier loops' variables and which of them are the other access's;
with ``same_value`` the stored value's key. The launch extents are read through a function: an
entry records the tags its proof read and their values, and answers only a question whose function
gives the same values for them (ThreadSync knows the block's extents only, the race check the
grid's too; the questions of one block read the same ones). Variables and buffers are compared by
identity and kept alive by the entry (their ids are never reused while it exists; no statement is
kept), and IR nodes are immutable: a hit is the same computation on the same inputs, so it returns
the answer the proof would give.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loopir import arith
from loopir.arith.canonical import ExprKeys
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars

__all__ = ["Answers", "ANSWERS", "question_key", "vacuous_counts"]

Key = tuple[Any, ...]
Extent = Callable[[str], "int | None"]
Reads = tuple[tuple[str, "int | None"], ...]


def question_key(
    w: Any, x: Any, who: Sequence[str],
    fixed: Sequence[str], counts: bool, same_value: bool, same_iteration: Sequence[Any] = (),
) -> tuple[Key, tuple[Any, ...]]:  # fmt: skip
    """The key of one question to ``prove_exclusive`` (see the module doc) and the objects
    whose identities it records (to keep alive with the entry)."""
    keys = ExprKeys()
    pins: list[Any] = []

    def ident(obj: Any) -> int:
        pins.append(obj)
        return id(obj)

    def access(acc: Any) -> Key:
        loops = tuple(
            (ident(f.loop_var), keys.key(f.min), keys.key(f.extent), f.kind, f.thread_tag)
            for f in acc.loops
        )  # fmt: skip
        out: Key = (
            ident(acc.buffer), tuple(keys.key(i) for i in acc.indices),
            tuple(keys.key(c) for c in acc.conds), loops,
        )  # fmt: skip
        if counts:
            out += (keys.key(acc.count),
                    tuple((ident(f.loop_var), always, phase) for f, always, phase in acc.barrier_loops))
        return out

    # the proof compares the two accesses' barrier loops pairwise by identity (no loop object
    # is kept: it would keep its whole body alive)
    same_loops = tuple(fw is fx for (fw, *_), (fx, *_) in zip(w.barrier_loops, x.barrier_loops)) \
        if counts else ()  # fmt: skip
    key: Key = (
        tuple(who), tuple(fixed), counts, same_value, w is x,
        access(w), access(x), same_loops,
        keys.key(w.stmt.value) if same_value else None,
        tuple(ident(v) for v in same_iteration),
    )  # fmt: skip
    return key, (*pins, *keys.pinned())


def vacuous_counts(w: Any, x: Any) -> bool:
    """Whether asking for equal barrier counts adds nothing to the question about ``w`` and
    ``x``: both counts are one constant (no variable: every instance of either access has
    passed that many barriers) and no loop orders them by iteration (no barrier loop). The
    proof's extra equation is then ``c == c``, which holds for every pair of instances."""
    if w.barrier_loops or x.barrier_loops:
        return False
    cw = _constant(w.count)
    return cw is not None and cw == _constant(x.count)


def _constant(e: PrimExpr) -> int | None:
    """The value of ``e`` when it has no variable (a sum of constants), else None."""
    if type(e) is IntImm:
        return e.value
    if type(e) is Var or collect_vars(e):
        return None
    s = arith.simplify(e)
    return s.value if type(s) is IntImm else None


class Answers:
    """A bounded table of answers: per key (the question less the launch extents), the
    extents the proof read, the pinned objects and the answer; emptied when it reaches
    ``limit`` keys (a compile asks a few dozen questions)."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._table: dict[Key, list[tuple[Reads, tuple[Any, ...], bool]]] = {}

    def get(self, key: Key, extent: Extent) -> bool | None:
        """The answer to ``key`` asked under ``extent``: that of an entry whose proof read the
        same extent of every tag it read (it then computed what a new proof would)."""
        for reads, _pins, answer in self._table.get(key, ()):
            if all(extent(tag) == value for tag, value in reads):
                return answer
        return None

    def prove(self, key: Key, pins: tuple[Any, ...], extent: Extent,
              proof: Callable[[Extent], bool]) -> bool:  # fmt: skip
        """The remembered answer, or ``proof(extent)``'s, remembered with the extents it read."""
        answer = self.get(key, extent)
        if answer is not None:
            return answer
        reads: dict[str, int | None] = {}

        def reading(tag: str) -> int | None:
            value = reads[tag] = extent(tag)
            return value

        answer = proof(reading)
        if len(self._table) >= self.limit:
            self._table.clear()
        self._table.setdefault(key, []).append((tuple(reads.items()), pins, answer))
        return answer

    def clear(self) -> None:
        self._table.clear()

    def __len__(self) -> int:
        return sum(map(len, self._table.values()))


#: The answers of this process's proofs.
ANSWERS = Answers()
