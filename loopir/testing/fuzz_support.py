"""Helpers of the schedule fuzzers (``loopir.testing.fuzz`` and ``loopir.testing.gpu_fuzz``):
drawing a workload, binding a random schedule for the GPU, recognizing the refusals that are
part of the contract, sizing and building a step's run."""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loopir.errors import PassError, ScheduleError
from loopir.ir.expr import IntImm
from loopir.ir.stmt import Block
from loopir.testing.workloads import Workload

if TYPE_CHECKING:
    from loopir.testing.fuzz import Chooser

__all__ = ["bind_for_gpu", "cross_thread_refusal", "draw_workload"]


def cross_thread_refusal(e: PassError) -> bool:
    """Whether ``e`` is LowerCrossThreadReduction refusing a thread-bound reduction."""
    from loopir.passes.cross_thread import LowerCrossThreadReduction

    return str(e).startswith(f"pass {LowerCrossThreadReduction.__name__}:")


def bind_for_gpu(sch: Any) -> int:
    """Bind the top-level loop nests of ``sch`` to the GPU where the schedule allows it.

    For each loop nest directly under the root block whose outermost loop is not bound yet,
    the outermost loop is bound to ``blockIdx.x`` and, when possible, the loop below it to
    ``threadIdx.x`` (refusals are skipped: the nest then stays as it is). Used to turn a
    random schedule into one the CUDA backend can build. Returns how many loops were bound.
    """
    from loopir.ir.stmt import ForKind
    from loopir.schedule import tree

    bound = 0
    for name in [n for n in tree.block_names(sch.func) if n != "root"]:
        try:
            loops = sch.get_loops(sch.get_block(name))
        except ScheduleError:
            continue
        if not loops:
            continue
        for depth, tag in enumerate(("blockIdx.x", "threadIdx.x")):
            if depth >= len(loops):
                break
            node = sch.get(loops[depth])
            if node.kind is ForKind.THREAD_BINDING:
                continue
            try:
                sch.bind(loops[depth], tag)
                bound += 1
            except ScheduleError:
                break
    return bound


def _elements(shape: Sequence[Any], sizes: Mapping[str, int]) -> int | None:
    """Number of elements of a shape whose dims are constants or symbolic sizes in ``sizes``;
    None for other expressions."""
    from loopir.ir.expr import Var

    n = 1
    for d in shape:
        if isinstance(d, IntImm):
            n *= d.value
        elif isinstance(d, Var) and d.name in sizes:
            n *= sizes[d.name]
        else:
            return None
    return n


def _max_elements(func: Any, sizes: Mapping[str, int]) -> int:
    """Elements of the largest buffer (parameter or allocated) of ``func``."""
    from loopir.ir.functor import post_order_visit

    found = [_elements(b.shape, sizes) or 0 for b in func.params]

    def visit(n: object) -> None:
        if isinstance(n, Block):
            found.extend(_elements(b.shape, sizes) or 0 for b in n.alloc_buffers)

    post_order_visit(func.body, visit)
    return max(found, default=0)


def _fast_build_options() -> dict[str, Any]:
    """CPU build options that compile quickly: the fuzzer builds a library per step, and gcc
    (mostly its linker) dominates the run time. Bounds checks stay on."""
    import shutil

    flags = ["-pipe"]
    if shutil.which("ld.gold"):
        flags.append("-fuse-ld=gold")  # ~25% faster than ld.bfd for these small libraries
    return {"opt_level": "-O0", "extra_flags": tuple(flags)}


def _short_tb(e: BaseException, limit: int = 6) -> str:
    return "".join(traceback.format_tb(e.__traceback__)[-limit:])


def draw_workload(ch: Chooser, names: Sequence[str] | None = None) -> Workload:
    """A random workload of [`WORKLOADS`][loopir.testing.workloads.WORKLOADS] with small shapes."""
    from loopir.testing.workloads import make_workload

    name = ch.choice(list(names) if names is not None else _WORKLOAD_NAMES)

    def d(lo: int = 1, hi: int = 8) -> int:
        return ch.integer(lo, hi)

    args: dict[str, Any]
    if name == "matmul":
        args = dict(M=d(), K=d(), N=d())
    elif name == "batch_matmul":
        args = dict(Bt=d(1, 3), M=d(1, 5), K=d(1, 5), N=d(1, 5))
    elif name == "matmul_bias_relu":
        args = dict(M=d(), K=d(), N=d())
    elif name == "conv2d_nhwc":
        k = d(1, 3)
        args = dict(N=d(1, 2), H=d(k, 6), W=d(k, 6), CI=d(1, 3), CO=d(1, 3), KH=k, KW=k,
                    pad=d(0, 1), stride=d(1, 2))  # fmt: skip
    elif name == "elementwise_chain":
        args = dict(M=d(), N=d(), stages=d(1, 4))
    elif name in ("reduce_max", "reduce_min"):
        args = dict(M=d(), K=d())
    elif name == "symbolic_matmul":
        args = dict(n=d(), K=d(), N=d())
    else:
        args = dict(n=d(), N=d())
    return make_workload(name, **args)


_WORKLOAD_NAMES = (
    "matmul", "batch_matmul", "matmul_bias_relu", "conv2d_nhwc", "elementwise_chain",
    "reduce_max", "reduce_min", "symbolic_matmul", "symbolic_elementwise",
)  # fmt: skip
