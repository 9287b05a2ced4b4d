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
  replaced by a pad; when that predicate depends on the round (``k0 * 4 + kk < K``) it speaks
  of this round's write only, so the fetch must also have written the element in the reader's
  round, before it. A tile read in an index or a guard is refused (a pad would move an access).
- An init's guard goes only if every writer of another value (the reduction) runs after all of
  its iterations, or provably never writes an element the padded init newly writes: otherwise
  a re-init after the reduction would overwrite results.
- ``pad`` is the identity of the reduction consuming the padded elements (0 for sum, -inf/lowest
  for max, +inf/highest for min); it must be unique, and for a fetch every consumer must let the
  padded value flow in as that identity (a factor of a product for sum, the whole term for
  max/min: ``max(acc, a * b)`` is refused), through casts that each map the identity of their
  operand type to the identity of their own type (``int32(int8(x))`` turns INT32_MIN into 0;
  an int8 tile's -128 widened is not INT32_MIN: both refused; see `loopir.passes.local_pad_values`).
- Compute: a conjunct is dropped only when the store stays in bounds without it and, whenever it
  is false, some operand provably reads a padded element of a fetch padded with the identity
  (the fetch's inlined conjunct, moved to the operand's element, implies the compute conjunct,
  and the fetch wrote every element the compute reads earlier in the same round), and every
  other operand is padded too or an in-bounds read of a parameter (an intermediate allocated
  here may be unwritten there), so the update adds the identity; and everything the store then
  evaluates where the rest of the guard holds is defined and finite: no division or modulo by
  something that can be zero there (``A[i, k] * (1 / (K - k))`` at ``k == K``), no call outside
  its domain or overflowing, no overflowing cast (proven per node, exhaustively over the padded
  iterations when possible; the report names a failing iteration).
- Refused (unchanged, every conjunct kept with the reason): values with side effects, stores in
  an else-branch, no single identity, consumers that are not a recognized reduction, a cast
  that changes the identity, tiles read as an index, non-constant or conflicting init values,
  inits that could overwrite a result. A compute conjunct is kept, with the reason, when the
  store would evaluate something undefined or not finite where it is false.

[`LocalPadding`][loopir.passes.local_pad.LocalPadding] ``(explain=True)`` logs a report of every
candidate at INFO (always at DEBUG); the last report is kept in ``.report``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs

from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, PrimExpr, Select
from loopir.ir.functor import Mutator, collect_vars
from loopir.ir.stmt import BufferStore, For, IfThenElse, PrimFunc, Stmt
from loopir.passes._walk import Access, collect_accesses, conjuncts, is_thread_loop
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext, register_config
from loopir.passes.local_pad_analysis import (
    ElementPred,
    ElementSet,
    StoreChecker,
    always_true,
    analyzer,
    atomic_reason,
    common_prefix,
    element_image,
    image_within,
    index_use,
    loads_of,
    normalize_lt0,
    store_safe,
    strip_casts,
    within_bounds,
    written_where,
)
from loopir.passes.local_pad_report import (
    CandidateReport,
    ConjunctDecision,
    LocalPaddingReport,
    node_text,
)
from loopir.passes.local_pad_sites import (
    Distribute,
    Reduction,
    Site,
    Sites,
    const_value,
    identity,
    impure,
    reduction,
    same_indices,
)
from loopir.passes.local_pad_values import pad_reaches, undefined_reason

__all__ = ["LocalPadding", "LocalPaddingReport", "CandidateReport", "ConjunctDecision"]

logger = logging.getLogger(__name__)

register_config(
    "tir.enable_local_pad",
    bool,
    False,
    "pad shared/local tiles with the reduction identity so only store-protecting guards remain",
)


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class _PadInfo:
    site: Site
    pad: PrimExpr
    kind: str
    preds: list[ElementPred]
    domain: list[For]
    kept: list[PrimExpr]


class _Analysis:
    def __init__(self, body: Stmt, params: Sequence[Buffer] = ()) -> None:
        self.body = body
        # Parameters are caller-provided memory: defined at every in-bounds index. A buffer
        # allocated inside the function is defined only where something wrote it.
        self.params = set(params)
        # Symbolic buffer sizes: never negative (what the definedness proofs may assume).
        self.sizes = {v for b in params for d in b.shape for v in collect_vars(d)}
        # _written_before's fetch images, asked again for every reader of one fetch; keyed by
        # id()s, the values keep the keyed objects alive
        self._fetch_images: dict[tuple[int, ...], tuple[tuple[object, ...], ElementSet | None]] = {}
        # element_preds, asked for the same fetch by the reader check and the pad record
        self._element_preds: dict[tuple[int, ...], tuple[tuple[object, ...], list[ElementPred]]] = {}
        v = Sites()
        v.visit(body)
        self.sites = v.sites
        accesses, allocs = collect_accesses(body)
        self.alloc_depth: dict[Buffer, int] = {a.buffer: len(loops) for a, loops in allocs}
        self.accesses: dict[Buffer, list[Access]] = {}
        for a in accesses:
            self.accesses.setdefault(a.buffer, []).append(a)
        self.reductions: dict[int, Reduction] = {}
        for s in self.sites:
            r = reduction(s.store)
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

    def _refuse(self, rep: CandidateReport, reason: str, s: Site) -> None:
        """Record a refused candidate: every conjunct stays, each with why."""
        rep.outcome = "refused"
        rep.reason = reason
        rep.pad_value = None  # nothing is padded, so no pad value is written
        if len(rep.conjuncts) == len(s.conds):
            # Refused after the guard was analysed: keep the per-conjunct verdicts, but say
            # that the ones the analysis alone would have removed stay because of the refusal.
            verb = "dropped" if rep.kind == "compute" else "inlined"
            rep.conjuncts = [
                c if not c.inlined else ConjunctDecision(
                    c.text, False, f"the candidate is refused; alone it would be {verb}: {c.reason}"
                )
                for c in rep.conjuncts
            ]
        else:
            rep.conjuncts = [
                ConjunctDecision(node_text(c), False, atomic_reason(c) or "the candidate is refused")
                for c in s.conds
            ]
        self.report.candidates.append(rep)

    def fetch_or_init(self, s: Site) -> None:
        buf = s.store.buffer
        value = s.store.value
        is_init = not loads_of(value)
        rep = CandidateReport("init" if is_init else "fetch", buf.name, node_text(s.store))
        if s.in_else:
            return self._refuse(rep, "the store is in an else-branch", s)
        if impure(value):
            return self._refuse(rep, "the stored value has side effects", s)
        consumers = [r for r in (self.reductions.get(id(x)) for x in self.sites) if r is not None]
        if is_init:
            if const_value(value) is None:
                return self._refuse(rep, f"init value {node_text(value)} is not a constant", s)
            writers = [
                x for x in self.sites if x.store.buffer is buf and id(x) not in self.reductions
            ]
            values = {(const_value(x.store.value), x.store.value.dtype) for x in writers}
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
            for x in self.sites:
                where = index_use(x.store, x.conds, buf)
                if where:
                    # A pad read as an index changes which element is accessed, not just a
                    # term of the reduction: no identity makes that a no-op.
                    return self._refuse(
                        rep, f"{buf.name} is read in {where} of {node_text(x.store)}: a pad would "
                        "change which element is accessed", s,
                    )
            kinds = set()
            for a in self.accesses.get(buf, []):
                if a.is_store:
                    continue
                site, red = self._consumer(a)
                load = None if red is None else next(
                    (ld for ld in loads_of(red.term)
                     if ld.buffer is buf and same_indices(ld.indices, a.indices)),
                    None,
                )  # fmt: skip
                if red is None or site is None or load is None:
                    return self._refuse(
                        rep, f"a read of {buf.name} is not inside a recognized reduction "
                        f"(in {node_text(a.stmt) if a.stmt is not None else 'a condition'})", s,
                    )
                reaches, cast = pad_reaches(red.term, load, red.kind)
                if not reaches:
                    how = "a factor of the product" if red.kind == "sum" else "the whole term"
                    return self._refuse(
                        rep, f"the padded value would not reach the {red.kind} reduction as its "
                        f"identity ({cast or f'needs to be {how}'}): {node_text(red.term)}", s,
                    )
                kinds.add(red.kind)
            if not kinds:
                return self._refuse(rep, f"no recognized reduction reads {buf.name}", s)
        if len(kinds) != 1:
            return self._refuse(rep, f"no single identity: consumed by {sorted(kinds)} reductions", s)
        kind = next(iter(kinds))
        pad = identity(kind, value.dtype)
        if pad is None:
            return self._refuse(rep, f"no identity of {kind} for dtype {value.dtype}", s)
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
        if not why and is_init:
            why = self._init_overwrites(s, kept, inlined)
        if why:
            return self._refuse(rep, why, s)
        rep.pad_value = node_text(pad)
        if is_init and const_value(value) == const_value(pad):
            new_value = value
        else:
            new_value = Select(op.all_(*inlined), value, pad)
        store = BufferStore(buf, new_value, s.store.indices)
        self.replace[s.top] = IfThenElse(op.all_(*kept), store) if kept else store
        rep.outcome = "padded"
        self.report.candidates.append(rep)
        if not is_init:
            self.padded[buf] = _PadInfo(s, pad, kind, self.element_preds(s, inlined, domain), domain, kept)

    def _init_overwrites(self, s: Site, kept: list[PrimExpr], inlined: list[PrimExpr]) -> str:
        """Why the unguarded init could overwrite a value another statement wrote ('' when it
        provably cannot).

        Dropping the guard writes the init value where the original did not. That is sound
        only while such an element holds nothing but garbage or the same init value. For every
        writer of another value (the reduction, a plain store) either it runs after every
        iteration of this init -- later in program order and in no loop, inside the buffer's
        allocation, that also holds the init (a loop around both would interleave them) -- or
        it provably never writes an element the padded init newly writes (by exhaustion over
        both loop nests, per iteration of the loops around the allocation)."""
        buf = s.store.buffer
        depth = self.alloc_depth.get(buf, 0)
        here = self.sites.index(s)
        same = (const_value(s.store.value), s.store.value.dtype)
        keys = [f.loop_var for f in s.loops[:depth]]  # one lifetime of the buffer
        extra: ElementSet | None = None
        computed = False
        for n, x in enumerate(self.sites):
            if x is s or x.store.buffer is not buf:
                continue
            if not loads_of(x.store.value) and (const_value(x.store.value), x.store.value.dtype) == same:
                continue  # another init with the same value: writing it twice changes nothing
            shared = common_prefix(s.loops, x.loops)
            if n > here and shared <= depth:
                continue
            if not computed:
                # elements (per lifetime) the padded init writes and the original did not
                extra = written_where(
                    s.store.indices, keys, s.loops, [*kept, *s.outer_conds], unless=inlined
                )
                computed = True
            theirs = written_where(x.store.indices, keys, x.loops, [*x.conds, *x.outer_conds])
            if extra is not None and theirs is not None and extra.isdisjoint(theirs):
                continue
            where = "before" if n < here else f"in the same loop {s.loops[shared - 1].loop_var.name} as"
            return (
                f"{node_text(x.store)} writes {buf.name} {where} this init: the init value "
                "written where the guard is false could overwrite its result"
            )
        return ""

    def _consumer(self, a: Access) -> tuple[Site | None, Reduction | None]:
        for x in self.sites:
            if x.store is a.stmt:
                r = self.reductions.get(id(x))
                if r is not None and any(ld.buffer is a.buffer for ld in loads_of(r.term)):
                    return x, r
        return None, None

    def _readers_see_real_values(
        self,
        s: Site,
        inlined: list[PrimExpr],
        kept: list[PrimExpr],
        domain: list[For],
        readers: list[tuple[Site, BufferLoad]],
    ) -> str:
        """Why padding could change what a reader sees ('' when it provably cannot).

        An element the fetch leaves unwritten in a round may still hold an older value, and a
        reader in that round may (in odd programs) use it; padding would replace it. So every
        reader's own guard must imply each inlined conjunct, moved to the element it reads
        (conjuncts that always hold where the store happens are exempt). When that predicate
        depends on the round (``k0 * 4 + kk < K``), it says whether the *current* round's write
        was real, so the element must also have been written in the reader's round, before it
        (an element last written as a pad in an earlier round has the predicate of that round)."""
        # Only a buffer that outlives a round (a loop between its allocation and the fetch
        # that is not part of the round) can hold older values.
        depth = self.alloc_depth.get(s.store.buffer, 0)
        rounds = [f for f in s.loops[depth:] if f not in domain]
        if not rounds:
            return ""
        round_vars = {f.loop_var for f in rounds}
        preds = self.element_preds(s, inlined, domain)
        fetch_loop_vars = {f.loop_var for f in s.loops}
        for c_f in inlined:
            if always_true(c_f, [*kept, *s.outer_conds], domain, s.loops):
                continue
            eps = [p for p in preds if p.source is c_f]
            if not eps:
                return (
                    f"{s.store.buffer.name} outlives a round and the conjunct {node_text(c_f)} cannot "
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
                    implied = any(
                        (d_g := normalize_lt0(g)) is not None and ana.can_prove(d_g - d_e >= 0)
                        for g in guards
                    )
                    if implied and used & round_vars:
                        implied = self._written_before(s, kept, domain, site, ld, guards)
                    if implied:
                        ok = True
                        break
                if not ok:
                    return (
                        f"a reader of {s.store.buffer.name} ({node_text(site.store)}) is not guarded "
                        f"by {node_text(c_f)} at an element the fetch wrote in its round: it could "
                        "see a pad where it read an older value"
                    )
        return ""

    def _written_before(
        self,
        fetch: Site,
        kept: Sequence[PrimExpr],
        domain: list[For],
        reader: Site,
        ld: BufferLoad,
        assumed: Sequence[PrimExpr],
    ) -> bool:
        """Every element ``ld`` may read (under ``assumed``) was written, real or pad, by
        ``fetch`` in the reader's round before the read.

        The round is one iteration of the loops around every access of the buffer, which
        reader and fetch therefore share. The fetch must come first in program order and share
        no further loop with the reader (except the threads of a shared buffer, which run the
        fetch together): a shared inner loop would let an iteration read an element a later
        iteration writes. The reads are enumerated over every enclosing thread and vthread loop
        too: a superset of one round's reads is still covered or not."""
        buf = ld.buffer
        if self.sites.index(fetch) > self.sites.index(reader):
            return False  # the reader runs before the fetch of its round: reads older data
        n = self.lca_len(buf)
        parallel = {f for f in domain if buf.scope == "shared" and is_thread_loop(f, ("threadIdx.",))}
        shared = common_prefix(fetch.loops, reader.loops)
        if any(f not in parallel for f in fetch.loops[n:shared]):
            return False
        # What the fetch surely writes may depend on loops outside its domain that it shares
        # with the reader (``if row < M or ...`` on the block index): enumerate those too and
        # compare (iteration, element) pairs, which is exact since both run in one iteration.
        writes = (*kept, *fetch.outer_conds, *fetch.store.indices)
        used = {v for e in writes for v in collect_vars(e)}
        ctx = [f for f in fetch.loops[:shared] if f not in domain and f.loop_var in used]
        keys = tuple(f.loop_var for f in ctx)
        fetch_img = self._fetch_image(fetch, kept, ctx, domain)
        if fetch_img is None:
            return False
        shape = [const_value(d) for d in buf.shape]
        if not keys and all(isinstance(d, int) for d in shape) and \
                fetch_img.is_whole(shape) and within_bounds(ld.indices, shape, reader.loops):  # type: ignore[arg-type]
            return True  # the fetch writes the whole buffer and the read stays inside it
        rdomain = [f for i, f in enumerate(reader.loops) if i >= n or is_thread_loop(f)]
        rdomain = [*ctx, *(f for f in rdomain if f not in ctx)]
        box = fetch_img.box()
        if box is not None:  # the usual tile: compare ranges, not enumerated element sets
            inside = image_within((*keys, *ld.indices), assumed, rdomain, reader.loops, box)
            if inside is not None:
                return inside
        read_img = element_image((*keys, *ld.indices), buf, assumed, rdomain, reader.loops)
        return fetch_img is not None and read_img is not None and read_img <= fetch_img

    def _fetch_image(self, fetch: Site, kept: Sequence[PrimExpr], ctx: Sequence[For],
                     domain: Sequence[For]) -> ElementSet | None:  # fmt: skip
        """The (context loop values, element) pairs ``fetch`` surely writes (exact)."""
        held = (fetch, *kept, None, *ctx, None, *domain)
        key = tuple(map(id, held))
        hit = self._fetch_images.get(key)
        if hit is None:
            keys = tuple(f.loop_var for f in ctx)
            img = element_image(
                (*keys, *fetch.store.indices), fetch.store.buffer, [*kept, *fetch.outer_conds],
                [*ctx, *domain], fetch.loops, exact=True,
            )
            hit = (held, img)
            self._fetch_images[key] = hit
        return hit[1]

    def split_guard(
        self,
        s: Site,
        rep: CandidateReport,
        domain: list[For],
        injective: bool,
        inlined_reason: str,
        extra: Callable[[PrimExpr, list[PrimExpr]], tuple[bool, str]] | None = None,
    ) -> tuple[list[PrimExpr], list[PrimExpr]]:
        """Greedily drop conjuncts whose removal keeps the store provably safe (and, with
        ``extra``, passes that additional check); returns (kept, dropped)."""
        kept = list(s.conds)
        check = StoreChecker(s.store.indices, s.store.buffer, domain, s.loops, injective)
        for c in s.conds:
            why = atomic_reason(c)
            if why is not None:
                rep.conjuncts.append(ConjunctDecision(node_text(c), False, why))
                continue
            trial = [k for k in kept if k is not c]
            ok, reason = check(trial)
            if ok and extra is not None:
                ok, reason = extra(c, trial)
            if ok:
                kept = trial
                rep.conjuncts.append(ConjunctDecision(node_text(c), True, inlined_reason))
            else:
                rep.conjuncts.append(ConjunctDecision(node_text(c), False, reason))
        dropped = [c for c in s.conds if not any(c is k for k in kept)]
        return kept, dropped

    def element_preds(self, s: Site, inlined: list[PrimExpr], domain: list[For]) -> list[ElementPred]:
        """For a plain copy ``P[S] = Src[L]``: inlined conjuncts as predicates on P's elements."""
        held = (s, *inlined, None, *domain)  # all it reads: the site (store, loops), the rest
        key = tuple(map(id, held))
        hit = self._element_preds.get(key)
        if hit is None:
            hit = self._element_preds[key] = (held, self._element_preds_of(s, inlined, domain))
        return list(hit[1])

    def _element_preds_of(self, s: Site, inlined: list[PrimExpr], domain: list[For]) -> list[ElementPred]:
        value = s.store.value
        src = strip_casts(value)
        if not isinstance(src, BufferLoad) or len(src.indices) != len(s.store.indices):
            return []
        ana = analyzer(s.loops)
        xs = {f.loop_var for f in domain}
        offsets = []
        for ld, st in zip(src.indices, s.store.indices):
            delta = ana.simplify(ld - st)
            offsets.append(None if set(collect_vars(delta)) & xs else delta)
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

    def compute(self, s: Site) -> None:
        red = self.reductions[id(s)]
        buf = s.store.buffer
        rep = CandidateReport("compute", buf.name, node_text(s.store))
        if s.in_else:
            return self._refuse(rep, "the store is in an else-branch", s)
        if impure(s.store.value):
            return self._refuse(rep, "the stored value has side effects", s)
        ident = identity(red.kind, s.store.value.dtype)
        padded_loads = []
        for ld in loads_of(red.term):
            info = self.padded.get(ld.buffer)
            if info is None or info.kind != red.kind or ident is None:
                continue
            if const_value(info.pad) != const_value(ident) or info.pad.dtype != ident.dtype:
                continue
            if pad_reaches(red.term, ld, red.kind)[0]:
                padded_loads.append((ld, info))
        domain = self.domain(s.loops, buf)
        compute_loop_vars = {f.loop_var for f in s.loops}

        def contributes_identity(c: PrimExpr, _trial: list[PrimExpr]) -> tuple[bool, str]:
            d_c = normalize_lt0(c)
            if d_c is None:
                return False, "not an integer comparison"
            if not padded_loads:
                return False, "no operand is read from a tile padded with the identity"
            # Every other load must be an in-bounds read of a parameter without the conjunct
            # (its finite value times the padded 0 is 0); anything allocated here could be
            # unwritten at that index (NaN, garbage), so it is refused.
            for other in loads_of(red.term):
                info_o = next((i for ld, i in padded_loads if ld is other), None)
                if info_o is not None:
                    if not self._covered(other, s, info_o, _trial):
                        return False, (
                            f"the fetch of {other.buffer.name} does not cover every element "
                            "the compute reads"
                        )
                    continue
                if other.buffer not in self.params:
                    # A shared/local tile or an intermediate allocated in the function is
                    # defined only where it was written; the original never read it here.
                    return False, (
                        f"operand {other.buffer.name} is not padded and not a parameter: it "
                        "could be read where it was never written"
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
                    return self._defined_without(s, red, _trial)
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
        rep.pad_value = node_text(ident)
        self.report.candidates.append(rep)

    def _defined_without(self, s: Site, red: Reduction, assumed: Sequence[PrimExpr]) -> tuple[bool, str]:
        """Whether the store evaluates only defined, finite values wherever ``assumed`` (the
        guard left) and the conditions around it hold: the padded iterations included.

        A max/min term is the padded load itself (up to casts that keep the identity), so
        there only the indices are evaluated on anything but the identity."""
        conds = [c for g in (*assumed, *s.outer_conds) for c in conjuncts(g)]
        if red.kind == "sum":
            values: list[PrimExpr] = [s.store.value]
        else:
            values = [i for ld in loads_of(s.store.value) for i in ld.indices]
        for e in (*s.store.indices, *values):
            why = undefined_reason(e, conds, s.loops, self.sizes)
            if why:
                return False, f"where it is false, {why}"
        return True, ""

    def _covered(
        self, ld: BufferLoad, s: Site, info: _PadInfo, assumed: Sequence[PrimExpr]
    ) -> bool:
        """Every element the compute may read (under ``assumed``) was written, real or pad, by
        the fetch in the same round, before the compute reads it."""
        return self._written_before(info.site, info.kept, info.domain, s, ld, assumed)


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
    """Local padding (see module doc). Always runs when called directly;
    [`lower`][loopir.passes.pipeline.lower] runs it only when ``tir.enable_local_pad`` is True.

    Parameters
    ----------
    explain
        Log the report of every candidate at INFO level (it is always logged at DEBUG).

    Attributes
    ----------
    report
        The [`LocalPaddingReport`][loopir.passes.local_pad_report.LocalPaddingReport] of the last
        run.
    """

    name = "LocalPadding"

    def __init__(self, explain: bool = False) -> None:
        self.explain = explain
        self.report: LocalPaddingReport | None = None

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        body = Distribute().visit(func.body)
        ana = _Analysis(body, func.params)
        ana.run()
        self.report = ana.report
        # the report renders only when the record is emitted (DEBUG is usually off)
        if self.explain:
            logger.info("%s", ana.report)
        else:
            logger.debug("%s", ana.report)
        if not ana.replace:
            return func
        return func.with_body(_Replace(ana.replace).visit(body))

    def __repr__(self) -> str:
        return f"LocalPadding(explain={self.explain})"
