"""``python -m loopir demo``: from a te workload to a padded kernel, and a CUTLASS GEMM.

Steps (each one prints what it did; a failing step is reported and the demo goes on with the
steps that do not need its result, then exits non-zero):

1. the dense workload written with ``loopir.te``;
2. the DietCode schedule (``loopir.examples.dense``) and its trace, printed as Python;
3. the trace saved to JSON and replayed on a fresh schedule;
4. the lowered IR with local padding off and on, as a diff, and the pass's report;
5. the CUDA source (emitted without nvcc) and, when nvcc exists, its ptxas resource figures;
6. on a GPU: padded / unpadded / cuBLAS times; without one: the CPU executor on a small shape
   checked against numpy;
7. the CUTLASS handoff of an fp16 GEMM: the chosen kernel, and on a GPU its time.
"""

from __future__ import annotations

import difflib
import json
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from loopir.cli.env import probe_cutlass, probe_gpu, probe_nvcc
from loopir.cli.term import Console

__all__ = ["DemoOptions", "run_demo"]

STEPS = 7

WORKLOAD_SOURCE = '''\
from loopir import te

A = te.placeholder((M, K), "float32", name="A")
B = te.placeholder((K, N), "float32", name="B")
k = te.reduce_axis(K, name="k")
C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
func = te.create_prim_func([A, B, C])'''


@attrs.define
class DemoOptions:
    """Settings of one demo run (the command-line options)."""

    shape: tuple[int, int, int] = (960, 770, 2304)
    cpu_shape: tuple[int, int, int] = (60, 50, 70)
    source_lines: int = 40
    force_cpu: bool = False
    cutlass: bool = True


class _Demo:
    def __init__(self, con: Console, opts: DemoOptions) -> None:
        self.con = con
        self.opts = opts
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.state: dict[str, Any] = {}
        self.step_no = 0

    # --- step plumbing --------------------------------------------------------------------
    def step(self, title: str, fn: Callable[[], None], needs: tuple[str, ...] = ()) -> None:
        self.step_no += 1
        self.con.heading(f"[{self.step_no}/{STEPS}] {title}")
        missing = [n for n in needs if n not in self.state]
        if missing:
            self.skip(f"{title}: needs the result of an earlier step that failed ({', '.join(missing)})")
            return
        try:
            fn()
        except BrokenPipeError:
            raise  # the reader of our output is gone: nothing left to report to
        except Exception as exc:  # report and go on: the demo must show as much as it can
            self.failed.append(f"{title}: {type(exc).__name__}: {exc}")
            self.con.fail(f"  FAILED: {type(exc).__name__}: {exc}")
            self.con.write(traceback.format_exc().rstrip(), "dim")

    def skip(self, why: str) -> None:
        self.skipped.append(why)
        self.con.note(f"  skipped {why}")

    # --- 1. workload ----------------------------------------------------------------------
    def workload(self) -> None:
        from loopir.examples import dense_func

        M, K, N = self.opts.shape
        self.con.write(f"  C[M, N] = A[M, K] @ B[K, N] with M, K, N = {M}, {K}, {N} (float32):")
        self.con.code(WORKLOAD_SOURCE)
        func = dense_func(M, K, N)
        self.state["func"] = func
        self.con.write("  as a PrimFunc (one block per stage):")
        self.con.code(func.script())

    # --- 2. schedule ----------------------------------------------------------------------
    def schedule(self) -> None:
        from loopir.examples import dense

        M, K, N = self.opts.shape
        sch = dense(M, K, N)
        self.state["sch"] = sch
        self.con.write("  sch = loopir.examples.dense(M, K, N)   # the DietCode dense schedule")
        self.con.write(f"  its trace ({len(sch.trace)} instructions), as runnable Python:")
        self.con.code(str(sch.trace))

    # --- 3. trace replay ------------------------------------------------------------------
    def replay(self) -> None:
        import loopir

        sch = self.state["sch"]
        text = json.dumps(sch.trace.as_json())
        trace = loopir.Trace.from_json(json.loads(text))
        sch2 = loopir.Schedule(self.state["func"])
        trace.apply_to(sch2)
        loopir.assert_structural_equal(sch.func, sch2.func)
        self.con.ok(
            f"  trace -> JSON ({len(text)} bytes) -> Trace.from_json -> apply_to(fresh schedule): "
            "structurally equal to the original"
        )

    # --- 4. lowering, local padding -------------------------------------------------------
    def lower(self) -> None:
        import loopir
        from loopir.ir.printer import script
        from loopir.passes import LocalPadding, PassContext, PassInstrument

        class KeepLocalPadding(PassInstrument):
            """Keeps the LocalPadding pass object that ``loopir.lower`` ran (for its report)."""

            def __init__(self) -> None:
                self.passes: list[LocalPadding] = []

            def run_after_pass(self, func: Any, pass_: Any) -> None:
                if isinstance(pass_, LocalPadding):
                    self.passes.append(pass_)

        func = self.state["sch"].func
        keep = KeepLocalPadding()
        with PassContext(config={"tir.enable_local_pad": False}):
            off = loopir.lower(func)
        with PassContext(config={"tir.enable_local_pad": True}, instruments=[keep]):
            on = loopir.lower(func)
        self.state["lowered_off"], self.state["lowered_on"] = off, on
        diff = list(
            difflib.unified_diff(
                script(off).splitlines(),
                script(on).splitlines(),
                "tir.enable_local_pad=False",
                "tir.enable_local_pad=True",
                n=1,
                lineterm="",
            )
        )
        self.con.write("  loopir.lower(sch.func) under PassContext(config={\"tir.enable_local_pad\": ...}):")
        if diff:
            self.con.diff(diff)
        else:
            self.con.note("  local padding changed nothing for this shape (no guards to remove)")
        report = keep.passes[-1].report if keep.passes else None
        if report is not None:
            self.con.write("  the LocalPadding report (LocalPadding(explain=True) logs it):")
            self.con.code(str(report))

    # --- 5. CUDA source -------------------------------------------------------------------
    def cuda_source(self) -> None:
        from loopir.codegen_cuda import compile_cuda, emit_cuda

        source = {}
        for pad in (False, True):
            low = self.state["lowered_on" if pad else "lowered_off"]
            source[pad] = emit_cuda(low).source
        lines = source[True].splitlines()
        shown = max(self.opts.source_lines, 0)
        self.con.write(f"  CUDA C++ of the padded kernel (first {min(shown, len(lines))} of {len(lines)} lines):")
        self.con.code("\n".join(lines[:shown]))
        if len(lines) > shown:
            self.con.write(f"    ... ({len(lines) - shown} more lines; `python -m loopir show --cuda` prints all)", "dim")
        has_nvcc, nvcc = probe_nvcc()
        if not has_nvcc:
            self.skip(f"compiling the CUDA source: {nvcc}")
            return
        rows = []
        for pad in (False, True):
            label = "padded" if pad else "unpadded"
            with self.con.progress(f"nvcc: {label} kernel"):
                binary = compile_cuda(source[pad])
            for name, r in binary.resources.items():
                rows.append([label, name, binary.arch, str(r.registers), str(r.shared_bytes),
                             f"{r.spill_store_bytes}/{r.spill_load_bytes}"])  # fmt: skip
        self.con.table(["variant", "kernel", "arch", "registers", "smem B", "spill st/ld B"], rows)

    # --- 6. run -----------------------------------------------------------------------------
    def run(self) -> None:
        has_gpu, gpu = probe_gpu()
        if self.opts.force_cpu:
            has_gpu, gpu = False, "--cpu was given"
        if has_gpu:
            from loopir.cli.gpu import compare_dense

            self.con.write(f"  GPU: {gpu}")
            rows, ok, notes = compare_dense(self.con, self.state["sch"], self.opts.shape)
            self.con.table(["variant", "ms", "TFLOP/s", "rel. error", "check"], rows)
            for n in notes:
                self.skip(n)
            if not ok:
                raise RuntimeError("a GPU result differs from the float64 reference (see the table)")
            return
        self.skip(f"running on a GPU: {gpu}")
        self.cpu_check()

    def cpu_check(self) -> None:
        import loopir
        from loopir.examples import dense

        M, K, N = self.opts.cpu_shape
        self.con.write(f"  CPU reference executor instead, same schedule at {M} x {K} x {N}:")
        sch = dense(M, K, N)
        rng = np.random.default_rng(0)
        a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        variants: list[tuple[str, Any]] = [("scheduled TensorIR (blocks)", sch.func)]
        for pad in (False, True):
            with loopir.PassContext(config={"tir.enable_local_pad": pad}):
                variants.append((f"lowered, local padding {'on' if pad else 'off'}", loopir.lower(sch.func)))
        rows = []
        results = []
        bad = False
        for i, (label, f) in enumerate(variants):
            self.con.bar(i, len(variants), label)
            mod = loopir.build(f, target="cpu")
            c = np.full((M, N), np.nan, np.float32)  # poisoned: an unwritten element shows up
            mod(a, b, c)
            results.append(c)
            err = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
            good = bool(np.all(np.isfinite(c))) and err < 1e-5
            bad |= not good
            rows.append([label, f"{err:.1e}", "ok" if good else "MISMATCH"])
        self.con.bar(len(variants), len(variants), "")
        self.con.table(["variant", "rel. error vs numpy (float64)", "check"], rows)
        same = all(np.array_equal(results[1], r) for r in results[2:])
        if bad:
            raise RuntimeError("the CPU executor's result differs from numpy (see the table)")
        self.con.ok(
            "  all variants match numpy"
            + ("; padded and unpadded results are bit-identical" if same else "")
        )

    # --- 7. CUTLASS -------------------------------------------------------------------------
    def cutlass(self) -> None:
        if not self.opts.cutlass:
            self.skip("the CUTLASS GEMM: --no-cutlass was given")
            return
        from loopir.cli.gpu import cutlass_gemm, fp16_gemm_func
        from loopir.codegen_cuda.cutlass.offload import GemmOffload

        M, K, N = self.opts.shape
        K8 = -(-K // 8) * 8  # CUTLASS needs 16-byte aligned rows: K a multiple of 8 halves
        note = f" (K rounded up from {K} to a multiple of 8 for 16-byte alignment)" if K8 != K else ""
        self.con.write(f"  fp16 GEMM {M} x {K8} x {N} with fp32 accumulation{note}:")
        func = fp16_gemm_func(M, K8, N)
        has_cutlass, why = probe_cutlass()
        if not has_cutlass:
            self.skip(f"the CUTLASS handoff: {why}")
            return
        offload = GemmOffload()
        offloaded = offload(func)
        for d in offload.report:
            mark = "-> CUTLASS" if d.offloaded else "stays generated code"
            self.con.write(f"  GemmOffload: block {d.block} {mark}: {d.reason}")
        if not any(d.offloaded for d in offload.report):
            self.skip("the CUTLASS GEMM: GemmOffload did not offload the block")
            return
        has_gpu, gpu = probe_gpu()
        if self.opts.force_cpu:
            has_gpu, gpu = False, "--cpu was given"
        if not has_gpu:
            from loopir.codegen_cuda.cutlass.enumerate import default_candidate
            from loopir.codegen_cuda.cutlass.hook import problem_from_signature
            from loopir.codegen_cuda.cutlass.offload import library_calls_of

            for call_id, desc in sorted(library_calls_of(offloaded).items()):
                with self.con.progress("choosing the kernel (cutlass_library's generator)"):
                    cand = default_candidate(problem_from_signature(desc["problem"]), int(desc["arch"]))
                self.con.write(f"  {call_id}: {cand.name}")
                self.con.write(f"    tile {cand.config()['tile']}, cluster {cand.config()['cluster']}")
            self.skip(f"compiling and running the CUTLASS kernel: no GPU ({gpu})")
            return
        rows, kernel, ok = cutlass_gemm(self.con, func, (M, K8, N))
        self.con.write(f"  chosen kernel: {kernel}")
        self.con.table(["variant", "ms", "TFLOP/s", "rel. error", "check"], rows)
        if not ok:
            raise RuntimeError("the CUTLASS result differs from the float64 reference")

    # --- driver ---------------------------------------------------------------------------
    def main(self) -> int:
        self.con.write("loopir demo: a dense layer from te to a padded GPU kernel", "bold")
        self.step("The workload, written with loopir.te", self.workload)
        self.step("The DietCode schedule and its trace", self.schedule, ("func",))
        self.step("Replaying the trace from JSON", self.replay, ("sch",))
        self.step("Lowering with local padding off and on", self.lower, ("sch",))
        self.step("CUDA source", self.cuda_source, ("lowered_on",))
        self.step("Running it", self.run, ("sch",))
        self.step("The CUTLASS handoff", self.cutlass)
        self.con.heading("Summary")
        for s in self.skipped:
            self.con.note(f"  skipped {s}")
        for f in self.failed:
            self.con.fail(f"  failed  {f}")
        if not self.failed:
            self.con.ok("  all steps succeeded" + (" (some skipped, see above)" if self.skipped else ""))
        return 1 if self.failed else 0


def run_demo(con: Console, opts: DemoOptions) -> int:
    """Run the demo, writing to ``con``; returns the exit status (1 if a step failed)."""
    return _Demo(con, opts).main()
