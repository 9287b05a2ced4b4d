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
"""

from __future__ import annotations

from typing import Any

from loopir.ir.expr import Call
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import For, ForKind

__all__ = ["FIBER_PRELUDE", "contains_sync", "thread_extents", "THREAD_COORDS", "ERR_DIVERGENCE"]

ERR_DIVERGENCE = 5

# Fiber coordinates of the threadIdx tags (see lir_region_* functions).
THREAD_COORDS = {"threadIdx.x": "lir_tx", "threadIdx.y": "lir_ty", "threadIdx.z": "lir_tz"}

FIBER_PRELUDE = r"""
/* ---- thread regions as fibers (see loopir/runtime/c_fibers.py) ---- */
#include <ucontext.h>
#define LIR_FIBER_STACK (256 * 1024)
static ucontext_t lir_sched_ctx;
static ucontext_t* lir_fctx;
static int* lir_fstate;             /* 0 runnable, 1 waiting at a barrier, 2 finished */
static int64_t lir_fiber_id;
static int64_t lir_fiber_dims[3];
static void* lir_fiber_env;
static void (*lir_fiber_fn)(void);

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
  if (!ctx || !state || !stacks) {
    lir_fail(err, 4, -1, 0, n * (int64_t)LIR_FIBER_STACK, 0, 0, 0);
    free(ctx); free(state); free(stacks);
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
    int64_t waiting = 0, finished = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (state[i] == 2) continue;
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
  free(ctx); free(state); free(stacks);
}
"""


def _is_sync(node: Any) -> bool:
    return isinstance(node, Call) and node.op == "tvm_storage_sync"


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
