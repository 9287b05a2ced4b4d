"""LocalPadding (``tir.enable_local_pad``): keep bound guards only where they protect a store.

After imperfect tiling every statement of a tile carries bound guards. This pass (DietCode,
MLSys 2022; apache/tvm PR 11793) makes the tile computable unguarded by padding:

- Candidates are guarded stores to ``shared``/``local`` buffers: *fetches* (a value loaded from
  another buffer), *inits* (a constant) and *computes* (reduction updates ``D[i] = D[i] + e``,
  ``max``/``min``). Stores to ``global`` (write-backs) keep their guards.
- The guard is split into top-level conjuncts (nested ``&&`` flattened). ``||``, ``!``, ``==``,
  ``!=``, calls and conjuncts that load are atomic: never split inside, never dropped.
- Fetch/init: a conjunct is *non-inlineable* when the store needs it -- without it the store
  index could leave the destination, or two iterations of one round could write the same element
  (so a pad could overwrite a real value). This is decided by proof over the iteration domain
  (exhaustively for small constant domains, else with the arith analyzer; unproven means
  "needed"). The other conjuncts only protect the source read: the value becomes
  ``Select(inlined, value, pad)`` and the guard keeps only the non-inlineable ones. For a tile
  that outlives a round (reused by every ``k0`` iteration) every reader's own guard must also
  imply the inlined conjuncts at the element it reads, else an older value it used could be
  replaced by a pad.
- ``pad`` is the identity of the reduction consuming the padded elements (0 for sum, -inf/lowest
  for max, +inf/highest for min); it must be unique, and for a fetch every consumer must let the
  padded value flow in as that identity (a factor of a product for sum, the whole term for
  max/min: ``max(acc, a * b)`` is refused).
- Compute: a conjunct is dropped only when the store stays in bounds without it and, whenever it
  is false, some operand provably reads a padded element of a fetch padded with the identity
  (the fetch's inlined conjunct, moved to the operand's element, implies the compute conjunct,
  and the fetch covers every element the compute reads), so the update adds the identity.
- Refused (unchanged): values with side effects, stores in an else-branch, no single identity,
  consumers that are not a recognized reduction, non-constant or conflicting init values.

:class:`LocalPadding` ``(explain=True)`` logs a report of every candidate at INFO (always at
DEBUG); the last report is kept in ``.report``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs

from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    Add,
    BufferLoad,
    Call,
    FloatImm,
    IntImm,
    Max,
    Min,
    PrimExpr,
    Select,
    make_const,
)
from loopir.ir.functor import Mutator, Visitor, collect_vars, post_order_visit
from loopir.ir.stmt import BufferStore, For, IfThenElse, PrimFunc, SeqStmt, Stmt, seq
from loopir.passes._walk import Access, collect_accesses, conjuncts, is_thread_loop
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext, register_config
from loopir.passes.local_pad_analysis import (
    ElementPred,
    always_true,
    analyzer,
    atomic_reason,
    element_image,
    flows_into,
    has_load_or_call,
    loads_of,
    normalize_lt0,
    store_safe,
    strip_casts,
)

__all__ = ["LocalPadding", "LocalPaddingReport", "CandidateReport", "ConjunctDecision"]

logger = logging.getLogger(__name__)

register_config(
    "tir.enable_local_pad",
    bool,
    False,
    "pad shared/local tiles with the reduction identity so only store-protecting guards remain",
)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


@attrs.define
class ConjunctDecision:
    """One conjunct of a candidate's guard: whether it was inlined/dropped, and why."""

    text: str
    inlined: bool
    reason: str


@attrs.define
class CandidateReport:
    """What LocalPadding did with one guarded store."""

    kind: str  # "fetch" | "init" | "compute"
    buffer: str
    store: str
    conjuncts: list[ConjunctDecision] = attrs.field(factory=list)
    outcome: str = "unchanged"  # "padded" | "guard reduced" | "unchanged" | "refused"
    reason: str = ""
    pad_value: str | None = None

    def __str__(self) -> str:
        head = f"[{self.kind}] {self.buffer}: {self.outcome}"
        if self.pad_value is not None:
            head += f" (pad {self.pad_value})"
        if self.reason:
            head += f" -- {self.reason}"
        lines = [head, f"    store: {self.store}"]
        for c in self.conjuncts:
            verb = "dropped" if self.kind == "compute" else "inlined"
            tag = verb if c.inlined else "kept"
            lines.append(f"    {tag:8s} {c.text}" + (f"  ({c.reason})" if c.reason else ""))
        return "\n".join(lines)


@attrs.define
class LocalPaddingReport:
    """Every candidate LocalPadding considered: fetches and inits in program order, then the
    computes (which depend on what the fetches padded)."""

    candidates: list[CandidateReport] = attrs.field(factory=list)

    def __str__(self) -> str:
        if not self.candidates:
            return "LocalPadding: no guarded shared/local store"
        return "LocalPadding report\n" + "\n".join(str(c) for c in self.candidates)

    def by_buffer(self, name: str) -> list[CandidateReport]:
        return [c for c in self.candidates if c.buffer == name]


def _text(node: object) -> str:
    try:
        return str(node).strip()
    except Exception:  # pragma: no cover - reports must never fail
        return repr(node)


# --------------------------------------------------------------------------------------------
# Structure: distribute pure guards over sequences, find candidate sites
# --------------------------------------------------------------------------------------------


def _pure_cond(c: PrimExpr) -> bool:
    return not has_load_or_call(c)


def _has_cache_store(s: Stmt) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, BufferStore) and n.buffer.scope in ("shared", "local"):
            found = True

    post_order_visit(s, f)
    return found


def _merge_chain(s: Stmt) -> Stmt:
    """``if a: if b: s`` (no else, pure conditions) -> ``if a && b: s``."""
    if (
        isinstance(s, IfThenElse)
        and s.else_case is None
        and isinstance(s.then_case, IfThenElse)
        and s.then_case.else_case is None
        and _pure_cond(s.condition)
        and _pure_cond(s.then_case.condition)
    ):
        inner = _merge_chain(s.then_case)
        assert isinstance(inner, IfThenElse)
        return IfThenElse(op.all_(s.condition, inner.condition), inner.then_case)
    return s


class _Distribute(Mutator):
    """``if c: {s1; s2}`` -> ``{if c: s1; if c: s2}`` for pure ``c`` (conditions only read loop
    variables, which the statements cannot change), so each store gets its own guard."""

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        node = self.generic_visit(node)
        if node.else_case is not None or not _pure_cond(node.condition):
            return node
        if isinstance(node.then_case, SeqStmt) and _has_cache_store(node.then_case):
            return seq(*[_merge_chain(IfThenElse(node.condition, s)) for s in node.then_case.seq])
        if isinstance(node.then_case, IfThenElse) and _has_cache_store(node.then_case):
            return _merge_chain(node)
        return node


@attrs.define(eq=False)
class _Site:
    top: Stmt  # the statement replaced by the rewrite (the outermost guard, or the store)
    store: BufferStore
    conds: list[PrimExpr]
    loops: tuple[For, ...]
    in_else: bool
    outer_conds: tuple[PrimExpr, ...] = ()  # conditions of ifs around the loops of the store


class _Sites(Visitor):
    def __init__(self) -> None:
        self.loops: list[For] = []
        self.else_depth = 0
        self.sites: list[_Site] = []
        self.outer: list[PrimExpr] = []

    def visit_For(self, node: For) -> None:
        self.loops.append(node)
        self.visit(node.body)
        self.loops.pop()

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        if node.else_case is None:
            chain = [node]
            t = node.then_case
            while isinstance(t, IfThenElse) and t.else_case is None:
                chain.append(t)
                t = t.then_case
            if isinstance(t, BufferStore):
                conds = [c for n in chain for c in conjuncts(n.condition)]
                self.sites.append(_Site(node, t, conds, tuple(self.loops), self.else_depth > 0,
                                        tuple(self.outer)))  # fmt: skip
                return
        self.outer.append(node.condition)
        self.visit(node.then_case)
        self.outer.pop()
        if node.else_case is not None:
            self.else_depth += 1
            self.visit(node.else_case)
            self.else_depth -= 1

    def visit_BufferStore(self, node: BufferStore) -> None:
        self.sites.append(
            _Site(node, node, [], tuple(self.loops), self.else_depth > 0, tuple(self.outer))
        )


# --------------------------------------------------------------------------------------------
# Reductions and identities
# --------------------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class _Reduction:
    kind: str  # "sum" | "max" | "min"
    acc: BufferLoad
    term: PrimExpr


def _same_indices(a: Sequence[PrimExpr], b: Sequence[PrimExpr]) -> bool:
    from loopir.ir.equality import structural_equal

    return len(a) == len(b) and all(x is y or structural_equal(x, y) for x, y in zip(a, b))


def _reduction(store: BufferStore) -> _Reduction | None:
    v = store.value
    kinds = {Add: "sum", Max: "max", Min: "min"}
    kind = kinds.get(type(v))
    if kind is None:
        return None
    for acc, term in ((v.a, v.b), (v.b, v.a)):
        if (
            isinstance(acc, BufferLoad)
            and acc.buffer is store.buffer
            and _same_indices(acc.indices, store.indices)
            and all(ld.buffer is not store.buffer for ld in loads_of(term))
        ):
            return _Reduction(kind, acc, term)
    return None


def _identity(kind: str, dtype: str) -> PrimExpr | None:
    if dt.is_bool(dtype) or dt.lanes(dtype) != 1:
        return None
    if kind == "sum":
        return make_const(0, dtype)
    if kind == "max":
        return make_const(dt.min_value(dtype), dtype)
    return make_const(dt.max_value(dtype), dtype)


def _const_value(e: PrimExpr) -> float | int | None:
    return e.value if isinstance(e, (IntImm, FloatImm)) else None


def _impure(e: PrimExpr) -> bool:
    bad = False

    def f(n: object) -> None:
        nonlocal bad
        if isinstance(n, Call) and not n.pure:
            bad = True

    post_order_visit(e, f)
    return bad


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class _PadInfo:
    site: _Site
    pad: PrimExpr
    kind: str
    preds: list[ElementPred]
    domain: list[For]
    kept: list[PrimExpr]


class _Analysis:
    def __init__(self, body: Stmt) -> None:
        self.body = body
        v = _Sites()
        v.visit(body)
        self.sites = v.sites
        accesses, allocs = collect_accesses(body)
        self.alloc_depth: dict[Buffer, int] = {a.buffer: len(loops) for a, loops in allocs}
        self.accesses: dict[Buffer, list[Access]] = {}
        for a in accesses:
            self.accesses.setdefault(a.buffer, []).append(a)
        self.reductions: dict[int, _Reduction] = {}
        for s in self.sites:
            r = _reduction(s.store)
            if r is not None:
                self.reductions[id(s)] = r
        self.report = LocalPaddingReport()
        self.replace: dict[Stmt, Stmt] = {}
        self.padded: dict[Buffer, _PadInfo] = {}

    # --- domains ----------------------------------------------------------------------------
    def lca_len(self, buf: Buffer) -> int:
        accs = self.accesses.get(buf, [])
        if not accs:
            return 0
        prefix = list(accs[0].loops)
        for a in accs[1:]:
            n = 0
            while n < len(prefix) and n < len(a.loops) and prefix[n] is a.loops[n]:
                n += 1
            del prefix[n:]
        return len(prefix)

    def domain(self, loops: Sequence[For], buf: Buffer) -> list[For]:
        """Loops whose iterations form one *round* of writes to ``buf``: those inside the LCA
        of its accesses, plus the threadIdx loops for a shared buffer (all threads of a block
        write it together)."""
        n = self.lca_len(buf)
        # Per thread tag only the innermost loop is the parallel one: an outer loop with the
        # same tag (a cooperative fetch before UnifyThreadLoops) repeats the copy sequentially.
        innermost: dict[str | None, For] = {}
        for f in loops:
            if is_thread_loop(f, ("threadIdx.",)):
                innermost[f.thread_tag] = f
        parallel = set(innermost.values()) if buf.scope == "shared" else set()
        return [f for i, f in enumerate(loops) if i >= n or f in parallel]

    # --- candidates ---------------------------------------------------------------------------
    def run(self) -> None:
        for s in self.sites:
            if s.store.buffer.scope in ("shared", "local") and s.conds and id(s) not in self.reductions:
                self.fetch_or_init(s)
        for s in self.sites:
            if s.store.buffer.scope in ("shared", "local") and s.conds and id(s) in self.reductions:
                self.compute(s)

    def _refuse(self, rep: CandidateReport, reason: str, s: _Site) -> None:
        rep.outcome = "refused"
        rep.reason = reason
        rep.conjuncts = [ConjunctDecision(_text(c), False, "") for c in s.conds]
        self.report.candidates.append(rep)

    def fetch_or_init(self, s: _Site) -> None:
        buf = s.store.buffer
        value = s.store.value
        is_init = not loads_of(value)
        rep = CandidateReport("init" if is_init else "fetch", buf.name, _text(s.store))
        if s.in_else:
            return self._refuse(rep, "the store is in an else-branch", s)
        if _impure(value):
            return self._refuse(rep, "the stored value has side effects", s)
        consumers = [r for r in (self.reductions.get(id(x)) for x in self.sites) if r is not None]
        if is_init:
            if _const_value(value) is None:
                return self._refuse(rep, f"init value {_text(value)} is not a constant", s)
            writers = [
                x for x in self.sites if x.store.buffer is buf and id(x) not in self.reductions
            ]
            values = {(_const_value(x.store.value), x.store.value.dtype) for x in writers}
            if len(values) != 1:
                return self._refuse(
                    rep, f"{buf.name} is initialized with different values {sorted(map(str, values))}", s
                )
            kinds = {r.kind for r in consumers if r.acc.buffer is buf}
            if not kinds:
                return self._refuse(rep, f"no recognized reduction accumulates into {buf.name}", s)
        else:
            writers = [x for x in self.sites if x.store.buffer is buf]
            if len(writers) != 1:
                return self._refuse(rep, f"{buf.name} has {len(writers)} writing statements", s)
            kinds = set()
            for a in self.accesses.get(buf, []):
                if a.is_store:
                    continue
                site, red = self._consumer(a)
                if red is None or site is None:
                    return self._refuse(
                        rep, f"a read of {buf.name} is not inside a recognized reduction "
                        f"(in {_text(a.stmt)})", s,
                    )
                load = next(
                    ld for ld in loads_of(red.term)
                    if ld.buffer is buf and _same_indices(ld.indices, a.indices)
                )
                if not flows_into(red.term, load, red.kind):
                    how = "a factor of the product" if red.kind == "sum" else "the whole term"
                    return self._refuse(
                        rep, f"the padded value would not reach the {red.kind} reduction as its "
                        f"identity (needs to be {how}): {_text(red.term)}", s,
                    )
                kinds.add(red.kind)
            if not kinds:
                return self._refuse(rep, f"no recognized reduction reads {buf.name}", s)
        if len(kinds) != 1:
            return self._refuse(rep, f"no single identity: consumed by {sorted(kinds)} reductions", s)
        kind = next(iter(kinds))
        pad = _identity(kind, value.dtype)
        if pad is None:
            return self._refuse(rep, f"no identity of {kind} for dtype {value.dtype}", s)
        rep.pad_value = _text(pad)
        domain = self.domain(s.loops, buf)
        kept, inlined = self.split_guard(
            s, rep, domain, injective=True, inlined_reason="only protects the source read"
        )
        if not inlined:
            rep.outcome = "unchanged"
            rep.reason = "every conjunct protects the store"
            self.report.candidates.append(rep)
            return
        readers = [(x, ld) for x in self.sites for ld in loads_of(x.store.value) if ld.buffer is buf]
        why = self._readers_see_real_values(s, inlined, kept, domain, readers)
        if why:
            return self._refuse(rep, why, s)
        if is_init and _const_value(value) == _const_value(pad):
            new_value = value
        else:
            new_value = Select(op.all_(*inlined), value, pad)
        store = BufferStore(buf, new_value, s.store.indices)
        self.replace[s.top] = IfThenElse(op.all_(*kept), store) if kept else store
        rep.outcome = "padded"
        self.report.candidates.append(rep)
        if not is_init:
            self.padded[buf] = _PadInfo(s, pad, kind, self.element_preds(s, inlined, domain), domain, kept)

    def _consumer(self, a: Access) -> tuple[_Site | None, _Reduction | None]:
        for x in self.sites:
            if x.store is a.stmt:
                r = self.reductions.get(id(x))
                if r is not None and any(ld.buffer is a.buffer for ld in loads_of(r.term)):
                    return x, r
        return None, None

    def _readers_see_real_values(
        self,
        s: _Site,
        inlined: list[PrimExpr],
        kept: list[PrimExpr],
        domain: list[For],
        readers: list[tuple[_Site, BufferLoad]],
    ) -> str:
        """Why padding could change what a reader sees ('' when it provably cannot).

        An element the fetch leaves unwritten in a round may still hold an older value, and a
        reader in that round may (in odd programs) use it; padding would replace it. So every
        reader's own guard must imply each inlined conjunct, moved to the element it reads
        (conjuncts that always hold where the store happens are exempt)."""
        # Only a buffer that outlives a round (a loop between its allocation and the fetch
        # that is not part of the round) can hold older values.
        depth = self.alloc_depth.get(s.store.buffer, 0)
        if all(f in domain for f in s.loops[depth:]):
            return ""
        preds = self.element_preds(s, inlined, domain)
        fetch_loop_vars = {f.loop_var for f in s.loops}
        for c_f in inlined:
            if always_true(c_f, [*kept, *s.outer_conds], domain, s.loops):
                continue
            eps = [p for p in preds if p.source is c_f]
            if not eps:
                return (
                    f"{s.store.buffer.name} outlives a round and the conjunct {_text(c_f)} cannot "
                    "be related to its elements: a reader could see a pad where it read an "
                    "older value"
                )
            for site, ld in readers:
                ana = analyzer(site.loops)
                reader_vars = {f.loop_var for f in site.loops}
                guards = [c for g in (*site.conds, *site.outer_conds) for c in conjuncts(g)]
                ok = False
                for ep in eps:
                    used = set(collect_vars(ep.offset)) | set(collect_vars(ep.rest))
                    if not {v for v in used if v in fetch_loop_vars} <= reader_vars:
                        continue
                    d_e = ep.at(ld.indices)
                    for g in guards:
                        d_g = normalize_lt0(g)
                        if d_g is not None and ana.can_prove(d_g - d_e >= 0):
                            ok = True
                            break
                    if ok:
                        break
                if not ok:
                    return (
                        f"a reader of {s.store.buffer.name} ({_text(site.store)}) is not guarded "
                        f"by {_text(c_f)}: it could see a pad where it read an older value"
                    )
        return ""

    def split_guard(
        self,
        s: _Site,
        rep: CandidateReport,
        domain: list[For],
        injective: bool,
        inlined_reason: str,
        extra: Callable[[PrimExpr, list[PrimExpr]], tuple[bool, str]] | None = None,
    ) -> tuple[list[PrimExpr], list[PrimExpr]]:
        """Greedily drop conjuncts whose removal keeps the store provably safe (and, with
        ``extra``, passes that additional check); returns (kept, dropped)."""
        kept = list(s.conds)
        for c in s.conds:
            why = atomic_reason(c)
            if why is not None:
                rep.conjuncts.append(ConjunctDecision(_text(c), False, why))
                continue
            trial = [k for k in kept if k is not c]
            ok, reason = store_safe(
                s.store.indices, s.store.buffer, trial, domain, s.loops, injective
            )
            if ok and extra is not None:
                ok, reason = extra(c, trial)
            if ok:
                kept = trial
                rep.conjuncts.append(ConjunctDecision(_text(c), True, inlined_reason))
            else:
                rep.conjuncts.append(ConjunctDecision(_text(c), False, reason))
        dropped = [c for c in s.conds if not any(c is k for k in kept)]
        return kept, dropped

    def element_preds(self, s: _Site, inlined: list[PrimExpr], domain: list[For]) -> list[ElementPred]:
        """For a plain copy ``P[S] = Src[L]``: inlined conjuncts as predicates on P's elements."""
        value = s.store.value
        src = strip_casts(value)
        if not isinstance(src, BufferLoad) or len(src.indices) != len(s.store.indices):
            return []
        ana = analyzer(s.loops)
        xs = {f.loop_var for f in domain}
        offsets = []
        for ld, st in zip(src.indices, s.store.indices):
            off = ana.simplify(ld - st)
            offsets.append(None if set(collect_vars(off)) & xs else off)
        preds = []
        for c in inlined:
            d_f = normalize_lt0(c)
            if d_f is None:
                continue
            for d, (ld, off) in enumerate(zip(src.indices, offsets)):
                if off is None:
                    continue
                found = False
                for sign in (1, -1):
                    rest = ana.simplify(d_f - sign * ld)
                    if not set(collect_vars(rest)) & xs:
                        preds.append(ElementPred(d, sign, off, rest, c))
                        found = True
                        break
                if found:
                    break
        return preds

    def compute(self, s: _Site) -> None:
        red = self.reductions[id(s)]
        buf = s.store.buffer
        rep = CandidateReport("compute", buf.name, _text(s.store))
        if s.in_else:
            return self._refuse(rep, "the store is in an else-branch", s)
        if _impure(s.store.value):
            return self._refuse(rep, "the stored value has side effects", s)
        identity = _identity(red.kind, s.store.value.dtype)
        padded_loads = []
        for ld in loads_of(red.term):
            info = self.padded.get(ld.buffer)
            if info is None or info.kind != red.kind or identity is None:
                continue
            if _const_value(info.pad) != _const_value(identity) or info.pad.dtype != identity.dtype:
                continue
            if flows_into(red.term, ld, red.kind):
                padded_loads.append((ld, info))
        domain = self.domain(s.loops, buf)
        compute_loop_vars = {f.loop_var for f in s.loops}

        def contributes_identity(c: PrimExpr, _trial: list[PrimExpr]) -> tuple[bool, str]:
            d_c = normalize_lt0(c)
            if d_c is None:
                return False, "not an integer comparison"
            if not padded_loads:
                return False, "no operand is read from a tile padded with the identity"
            # Every other load must stay in bounds of a param/global buffer without the
            # conjunct (its finite value times the padded 0 is 0); unwritten shared/local
            # elements could hold anything, so those are refused.
            for other in loads_of(red.term):
                info_o = next((i for ld, i in padded_loads if ld is other), None)
                if info_o is not None:
                    if not self._covered(other, s, info_o, _trial):
                        return False, (
                            f"the fetch of {other.buffer.name} does not cover every element "
                            "the compute reads"
                        )
                    continue
                if other.buffer.scope != "global":
                    return False, (
                        f"operand {other.buffer.name} is not padded and could be read "
                        "where it was never written"
                    )
                ok, why = store_safe(
                    other.indices, other.buffer, _trial, s.loops, s.loops, injective=False
                )
                if not ok:
                    return False, f"operand read {why.replace('store index', 'index')}"
            ana = analyzer(s.loops)
            for ld, info in padded_loads:
                fetch_loop_vars = {f.loop_var for f in info.site.loops}
                for ep in info.preds:
                    used = set(collect_vars(ep.offset)) | set(collect_vars(ep.rest))
                    loopish = {v for v in used if v in fetch_loop_vars}
                    if not loopish <= compute_loop_vars:
                        continue
                    if not ana.can_prove(ep.at(ld.indices) - d_c >= 0):
                        continue
                    return True, ""
            return False, (
                "cannot prove that an operand reads a padded element whenever it is false"
            )

        kept, dropped = self.split_guard(
            s, rep, domain, injective=False,
            inlined_reason="a padded operand contributes the identity when it is false",
            extra=contributes_identity,
        )
        if not dropped:
            rep.outcome = "unchanged"
            rep.reason = "no conjunct can be dropped"
            self.report.candidates.append(rep)
            return
        self.replace[s.top] = IfThenElse(op.all_(*kept), s.store) if kept else s.store
        rep.outcome = "guard reduced"
        rep.pad_value = _text(identity)
        self.report.candidates.append(rep)

    def _covered(
        self, ld: BufferLoad, s: _Site, info: _PadInfo, assumed: Sequence[PrimExpr]
    ) -> bool:
        """Every element the compute may read (under ``assumed``) was written, real or pad, by
        the fetch in the same round. The reads are enumerated over every enclosing thread and
        vthread loop too: a superset of one round's reads is still covered or not."""
        buf = ld.buffer
        if self.sites.index(info.site) > self.sites.index(s):
            return False  # the compute runs before the fetch of its round: reads older data
        fetch_img = element_image(
            info.site.store.indices, buf, [*info.kept, *info.site.outer_conds], info.domain,
            info.site.loops, exact=True,
        )
        n = self.lca_len(buf)
        domain = [f for i, f in enumerate(s.loops) if i >= n or is_thread_loop(f)]
        read_img = element_image(ld.indices, buf, assumed, domain, s.loops)
        return fetch_img is not None and read_img is not None and read_img <= fetch_img


class _Replace(Mutator):
    def __init__(self, repl: dict[Stmt, Stmt]) -> None:
        self.repl = repl

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        r = self.repl.get(node)
        return r if r is not None else self.generic_visit(node)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        r = self.repl.get(node)
        return r if r is not None else node


class LocalPadding(Pass):
    """Local padding (see module doc). Always runs when called directly; :func:`lower` runs it
    only when ``tir.enable_local_pad`` is True.

    Parameters
    ----------
    explain
        Log the report of every candidate at INFO level (it is always logged at DEBUG).

    Attributes
    ----------
    report
        The :class:`LocalPaddingReport` of the last run.
    """

    name = "LocalPadding"

    def __init__(self, explain: bool = False) -> None:
        self.explain = explain
        self.report: LocalPaddingReport | None = None

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        body = _Distribute().visit(func.body)
        ana = _Analysis(body)
        ana.run()
        self.report = ana.report
        text = str(ana.report)
        if self.explain:
            logger.info("%s", text)
        else:
            logger.debug("%s", text)
        if not ana.replace:
            return func
        return func.with_body(_Replace(ana.replace).visit(body))

    def __repr__(self) -> str:
        return f"LocalPadding(explain={self.explain})"
