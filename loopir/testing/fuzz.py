"""Schedule fuzzing: random primitive calls, each checked against the unscheduled function.

[`ScheduleFuzzer`][loopir.testing.fuzz.ScheduleFuzzer] holds a
[`Schedule`][loopir.schedule.schedule.Schedule] of a workload and a pool of every handle it has
produced (stale ones included, to exercise stale-handle errors). A
[`Chooser`][loopir.testing.fuzz.Chooser] (``random.Random`` or hypothesis' ``data.draw``) picks a
primitive and its arguments -- often valid, sometimes deliberately wrong -- and
[`ScheduleFuzzer.step`][loopir.testing.fuzz.ScheduleFuzzer.step] applies it and checks the contract:

- the primitive either raises [`ScheduleError`][loopir.errors.ScheduleError], leaving the function
  and the trace unchanged, or it succeeds, the function passes ``loopir.verify`` and the CPU
  executor computes the same outputs as the unscheduled function on the same random inputs;
- any other exception is a bug.

[`ScheduleFuzzer.finish`][loopir.testing.fuzz.ScheduleFuzzer.finish] then replays the trace through
its Python text and its JSON form (both must give a structurally equal function), parses the
function's printed text back (``loopir.script``; also each lowered function's) and lowers the
function with ``tir.enable_local_pad`` off and on (both lowered functions must compute the same
outputs).

A violation raises [`FuzzFinding`][loopir.testing.fuzz.FuzzFinding] whose message has a pasteable
reproducer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from loopir.errors import LoopIRError, PassError, ScheduleError
from loopir.ir.expr import IntImm
from loopir.ir.stmt import Block, For
from loopir.testing import (
    EquivalenceError,
    assert_outputs_equal,
    is_lowered,
    random_inputs,
    run_cpu,
    run_cpu_orders,
)
from loopir.testing.fuzz_support import (
    _elements,
    _fast_build_options,
    _max_elements,
    _short_tb,
    bind_for_gpu,
    cross_thread_refusal,
    draw_workload,
)
from loopir.testing.fuzz_tvm import TVMDraws
from loopir.testing.workloads import Workload

if TYPE_CHECKING:
    from loopir.schedule import Schedule

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "Chooser", "RandomChooser", "FuzzFinding", "Call", "ScheduleFuzzer", "PRIMITIVES", "EXCLUDED",
    "draw_workload", "fuzz_many", "bind_for_gpu", "cross_thread_refusal",
]  # fmt: skip

GOOD_TAGS = (
    "blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y", "vthread.x", "blockIdx.z",
    "threadIdx.z", "vthread.y",
)  # fmt: skip
"""Thread tags a loop may be bound to, plus some that no primitive accepts."""
BAD_TAGS = ("threadIdx.w", "warp", "", "blockIdx")
SCOPES = ("global", "shared", "local")
BAD_SCOPES = ("texture", "", "Shared")

PRIMITIVES: dict[str, int] = {
    "split": 5, "get_block": 2, "get_loops": 3, "fuse": 3, "reorder": 3, "bind": 2,
    "vectorize": 1, "unroll": 1, "parallel": 1, "cache_read": 3, "cache_write": 3,
    "compute_at": 4, "reverse_compute_at": 3, "compute_inline": 3, "reverse_compute_inline": 2,
    "decompose_reduction": 2, "pad": 2, "get_producers": 1, "get_consumers": 1, "set_scope": 2,
    "storage_align": 1, "rfactor": 1, "transform_layout": 1, "get_child_blocks": 1,
    "get_output_blocks": 1, "add_unit_loop": 1, "loop_partition": 2, "reindex": 2,
    "decompose_padding": 2, "blockize": 2, "tensorize": 2, "transform_block_layout": 1,
}  # fmt: skip
"""The primitives the fuzzer calls, with relative weights."""

EXCLUDED: dict[str, str] = {
    "annotate": "free-form keys; the annotation-driven passes have their own property tests",
    "unannotate": "the inverse of annotate",
    "sample_perfect_tile": "sampling instructions are drawn by design spaces (the tuner)",
    "sample_categorical": "sampling instructions are drawn by design spaces (the tuner)",
    "sample_compute_location": "sampling instructions are drawn by design spaces (the tuner)",
}
"""Registered primitives the fuzzer leaves out, and why; with PRIMITIVES this covers the
whole registry (``loopir.schedule.schedule.INSTRUCTION_KINDS``, checked by a test), so a
new primitive is either fuzzed or excluded on purpose."""


class Chooser(Protocol):
    """Where the fuzzer's random decisions come from."""

    def integer(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]`` (both inclusive)."""
        ...

    def choice(self, options: Sequence[T]) -> T:
        """One element of a non-empty sequence."""
        ...

    def weighted(self, options: Mapping[str, int]) -> str:
        """One key, with probability proportional to its weight."""
        ...


class RandomChooser:
    """A [`Chooser`][loopir.testing.fuzz.Chooser] over ``random.Random(seed)``."""

    def __init__(self, seed: int = 0) -> None:
        import random

        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def weighted(self, options: Mapping[str, int]) -> str:
        keys = list(options)
        return self.rng.choices(keys, weights=[options[k] for k in keys])[0]


def _rare(ch: Chooser, n: int) -> bool:
    """True with probability 1/n; False for the simplest draw (0), so that hypothesis'
    minimal examples take the common, valid branch."""
    return ch.integer(0, n - 1) == n - 1


class FuzzFinding(LoopIRError, AssertionError):
    """A schedule broke the contract (crash, wrong answer, bad replay...).

    Attributes
    ----------
    category
        Short label: ``"crash"``, ``"changed-on-error"``, ``"verify"``, ``"wrong-output"``,
        ``"replay-python"``, ``"replay-json"``, ``"script"``, ``"lower"``, ``"local-pad"``.
    reproducer
        Python that reproduces it.
    """

    def __init__(self, category: str, message: str, reproducer: str) -> None:
        self.category = category
        self.reproducer = reproducer
        super().__init__(f"[{category}] {message}\n--- reproducer ---\n{reproducer}")


@dataclass
class Call:
    """One primitive call: the method name, its arguments, and their Python text."""

    kind: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    text: str = ""


class ScheduleFuzzer(TVMDraws):
    """Applies random primitives to a schedule of ``workload``, checking every step.

    Parameters
    ----------
    workload
        What to schedule.
    seed
        Seed of the random input data.
    build_options
        Options of the CPU executor builds (default: ``-O0 -pipe``, gold linker when
        available, bounds checks on).
    check_every_step
        Run the executor after every successful step (else only in
        [`finish`][loopir.testing.fuzz.ScheduleFuzzer.finish]).
    gpu_lowering
        In [`finish`][loopir.testing.fuzz.ScheduleFuzzer.finish], also bind a copy's loop nests to
        the GPU ([`bind_for_gpu`][loopir.testing.fuzz.bind_for_gpu]) and check that copy and its
        lowerings.
    order_seeds
        Seeds of the random thread order that lowered functions run with (the executor's
        ``thread_order="random"``, so that a missing barrier is a wrong output); default
        ``(seed, seed + 1)``.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        seed: int = 0,
        build_options: Mapping[str, Any] | None = None,
        check_every_step: bool = True,
        gpu_lowering: bool = True,
        order_seeds: Sequence[int] | None = None,
    ) -> None:
        import loopir
        from loopir.testing.intrinsics import register_test_intrinsics

        register_test_intrinsics()  # what tensorize draws from
        self.workload = workload
        self.base = workload.func
        self.sch: Schedule = loopir.Schedule(self.base)
        self.build_options = dict(build_options or _fast_build_options())
        self.check_every_step = check_every_step
        self.gpu_lowering = gpu_lowering
        self.order_seeds = tuple(order_seeds) if order_seeds is not None else (seed, seed + 1)
        self.inputs = random_inputs(self.base, workload.sizes, seed)
        self.expected = run_cpu(self.base, self.inputs, self.build_options)
        self.blocks: list[Any] = []
        self.loops: list[Any] = []
        self._names: dict[int, str] = {}
        self._lines: list[str] = []  # successful calls, as Python
        self.steps = 0
        self.errors = 0
        #: Per primitive: how many calls succeeded / raised ScheduleError.
        self.succeeded: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        #: gpu-bound copies whose lowering refused with a PassError (see
        #: [`finish`][loopir.testing.fuzz.ScheduleFuzzer.finish]).
        self.gpu_refused = 0
        #: lowerings (local padding off or on, of the schedule or its gpu-bound copy) that
        #: LowerCrossThreadReduction refused with a PassError saying why.
        self.lowering_refused = 0
        # Start as a user would: a handle to every block and its loops.
        for name in self._block_names():
            rv = self.sch.get_block(name)
            self._record_outputs("get_block", rv, (name,), {})
            self._record_outputs("get_loops", self.sch.get_loops(rv), (rv,), {})

    # --- reproducers -------------------------------------------------------------------------
    def _name(self, rv: Any) -> str:
        return self._names.get(id(rv), repr(rv))

    def _text(self, value: Any) -> str:
        from loopir.schedule import BlockRV, LoopRV

        if isinstance(value, (BlockRV, LoopRV)):
            return self._name(value)
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self._text(v) for v in value) + "]"
        return repr(value)

    def reproducer(self, failing: Call | None = None, extra: str = "") -> str:
        """Python that rebuilds the workload and replays the successful calls (then ``failing``)."""
        lines = [
            "import loopir, loopir.testing.fuzz, loopir.testing.intrinsics, loopir.testing.workloads",
            "loopir.testing.intrinsics.register_test_intrinsics()",
            f"w = {self.workload.source}",
            "sch = loopir.Schedule(w.func)",
            *self._lines,
        ]
        if failing is not None:
            lines.append(f"{failing.text}  # <- fails here")
        if extra:
            lines.append(extra)
        return "\n".join(lines)

    # --- drawing calls -----------------------------------------------------------------------
    def _block_names(self) -> list[str]:
        from loopir.schedule import tree

        return [n for n in tree.block_names(self.sch.func) if n != "root"]

    def _extent(self, loop: Any) -> int | None:
        try:
            node = self.sch.get(loop)
        except ScheduleError:
            return None
        return node.extent.value if isinstance(node, For) and isinstance(node.extent, IntImm) else None

    def _block_node(self, rv: Any) -> Block | None:
        try:
            node = self.sch.get(rv)
        except ScheduleError:
            return None
        return node if isinstance(node, Block) else None

    def _pick_block(self, ch: Chooser) -> Any:
        if not self.blocks or _rare(ch, 16):
            # Sometimes a loop or a non-handle where a block is expected.
            odd = [*self.loops[:1], "C", 3]
            if self.blocks and ch.integer(0, 1):
                return ch.choice(self.blocks)
            return ch.choice(odd)
        return ch.choice(self.blocks)

    def _pick_loop(self, ch: Chooser) -> Any:
        if not self.loops or _rare(ch, 16):
            odd = [*self.blocks[:1], None, 0]
            if self.loops and ch.integer(0, 1):
                return ch.choice(self.loops)
            return ch.choice(odd)
        return ch.choice(self.loops)

    def _loops_of(self, ch: Chooser, avoid: str | None = None) -> list[Any]:
        """The live loops above one random block (outermost first), via the schedule."""
        names = [n for n in self._block_names() if n != avoid]
        if not names:
            return []
        name = ch.choice(names)
        try:
            rv = self.sch.get_block(name)
            loops = self.sch.get_loops(rv)
        except ScheduleError:
            return []
        self._record_outputs("get_block", rv, (name,), {})
        self._record_outputs("get_loops", loops, (rv,), {})
        return list(loops)

    def _dataflow_pair(self, ch: Chooser, reverse: bool) -> tuple[Any, list[Any]] | None:
        """(block to move, loops of the block it feeds / is fed by), or None.

        compute_at moves a producer under a loop of one of its consumers; reverse_compute_at
        a consumer under a loop of one of its producers.
        """
        from loopir.schedule import tree

        blocks = [s for s, _ in tree.walk(self.sch.func) if isinstance(s, Block) and s.name != "root"]
        pairs = []
        for p in blocks:
            written = {r.buffer for r in p.writes}
            for c in blocks:
                if c is not p and any(r.buffer in written for r in c.reads):
                    pairs.append((c.name, p.name) if reverse else (p.name, c.name))
        if not pairs:
            return None
        moved, anchor = ch.choice(pairs)
        try:
            rv = self.sch.get_block(moved)
            self._record_outputs("get_block", rv, (moved,), {})
            anchor_rv = self.sch.get_block(anchor)
            self._record_outputs("get_block", anchor_rv, (anchor,), {})
            loops = self.sch.get_loops(anchor_rv)
            self._record_outputs("get_loops", loops, (anchor_rv,), {})
        except ScheduleError:
            return None
        return (rv, list(loops)) if loops else None

    def _factors(self, ch: Chooser, extent: int | None) -> list[Any]:
        n = ch.integer(2, 3)
        mode = ch.integer(0, 9)
        if mode == 9:  # invalid on purpose
            return ch.choice([[0, None], [None, None], [-1, 4], [1], [], [2, "x"], [1.5, None]])
        if extent is None:
            return [None] + [ch.integer(1, 4) for _ in range(n - 1)]
        facs: list[Any] = [ch.integer(1, max(1, extent)) for _ in range(n)]
        if mode <= 6:
            facs[ch.integer(0, n - 1)] = None
        elif mode == 7:
            # Exact: divisors of the extent.
            facs = [1] * n
            rest = extent
            for i in range(n - 1):
                divs = [d for d in range(1, rest + 1) if rest % d == 0]
                facs[i] = ch.choice(divs)
                rest //= facs[i]
            facs[-1] = rest
        return facs

    def draw(self, ch: Chooser) -> Call:
        """A random primitive call (valid or not) on the current schedule."""
        kind = ch.weighted(PRIMITIVES)
        args: tuple[Any, ...]
        kwargs: dict[str, Any] = {}
        if kind == "get_block":
            names = self._block_names()
            name = ch.choice(names) if names and not _rare(ch, 8) else ch.choice(["nope", "root", 7])
            args = (name,)
        elif kind == "split":
            loop = self._pick_loop(ch)
            extent = self._extent(loop)
            args = (loop, self._factors(ch, extent))
            if extent is not None and _rare(ch, 6):  # symbolic: an unchecked promise
                kwargs["disable_predication"] = True
        elif kind in ("fuse", "reorder"):
            chain = self._loops_of(ch)
            if len(chain) >= 2 and not _rare(ch, 6):
                lo = ch.integer(0, len(chain) - 2)
                hi = ch.integer(lo + 1, len(chain) - 1)
                picked = chain[lo : hi + 1]
                if kind == "reorder":
                    picked = [picked[ch.integer(0, len(picked) - 1)] for _ in picked] if _rare(ch, 10) else picked
                    order = list(picked)
                    for i in range(len(order) - 1, 0, -1):  # Fisher-Yates with the chooser
                        j = ch.integer(0, i)
                        order[i], order[j] = order[j], order[i]
                    picked = order
                args = tuple(picked)
            else:
                args = tuple(self._pick_loop(ch) for _ in range(ch.integer(1, 3)))
        elif kind == "bind":
            tags = GOOD_TAGS if not _rare(ch, 8) else BAD_TAGS
            args = (self._pick_loop(ch), ch.choice(tags))
        elif kind in ("vectorize", "unroll", "parallel"):
            args = (self._pick_loop(ch),)
        elif kind in ("cache_read", "cache_write", "set_scope"):
            block = self._pick_block(ch)
            node = self._block_node(block)
            regions = () if node is None else (node.reads if kind == "cache_read" else node.writes)
            r = ch.integer(0, 9)
            if regions and r < 6:
                index: Any = regions[ch.integer(0, len(regions) - 1)].buffer.name
            elif regions and r < 8:
                index = ch.integer(0, len(regions) - 1)
            else:
                index = ch.choice(["nope", -1, 5, None])
            scope = ch.choice(SCOPES) if not _rare(ch, 10) else ch.choice(BAD_SCOPES)
            args = (block, index, scope)
            if kind != "set_scope" and _rare(ch, 6):
                kwargs["consumer_blocks"] = [self._pick_block(ch)]
        elif kind == "storage_align":
            block = self._pick_block(ch)
            node = self._block_node(block)
            writes = () if node is None else node.writes
            index = writes[0].buffer.name if writes and not _rare(ch, 5) else ch.choice([0, "nope", 3])
            factor = ch.choice([1, 2, 8, 16, 32, 33]) if not _rare(ch, 8) else ch.choice([0, -4])
            offset = ch.integer(0, max(factor - 1, 0)) if not _rare(ch, 8) else ch.choice([-1, factor])
            args = (block, index, ch.integer(-1, 2), factor, offset)
        elif kind in ("compute_at", "reverse_compute_at"):
            pair = self._dataflow_pair(ch, reverse=kind == "reverse_compute_at")
            if pair is not None and not _rare(ch, 4):
                # A producer/consumer pair: move one under a loop of the other.
                block, loops = pair
                args = (block, ch.choice(loops))
            else:
                block = self._pick_block(ch)
                node = self._block_node(block)
                loops = self._loops_of(ch, avoid=node.name) if node is not None else []
                args = (block, ch.choice(loops) if loops else self._pick_loop(ch))
            kwargs["preserve_unit_loops"] = bool(ch.integer(0, 1))
            if _rare(ch, 3):
                kwargs["index"] = ch.choice([-2, -1, 0, 1, 2, -3])
        elif kind in ("get_loops", "compute_inline", "reverse_compute_inline", "get_producers",
                      "get_consumers"):  # fmt: skip
            args = (self._pick_block(ch),)
        elif kind == "decompose_reduction":
            args = (self._pick_block(ch), self._pick_loop(ch))
        elif kind == "transform_layout":
            block = self._pick_block(ch)
            node = self._block_node(block)
            n = len(node.writes[0].buffer.shape) if node is not None and node.writes else 2
            names = [f"i{k}" for k in range(n)]
            maps = [names, names[::-1], [f"{names[0]} // 2", *names[1:], f"{names[0]} % 2"] if n else []]
            if _rare(ch, 8):
                maps.append([f"{names[0]} // 2", *names[1:]] if n else ["0"])  # not one-to-one
            args = (block, 0, f"lambda {', '.join(names)}: ({', '.join(ch.choice(maps))},)")
        elif kind == "transform_block_layout":
            block = self._pick_block(ch)
            node = self._block_node(block)
            n = max(1, len(node.iter_vars) if node is not None else 2)
            if _rare(ch, 8):  # a map over too few or too many indices
                n = max(1, n + ch.choice([-1, 1]))
            names = [f"i{k}" for k in range(n)]
            maps = [names, names[::-1], [f"{names[0]} // 2", *names[1:], f"{names[0]} % 2"]]
            if _rare(ch, 8):
                maps.append([f"{names[0]} // 2", *names[1:]])  # not one-to-one
            args = (block, f"lambda {', '.join(names)}: ({', '.join(ch.choice(maps))},)")
        elif kind == "rfactor":
            args = (self._pick_loop(ch), ch.choice([0, 0, 1, -1, 5]))
        elif kind in ("get_child_blocks", "add_unit_loop"):
            args = (self._pick_loop(ch) if ch.integer(0, 1) else self._pick_block(ch),)
        elif kind == "get_output_blocks":
            args = (self._root(ch) if not _rare(ch, 3) else self._pick_block(ch),)
        elif kind == "loop_partition":
            loop = self._pick_loop(ch)
            args = (loop, self._partition_factors(ch, self._extent(loop)))
        elif kind == "reindex":
            args = self._reindex_args(ch)
        elif kind == "decompose_padding":
            args = self._padding_args(ch)
        elif kind == "blockize":
            args, kwargs = self._blockize_args(ch)
        elif kind == "tensorize":
            args = self._tensorize_args(ch)
        elif kind == "pad":
            block = self._pick_block(ch)
            node = self._block_node(block)
            n = len(node.iter_vars) if node is not None else 2
            if _rare(ch, 8):
                n = max(0, n + ch.choice([-1, 1]))
            facs: list[Any] = [ch.integer(1, 4) for _ in range(n)]
            if facs and _rare(ch, 10):
                facs[0] = ch.choice([0, -2, None, "4"])
            args = (block, facs)
        else:  # pragma: no cover - PRIMITIVES and this function are kept in sync
            raise LoopIRError(f"fuzz: unknown primitive {kind!r}")
        parts = [self._text(a) for a in args] + [f"{k}={self._text(v)}" for k, v in kwargs.items()]
        return Call(kind, args, kwargs, f"sch.{kind}({', '.join(parts)})")

    # --- applying and checking ---------------------------------------------------------------
    def _record_outputs(self, kind: str, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        from loopir.schedule import BlockRV

        outs = [] if out is None else list(out) if isinstance(out, list) else [out]
        names = []
        for rv in outs:
            prefix = "b" if isinstance(rv, BlockRV) else "l"
            name = f"{prefix}{len(self._names)}"
            self._names[id(rv)] = name
            names.append(name)
            (self.blocks if isinstance(rv, BlockRV) else self.loops).append(rv)
        parts = [self._text(a) for a in args] + [f"{k}={self._text(v)}" for k, v in kwargs.items()]
        call = f"sch.{kind}({', '.join(parts)})"
        if not names:
            self._lines.append(call)
        elif isinstance(out, list):
            self._lines.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call}")
        else:
            self._lines.append(f"{names[0]} = {call}")

    def step(self, call: Call) -> bool:
        """Apply ``call`` and check the contract; True when the primitive succeeded.

        Raises
        ------
        FuzzFinding
            On any contract violation.
        """
        import loopir

        before_func = self.sch.func
        before_len = len(self.sch.trace)
        self.steps += 1
        try:
            out = getattr(self.sch, call.kind)(*call.args, **call.kwargs)
        except ScheduleError as e:
            self.errors += 1
            self.refused[call.kind] = self.refused.get(call.kind, 0) + 1
            if self.sch.func is not before_func or len(self.sch.trace) != before_len:
                raise FuzzFinding(
                    "changed-on-error",
                    f"{call.kind} raised ScheduleError but changed the schedule: {e.message}",
                    self.reproducer(call),
                ) from e
            self._check_error_text(e, call)
            return False
        except Exception as e:  # noqa: BLE001 - anything but ScheduleError is the finding
            raise FuzzFinding(
                "crash",
                f"{call.kind} raised {type(e).__name__}: {e}\n{_short_tb(e)}",
                self.reproducer(call),
            ) from e
        self.succeeded[call.kind] = self.succeeded.get(call.kind, 0) + 1
        self._record_outputs(call.kind, out, call.args, call.kwargs)
        if self.sch.func is before_func:
            return True
        try:
            loopir.verify(self.sch.func)
        except Exception as e:  # noqa: BLE001
            raise FuzzFinding(
                "verify", f"after {call.kind}: {type(e).__name__}: {e}", self.reproducer()
            ) from e
        if self.check_every_step:
            self._check_outputs(self.sch.func, "after " + call.kind, "wrong-output")
        return True

    def _check_error_text(self, e: ScheduleError, call: Call) -> None:
        # A ScheduleError must name its primitive and print (the IR with the marked node).
        try:
            text = str(e)
        except Exception as exc:  # noqa: BLE001
            raise FuzzFinding(
                "crash", f"str() of the ScheduleError of {call.kind} raised {exc!r}",
                self.reproducer(call),
            ) from exc  # fmt: skip
        if not text or e.primitive is None:
            raise FuzzFinding(
                "error-message",
                f"{call.kind} raised a ScheduleError without a primitive name: {text!r}",
                self.reproducer(call),
            )

    def _check_outputs(self, func: Any, what: str, category: str, extra: str = "") -> None:
        # Lowered functions run their thread blocks in random orders: a race is a wrong output.
        options = dict(self.build_options)
        if is_lowered(func):
            options["thread_order"] = "random"
        order_seed: int | None = None
        try:
            for run_seed, got in run_cpu_orders(func, self.inputs, options, self.order_seeds):
                order_seed = run_seed  # named in the finding
                assert_outputs_equal(self.base, self.expected, got)
        except EquivalenceError as e:
            order = ""
            if order_seed is not None:
                order = f" (thread_order='random', seed={order_seed})"
                extra += (
                    f"\nloopir.build(lowered, target='cpu', thread_order='random', "
                    f"seed={order_seed})(...)  # differs"
                )
            raise FuzzFinding(category, f"{what}{order}: {e}", self.reproducer(extra=extra)) from e
        except Exception as e:  # noqa: BLE001 - the executor must run every verified function
            raise FuzzFinding(
                category, f"{what}: executor raised {type(e).__name__}: {e}",
                self.reproducer(extra=extra),
            ) from e  # fmt: skip

    def run(self, ch: Chooser, n_steps: int) -> None:
        """``n_steps`` random steps, then [`finish`][loopir.testing.fuzz.ScheduleFuzzer.finish]."""
        for _ in range(n_steps):
            self.step(self.draw(ch))
        self.finish()

    def finish(self) -> None:
        """End-of-schedule checks: trace replay (Python and JSON) and local padding on/off.

        Raises
        ------
        FuzzFinding
            On any contract violation.
        """
        import loopir

        if not self.check_every_step:
            self._check_outputs(self.sch.func, "final function", "wrong-output")
        trace = self.sch.trace
        # Python replay: exec the printed trace, as a user pasting it would.
        try:
            ns: dict[str, Any] = {}
            exec(compile(trace.as_python(), "<trace>", "exec"), ns)  # noqa: S102 - our own text
            sch2 = loopir.Schedule(self.base)
            ns["apply_trace"](sch2)
            loopir.assert_structural_equal(self.sch.func, sch2.func)
        except Exception as e:  # noqa: BLE001
            raise FuzzFinding(
                "replay-python", f"{type(e).__name__}: {e}\ntrace:\n{trace.as_python()}",
                self.reproducer(),
            ) from e  # fmt: skip
        # JSON replay through an actual JSON string.
        try:
            text = json.dumps(trace.as_json())
            tr = loopir.Trace.from_json(json.loads(text))
            sch3 = loopir.Schedule(self.base)
            tr.apply_to(sch3)
            loopir.assert_structural_equal(self.sch.func, sch3.func)
        except Exception as e:  # noqa: BLE001
            raise FuzzFinding(
                "replay-json", f"{type(e).__name__}: {e}\ntrace:\n{trace.as_python()}",
                self.reproducer(),
            ) from e  # fmt: skip
        self._check_script(self.sch.func, "the scheduled function", "")
        self._check_lowering(self.sch.func, "")
        if self.gpu_lowering:
            # The same schedule with its loop nests bound to blocks and threads: lowering then
            # exercises thread-loop unification, barriers and virtual threads.
            gpu = self.sch.copy()
            if bind_for_gpu(gpu):
                prefix = "loopir.testing.fuzz.bind_for_gpu(sch)\n"
                try:
                    loopir.verify(gpu.func)
                except Exception as e:  # noqa: BLE001
                    raise FuzzFinding(
                        "verify", f"after bind_for_gpu: {type(e).__name__}: {e}",
                        self.reproducer(extra=prefix.rstrip()),
                    ) from e  # fmt: skip
                self._check_outputs(gpu.func, "after bind_for_gpu", "wrong-output", prefix.rstrip())
                self._check_lowering(gpu.func, prefix)

    def _check_lowering(self, func: Any, prefix: str) -> None:
        """Lower ``func`` with local padding off and on; both must compute the expected outputs."""
        import loopir

        where = "gpu-bound, " if prefix else ""
        for pad in (False, True):
            extra = prefix + (
                f"with loopir.PassContext(config={{'tir.enable_local_pad': {pad}}}):\n"
                "    lowered = loopir.lower(sch.func)"
            )
            try:
                with loopir.PassContext(config={"tir.enable_local_pad": pad}):
                    lowered = loopir.lower(func)
            except PassError as e:
                if cross_thread_refusal(e):
                    # bind accepts a thread-bound reduction loop that LowerCrossThreadReduction
                    # then refuses, saying why (a spatial loop among the reduction loops,
                    # another statement beside the block...): a refusal, not a finding
                    self.lowering_refused += 1
                    logger.debug("cross-thread reduction refused at lowering: %s", e)
                    continue
                if not prefix:
                    raise FuzzFinding(
                        "lower", f"lower (local pad {pad}) raised PassError: {e}",
                        self.reproducer(extra=extra),
                    ) from e  # fmt: skip
                # Bound to threads by bind_for_gpu, a schedule may be one that no GPU kernel
                # implements (e.g. a race on shared memory): a PassError saying so is a refusal.
                self.gpu_refused += 1
                logger.debug("gpu-bound lowering refused: %s", e)
                return
            except Exception as e:  # noqa: BLE001
                raise FuzzFinding(
                    "lower",
                    f"lower ({where}local pad {pad}) raised {type(e).__name__}: {e}\n{_short_tb(e)}",
                    self.reproducer(extra=extra),
                ) from e  # fmt: skip
            self._check_allocations(lowered, pad, extra)
            self._check_script(lowered, f"lowered ({where}local pad {pad})", extra)
            if prefix and self._proven_race(lowered):
                # the CUDA build refuses it (the race checker found two threads that race):
                # a refusal; what the checker lets through must be right in every thread order
                self.gpu_refused += 1
                return
            self._check_outputs(
                lowered, f"lowered ({where}local pad {pad})", "local-pad" if pad else "lower", extra
            )

    def _check_script(self, func: Any, what: str, extra: str) -> None:
        """``func``'s printed text parses back to a structurally equal function."""
        import loopir
        from loopir.script import from_source

        try:
            loopir.assert_structural_equal(func, from_source(func.script()))
        except Exception as e:  # noqa: BLE001
            raise FuzzFinding(
                "script", f"{what}: its printed text does not parse back to it: "
                f"{type(e).__name__}: {e}", self.reproducer(extra=extra),
            ) from e  # fmt: skip

    @staticmethod
    def _proven_race(lowered: Any) -> bool:
        from loopir.passes.race_check import find_races

        return bool(find_races(lowered).races)

    def _check_allocations(self, lowered: Any, pad: bool, extra: str) -> None:
        """Refuse to run a lowered function whose scratch buffers are absurdly large.

        Compaction only shrinks buffers, so an Allocate larger than the largest buffer of the
        function before lowering is a bug, and running it would make the executor allocate
        (and touch) gigabytes.
        """
        from loopir.ir.functor import post_order_visit
        from loopir.ir.stmt import Allocate

        sizes = self.workload.sizes
        limit = max(_max_elements(self.sch.func, sizes), 1) * 4 + 1024
        bad: list[str] = []

        def visit(n: object) -> None:
            if isinstance(n, Allocate):
                size = _elements(n.buffer.shape, sizes)
                if size is not None and size > limit:
                    bad.append(f"{n.buffer.name}{tuple(str(x) for x in n.buffer.shape)}")

        post_order_visit(lowered.body, visit)
        if bad:
            raise FuzzFinding(
                "local-pad" if pad else "lower",
                f"lowered (local pad {pad}) allocates {', '.join(bad)}: more than any buffer "
                f"of the function before lowering ({limit} elements allowed)",
                self.reproducer(extra=extra),
            )


def fuzz_many(
    n_schedules: int,
    n_steps: int,
    *,
    first_seed: int = 0,
    on_finding: Callable[[FuzzFinding], None] | None = None,
) -> tuple[int, int, list[FuzzFinding]]:
    """Fuzz ``n_schedules`` schedules (seeds ``first_seed...``) without stopping at findings.

    Returns
    -------
    tuple
        (schedules, steps, findings).
    """
    findings: list[FuzzFinding] = []
    steps = 0
    for i in range(first_seed, first_seed + n_schedules):
        ch = RandomChooser(i)
        fz = ScheduleFuzzer(draw_workload(ch), seed=i)
        try:
            fz.run(ch, n_steps)
        except FuzzFinding as f:
            findings.append(f)
            if on_finding is not None:
                on_finding(f)
        steps += fz.steps
    return n_schedules, steps, findings
