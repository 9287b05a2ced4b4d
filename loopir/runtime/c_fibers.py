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
  a GPU) and are reported as an error.

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
* in each barrier phase the scheduler resumes the runnable fibers in a random permutation
  (a splitmix64 stream seeded from ``seed`` at every call, so a call is reproducible) and
  each runs to its next barrier, so a thread can read a tile element before the thread that
  fetches it has run, or overwrite one that another thread still has to read.
"""

from __future__ import annotations

from typing import Any

from loopir.ir.functor import post_order_visit
from loopir.ir.op import is_barrier
from loopir.ir.stmt import For, ForKind

__all__ = [
    "FIBER_PRELUDE", "SEED_ENTRY", "contains_sync", "contains_tag", "fiber_prelude", "thread_extents",
    "THREAD_COORDS", "ERR_DIVERGENCE",
]  # fmt: skip

ERR_DIVERGENCE = 5

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
static void lir_run_fibers(int64_t* err, void* env, const int64_t* dims, void (*fn)(void)) {
  int64_t n = dims[0] * dims[1] * dims[2];
  if (n <= 0) return;
  ucontext_t* ctx = (ucontext_t*)malloc((size_t)n * sizeof(ucontext_t));
  int* state = (int*)calloc((size_t)n, sizeof(int));
  char* stacks = (char*)malloc((size_t)n * LIR_FIBER_STACK);
  int64_t* order = (int64_t*)malloc((size_t)n * sizeof(int64_t));
  if (!ctx || !state || !stacks || !order) {
    lir_fail(err, 4, -1, 0, n * (int64_t)LIR_FIBER_STACK, 0, 0, 0);
    free(ctx); free(state); free(stacks); free(order);
    return;
  }
  lir_fctx = ctx; lir_fstate = state; lir_fiber_env = env; lir_fiber_fn = fn;
  lir_fiber_dims[0] = dims[0]; lir_fiber_dims[1] = dims[1]; lir_fiber_dims[2] = dims[2];
  for (int64_t i = 0; i < n; ++i) {
    getcontext(&ctx[i]);
    ctx[i].uc_stack.ss_sp = stacks + i * (int64_t)LIR_FIBER_STACK;
    ctx[i].uc_stack.ss_size = LIR_FIBER_STACK;
    ctx[i].uc_link = &lir_sched_ctx;
    makecontext(&ctx[i], lir_fiber_main, 0);
  }
  int64_t live = n;
  while (live > 0) {
    /* one barrier phase: every live fiber runs to its next barrier (or to its end) */
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) if (state[i] != 2) order[m++] = i;
#if LIR_RANDOM_ORDER
    for (int64_t k = m - 1; k > 0; --k) {  /* Fisher-Yates: a fresh permutation per phase */
      int64_t j = (int64_t)(lir_rng_next() % (uint64_t)(k + 1));
      int64_t t = order[k]; order[k] = order[j]; order[j] = t;
    }
#endif
    int64_t waiting = 0, finished = 0;
    for (int64_t k = 0; k < m; ++k) {
      int64_t i = order[k];
      state[i] = 0;
      lir_fiber_id = i;
      swapcontext(&lir_sched_ctx, &ctx[i]);
      if (state[i] == 2) { --live; ++finished; } else { ++waiting; }
    }
    if (waiting && finished) {   /* some threads left while others wait at a barrier */
      lir_fail(err, 5, 0, 0, waiting, n, 0, 0);
      break;
    }
  }
  free(ctx); free(state); free(stacks); free(order);
}
"""


def fiber_prelude(random_order: bool = False) -> str:
    """The fiber runtime in C; ``random_order`` resumes the fibers of each barrier phase in a
    seeded random permutation (and exports :data:`SEED_ENTRY`) instead of in thread order."""
    return _PRELUDE.replace("@RANDOM@", "1" if random_order else "0").replace("@SEED@", SEED_ENTRY)


FIBER_PRELUDE = fiber_prelude(False)


def _is_sync(node: Any) -> bool:
    return is_barrier(node)


def contains_sync(stmt: Any) -> bool:
    """Whether ``stmt`` contains a ``storage_sync`` barrier."""
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
