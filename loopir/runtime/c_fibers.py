"""Barrier semantics for lowered IR: thread regions run as cooperative fibers.

Lowered IR is not always a sequential program: once cooperative fetches are unified, thread
``t`` copies only its share of a shared tile and then, after a ``storage_sync``, reads the
shares of the other threads. Running the ``threadIdx`` loop serially would read data that no
thread has written yet. So a ``threadIdx`` loop whose body contains a ``storage_sync`` is run
as a *thread region*, the way a GPU runs a thread block:

* every thread of the region (the product of the largest extent of each ``threadIdx.*`` tag
  inside it) is a fiber (``ucontext``) with its own stack, so ``local`` allocations are
  per thread;
* each ``threadIdx`` loop in the region becomes ``if (tid < extent) { var = tid; ... }``,
  exactly as CUDA codegen maps a thread-bound loop onto the hardware index;
* ``storage_sync`` suspends the fiber; the scheduler resumes the fibers round-robin, so no
  thread passes a barrier before all threads reached it;
* threads that finish while others wait at a barrier are a barrier divergence (undefined on
  a GPU) and are reported as an error;
* a warp-collective call (``ptx_ldmatrix``, ``ptx_mma``) is a rendezvous of the 32 lanes of a
  warp (the fibers ``32w .. 32w + 31``, as CUDA numbers a block's threads into warps): each
  lane leaves its operands in its slots and waits; the last lane to arrive runs the warp's
  whole operation once (per the PTX ISA) and releases the others. Lanes waiting there are not
  at a barrier: the block's other warps go on. A region whose x extent is not a multiple of 32,
  or a warp whose lanes do not all reach the call, is reported as an error (the call is
  undefined on a GPU then).

Barriers release their waiters only once no fiber can run any more (every live fiber waits at a
barrier, or at a warp-collective call: then some warp can never complete and that is reported).

Everything outside thread regions (including ``blockIdx`` and ``vthread`` loops) keeps its
sequential meaning, and so do ``threadIdx`` loops without barriers (TensorIR functions have
none), which preserves the sequential semantics documented in docs/semantics.

``thread_order="random"`` (``loopir.build(func, target="cpu", thread_order="random",
seed=0)``) runs lowered IR the way a GPU may instead, so that a missing barrier changes the
result on the CPU too:

* the thread region is the whole statement under the innermost ``blockIdx`` loops of a
  kernel (a kernel starts at an outermost thread-bound loop, as in
  :mod:`loopir.codegen_cuda.split`), not just a ``threadIdx`` loop with barriers: sibling
  ``threadIdx`` nests under one block loop share the hardware thread index and run in one
  region, and statements outside ``threadIdx`` loops run in every thread;
* ``shared`` (and other non-``local``) allocations inside the region are made once per
  region run, before the fibers start, and poisoned (NaN / -1) like every allocation;
* in each round the scheduler resumes the runnable fibers in a random permutation
  (a splitmix64 stream seeded from ``seed`` at every call, so a call is reproducible) and
  each runs to its next barrier (or warp-collective call), so a thread can read a tile element
  before the thread that fetches it has run, or overwrite one that another thread still has
  to read.
"""

from __future__ import annotations

from typing import Any

from loopir.ir.functor import post_order_visit
from loopir.ir.op import is_barrier, is_warp_collective
from loopir.ir.stmt import For, ForKind

__all__ = [
    "FIBER_PRELUDE", "SEED_ENTRY", "contains_sync", "contains_tag", "fiber_prelude", "thread_extents",
    "THREAD_COORDS", "ERR_DIVERGENCE", "ERR_MBARRIER", "ERR_WARP", "WARP_SLOTS",
]  # fmt: skip

ERR_DIVERGENCE = 5
#: A warp-collective call in a region whose x extent is not a multiple of 32 (id 0), or reached
#: by only some lanes of a warp (id 1: dim = the warp, value = lanes arrived, lo = fibers at a
#: barrier).
ERR_WARP = 6
#: An mbarrier misused in a thread region (id 0: an arrival beyond the phase's pending count,
#: value = the count, extent = pending, lo = expected) or a deadlock (id 1: value = fibers
#: waiting on mbarriers, extent = the fibers, lo = fibers at a block barrier).
ERR_MBARRIER = 7
#: Operand slots per fiber for a warp-collective call.
WARP_SLOTS = 4

# Fiber coordinates of the threadIdx tags (see lir_region_* functions).
THREAD_COORDS = {"threadIdx.x": "lir_tx", "threadIdx.y": "lir_ty", "threadIdx.z": "lir_tz"}

# Exported by libraries built with thread_order="random": seeds the scheduler's stream.
SEED_ENTRY = "loopir_set_seed"

_PRELUDE = r"""
/* ---- thread regions as fibers (see loopir/runtime/c_fibers.py) ---- */
#include <ucontext.h>
#define LIR_RANDOM_ORDER @RANDOM@
#define LIR_FIBER_STACK (256 * 1024)
static ucontext_t lir_sched_ctx;
static ucontext_t* lir_fctx;
static int* lir_fstate;             /* 0 runnable, 1 waiting at a barrier, 2 finished */
static int64_t lir_fiber_id;
static int64_t lir_fiber_dims[3];
static void* lir_fiber_env;
static void (*lir_fiber_fn)(void);

#if LIR_RANDOM_ORDER
/* splitmix64: the scheduler's random stream, reseeded by every call (loopir_set_seed) */
static uint64_t lir_rng_state;
void @SEED@(uint64_t seed) { lir_rng_state = seed; }
static uint64_t lir_rng_next(void) {
  uint64_t z = (lir_rng_state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
#endif

static void lir_fiber_main(void) {
  lir_fiber_fn();
  lir_fstate[lir_fiber_id] = 2;       /* returning resumes the scheduler via uc_link */
}
static void lir_barrier(void) {
  int64_t me = lir_fiber_id;
  lir_fstate[me] = 1;
  swapcontext(&lir_fctx[me], &lir_sched_ctx);
}

/* Warp-collective calls: each lane leaves its operands in its LIR_WARP_SLOTS slots and
   arrives; lir_warp_arrive returns 1 in the last lane of the warp to arrive, which then runs
   the warp's operation on the 32 lanes' slots and calls lir_warp_release; the other lanes
   wait (state 3) until then and return 0. */
#define LIR_WARP_SLOTS @SLOTS@
static int64_t* lir_warp_count;       /* lanes arrived, per warp */
static void** lir_warp_slot;          /* LIR_WARP_SLOTS operands per fiber */
static int lir_warp_arrive(int64_t* err) {
  int64_t me = lir_fiber_id;
  if (lir_fiber_dims[0] % 32 != 0) {
    lir_fail(err, @ERR_WARP@, 0, 0, lir_fiber_dims[0], 32, 0, 0);
    return 0;
  }
  if (++lir_warp_count[me / 32] < 32) {
    lir_fstate[me] = 3;
    swapcontext(&lir_fctx[me], &lir_sched_ctx);
    return 0;
  }
  lir_warp_count[me / 32] = 0;
  return 1;
}
static void lir_warp_release(void) {
  int64_t base = lir_fiber_id / 32 * 32;
  for (int64_t l = base; l < base + 32; ++l) if (l != lir_fiber_id) lir_fstate[l] = 0;
}

/* mbarriers (loopir.ir.tma) in a thread region: the barrier's 64 bits hold the arrivals still
   pending in the current phase (bits 0-31), the count it was initialized with (32-62) and the
   current phase's parity (63). expect_tx's bytes are not counted: the executor's copies land
   when issued. A wait on parity p returns once the current phase's parity is not p (the phase
   of parity p completed), else its fiber waits (state 4) until some phase completes; arriving
   more often than a phase expects is an error, and so is every live fiber waiting with none
   able to arrive (a deadlock on the GPU). */
static int64_t lir_mbar_waiting;      /* fibers in state 4 */
static void lir_mbar_init(uint64_t* bar, int64_t count, int64_t* err) {
  (void)err;
  *bar = ((uint64_t)count << 32) | (uint64_t)count;
}
static void lir_mbar_arrive(uint64_t* bar, int64_t count, int64_t* err) {
  int64_t pending = (int64_t)(*bar & 0xffffffffu), expected = (int64_t)((*bar >> 32) & 0x7fffffffu);
  uint64_t parity = *bar >> 63;
  if (count > pending) { lir_fail(err, @ERR_MBAR@, 0, 0, count, pending, 0, expected); return; }
  pending -= count;
  if (pending == 0) {   /* the phase completes: the next one starts, its waiters may go on */
    parity ^= 1u; pending = expected;
    for (int64_t i = 0; lir_mbar_waiting && i < lir_fiber_dims[0] * lir_fiber_dims[1] * lir_fiber_dims[2]; ++i)
      if (lir_fstate[i] == 4) { lir_fstate[i] = 0; --lir_mbar_waiting; }
  }
  *bar = (parity << 63) | ((uint64_t)expected << 32) | (uint64_t)pending;
}
static void lir_mbar_wait(uint64_t* bar, int64_t parity, int64_t* err) {
  while ((int64_t)(*bar >> 63) == parity && !err[0]) {
    int64_t me = lir_fiber_id;
    lir_fstate[me] = 4; ++lir_mbar_waiting;
    swapcontext(&lir_fctx[me], &lir_sched_ctx);
  }
}

static void lir_run_fibers(int64_t* err, void* env, const int64_t* dims, void (*fn)(void)) {
  int64_t n = dims[0] * dims[1] * dims[2];
  if (n <= 0) return;
  ucontext_t* ctx = (ucontext_t*)malloc((size_t)n * sizeof(ucontext_t));
  int* state = (int*)calloc((size_t)n, sizeof(int));
  char* stacks = (char*)malloc((size_t)n * LIR_FIBER_STACK);
  int64_t* order = (int64_t*)malloc((size_t)n * sizeof(int64_t));
  int64_t* wcount = (int64_t*)calloc((size_t)(n / 32 + 1), sizeof(int64_t));
  void** wslot = (void**)calloc((size_t)n * LIR_WARP_SLOTS, sizeof(void*));
  if (!ctx || !state || !stacks || !order || !wcount || !wslot) {
    lir_fail(err, 4, -1, 0, n * (int64_t)LIR_FIBER_STACK, 0, 0, 0);
    free(ctx); free(state); free(stacks); free(order); free(wcount); free(wslot);
    return;
  }
  lir_fctx = ctx; lir_fstate = state; lir_fiber_env = env; lir_fiber_fn = fn;
  lir_warp_count = wcount; lir_warp_slot = wslot; lir_mbar_waiting = 0;
  lir_fiber_dims[0] = dims[0]; lir_fiber_dims[1] = dims[1]; lir_fiber_dims[2] = dims[2];
  for (int64_t i = 0; i < n; ++i) {
    getcontext(&ctx[i]);
    ctx[i].uc_stack.ss_sp = stacks + i * (int64_t)LIR_FIBER_STACK;
    ctx[i].uc_stack.ss_size = LIR_FIBER_STACK;
    ctx[i].uc_link = &lir_sched_ctx;
    makecontext(&ctx[i], lir_fiber_main, 0);
  }
  /* state: 0 runnable, 1 at a barrier, 2 finished, 3 at a warp-collective call, 4 at an
     mbarrier wait */
  int64_t live = n, finished = 0;
  while (live > 0) {
    /* one round: every runnable fiber runs to its next barrier, collective call or end */
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) if (state[i] == 0) order[m++] = i;
    if (m == 0) {   /* nobody can run: every live fiber waits */
      int64_t at_barrier = 0, warp = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (state[i] == 1) ++at_barrier;
        if (state[i] == 3 && warp < 0) warp = i / 32;
      }
      if (lir_mbar_waiting) {  /* waiting on mbarrier phases that no fiber can complete */
        lir_fail(err, @ERR_MBAR@, 1, 0, lir_mbar_waiting, n, 0, at_barrier);
        break;
      }
      if (warp >= 0) {  /* a warp whose lanes do not all reach its collective call */
        lir_fail(err, @ERR_WARP@, 1, warp, wcount[warp], 32, 0, at_barrier);
        break;
      }
      if (finished) {   /* some threads left while others wait at a barrier */
        lir_fail(err, 5, 0, 0, at_barrier, n, 0, 0);
        break;
      }
      for (int64_t i = 0; i < n; ++i) if (state[i] == 1) state[i] = 0;   /* all at the barrier */
      continue;
    }
#if LIR_RANDOM_ORDER
    for (int64_t k = m - 1; k > 0; --k) {  /* Fisher-Yates: a fresh permutation per round */
      int64_t j = (int64_t)(lir_rng_next() % (uint64_t)(k + 1));
      int64_t t = order[k]; order[k] = order[j]; order[j] = t;
    }
#endif
    for (int64_t k = 0; k < m; ++k) {
      int64_t i = order[k];
      lir_fiber_id = i;
      swapcontext(&lir_sched_ctx, &ctx[i]);
      if (state[i] == 2) { --live; ++finished; }
    }
  }
  free(ctx); free(state); free(stacks); free(order); free(wcount); free(wslot);
}
"""


def fiber_prelude(random_order: bool = False) -> str:
    """The fiber runtime in C; ``random_order`` resumes the fibers of each barrier phase in a
    seeded random permutation (and exports :data:`SEED_ENTRY`) instead of in thread order."""
    return (
        _PRELUDE.replace("@RANDOM@", "1" if random_order else "0").replace("@SEED@", SEED_ENTRY)
        .replace("@SLOTS@", str(WARP_SLOTS)).replace("@ERR_WARP@", str(ERR_WARP))
        .replace("@ERR_MBAR@", str(ERR_MBARRIER))
    )


FIBER_PRELUDE = fiber_prelude(False)


def _is_sync(node: Any) -> bool:
    return is_barrier(node) or is_warp_collective(node)


def contains_sync(stmt: Any) -> bool:
    """Whether ``stmt`` contains a ``storage_sync`` barrier (or another call that threads
    execute together: a cross-thread reduction, a warp-collective call)."""
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if _is_sync(n):
            found = True

    post_order_visit(stmt, visit)
    return found


def thread_extents(stmt: Any) -> dict[str, list[Any]]:
    """Extents of the ``threadIdx.*`` loops in ``stmt``, per tag."""
    out: dict[str, list[Any]] = {}

    def visit(n: Any) -> None:
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING and n.thread_tag in THREAD_COORDS:
            out.setdefault(n.thread_tag, []).append(n.extent)

    post_order_visit(stmt, visit)
    return out


def contains_tag(stmt: Any, prefix: str) -> bool:
    """Whether ``stmt`` contains a thread-bound loop whose tag starts with ``prefix``."""
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING and (n.thread_tag or "").startswith(prefix):
            found = True

    post_order_visit(stmt, visit)
    return found
