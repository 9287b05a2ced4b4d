"""Argument draws of the schedule fuzzer for the primitives of issue 29 (``loop_partition``,
``reindex``, ``decompose_padding``, ``get_output_blocks``) and issue 31 (``blockize``,
``tensorize`` with the intrinsics of ``loopir.testing.intrinsics``): a mixin of
:class:`loopir.testing.fuzz.ScheduleFuzzer`, which picks the primitive and checks the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopir.errors import ScheduleError

if TYPE_CHECKING:
    from loopir.ir.stmt import Block
    from loopir.schedule import Schedule
    from loopir.testing.fuzz import Chooser


def _rare(ch: Chooser, n: int) -> bool:
    """True with probability 1/n, False for the simplest draw (as ``fuzz._rare``)."""
    return ch.integer(0, n - 1) == n - 1


class TVMDraws:
    """Draws (valid, and now and then invalid on purpose) for the issue-29 primitives."""

    if TYPE_CHECKING:  # provided by ScheduleFuzzer
        sch: Schedule
        loops: list[Any]

        def _record_outputs(self, kind: str, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...

        def _pick_block(self, ch: Chooser) -> Any: ...

        def _pick_loop(self, ch: Chooser) -> Any: ...

        def _block_node(self, rv: Any) -> Block | None: ...

    def _root(self, ch: Chooser) -> Any:
        rv = self.sch.get_block("root")
        self._record_outputs("get_block", rv, ("root",), {})
        return rv

    def _partition_factors(self, ch: Chooser, extent: int | None) -> list[Any]:
        """Partition sizes summing to less than the extent (one None sometimes); invalid ones
        on purpose now and then."""
        if extent is None or extent < 2 or _rare(ch, 8):
            return ch.choice([[0, None], [None, None], [-1], [], [2, "x"], [extent or 1], [1.5]])
        n = ch.integer(1, min(3, extent - 1))
        facs: list[Any] = []
        left = extent - 1
        for _ in range(n):
            if left < 1:
                break
            facs.append(ch.integer(1, left))
            left -= facs[-1]
        if ch.integer(0, 1):
            facs[ch.integer(0, len(facs) - 1)] = None
        return facs

    def _reindex_args(self, ch: Chooser) -> tuple[Any, ...]:
        block = self._pick_block(ch)
        node = self._block_node(block)
        kind = ch.choice(["read", "write"])
        regions = () if node is None else (node.reads if kind == "read" else node.writes)
        r = ch.integer(0, 9)
        if regions and r < 6:
            spec: Any = (kind, ch.integer(0, len(regions) - 1))
        elif regions and r < 8:
            spec = regions[ch.integer(0, len(regions) - 1)].buffer.name
        else:
            spec = ch.choice([("read", 7), ("both", 0), "nope", 3])
        return (block, spec)

    def _padding_args(self, ch: Chooser) -> tuple[Any, ...]:
        """A padding block (a store of a Select) with one of its loops when there is one."""
        from loopir.ir.expr import Select
        from loopir.ir.stmt import Block, BufferStore
        from loopir.schedule import tree

        pads = [s.name for s, _ in tree.walk(self.sch.func)
                if isinstance(s, Block) and isinstance(s.body, BufferStore)
                and isinstance(s.body.value, Select)]  # fmt: skip
        if pads and not _rare(ch, 4):
            name = ch.choice(pads)
            try:
                rv = self.sch.get_block(name)
                loops = self.sch.get_loops(rv)
            except ScheduleError:
                return (self._pick_block(ch), self._pick_loop(ch))
            self._record_outputs("get_block", rv, (name,), {})
            self._record_outputs("get_loops", loops, (rv,), {})
            if loops:
                return (rv, ch.choice(list(loops)))
        return (self._pick_block(ch), self._pick_loop(ch))

    def _blockize_args(self, ch: Chooser) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A loop (any: the subtree may hold several blocks or not divide), now and then a list
        of sibling blocks, with either ``preserve_unit_iters``."""
        from loopir.schedule import tree

        kwargs = {"preserve_unit_iters": bool(ch.integer(0, 1))}
        if not _rare(ch, 4):
            return (self._pick_loop(ch),), kwargs
        names = [n for n in tree.block_names(self.sch.func) if n != "root"]
        if not names:
            return (self._pick_loop(ch),), kwargs
        picked = [ch.choice(names) for _ in range(ch.integer(1, 2))]
        rvs = []
        for name in dict.fromkeys(picked):
            rv = self.sch.get_block(name)
            self._record_outputs("get_block", rv, (name,), {})
            rvs.append(rv)
        return (rvs,), kwargs

    def _tensorize_args(self, ch: Chooser) -> tuple[Any, ...]:
        """A loop of up to 8 iterations when there is one, with the test intrinsic that suits
        its block (a copy of its extent for a cache copy, the multiply-add of its extent for
        another spatial block, the 4x4x4 matmul or the dot product for a reduction); else any
        loop or block; now and then an unknown intrinsic."""
        from loopir.ir.expr import IntImm
        from loopir.ir.stmt import BlockRealize, For
        from loopir.schedule import tree
        from loopir.testing.intrinsics import TEST_INTRINSICS

        names = list(TEST_INTRINSICS)
        intrin = ch.choice(names) if not _rare(ch, 10) else "test.nope"
        # innermost loops (right above a block) match the one-loop descriptions
        small = [
            (s.loop_var, s.extent.value, tree.child_blocks(s)) for s, _ in tree.walk(self.sch.func)
            if isinstance(s, For) and isinstance(s.extent, IntImm) and 1 <= s.extent.value <= 8
            and (isinstance(s.body, BlockRealize) or _rare(ch, 4))
        ]  # fmt: skip
        if not small or _rare(ch, 4):
            target = self._pick_loop(ch) if ch.integer(0, 1) else self._pick_block(ch)
            return (target, intrin)
        var, n, blocks = ch.choice(small)
        block: Block | None = blocks[0].block if blocks else None
        if block is not None and intrin != "test.nope" and not _rare(ch, 3):
            intrin = _suited(block, n) or intrin
        rv = next((rv for rv, t in self._loop_targets() if t is var), None)
        if rv is None:
            return (self._pick_loop(ch), intrin)
        return (rv, intrin)

    def _loop_targets(self) -> list[tuple[Any, Any]]:
        """(LoopRV, loop var) of the live loop handles of the pool."""
        out = []
        for rv in self.loops:
            try:
                node = self.sch.get(rv)
            except ScheduleError:
                continue
            if node is not None and hasattr(node, "loop_var"):
                out.append((rv, node.loop_var))
        return out


def _suited(block: Block, n: int) -> str | None:
    """The test intrinsic of extent ``n`` whose description has ``block``'s body: a copy
    from global into shared or local memory, or ``T = A * B + 1``; None for other blocks."""
    from loopir.ir.expr import Add, BufferLoad, FloatImm, Mul
    from loopir.ir.stmt import BufferStore

    store = block.body
    if block.init is not None or not isinstance(store, BufferStore):
        return None
    v = store.value
    if isinstance(v, BufferLoad) and v.buffer.scope == "global":
        return {"shared": f"test.copy{n}", "local": f"test.copy{n}_local"}.get(store.buffer.scope)
    if (isinstance(v, Add) and isinstance(v.a, Mul) and isinstance(v.b, FloatImm) and v.b.value == 1.0
            and isinstance(v.a.a, BufferLoad) and isinstance(v.a.b, BufferLoad)):  # fmt: skip
        return f"test.muladd{n}"
    return None
