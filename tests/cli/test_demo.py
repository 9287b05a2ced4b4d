"""``python -m loopir demo``: runs without a GPU, reads well as plain text, reports failures."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import loopir
from loopir.cli.demo import DemoOptions, _Demo, run_demo
from loopir.cli.term import Console

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m loopir ARGS``; its time is not asserted (``timeout`` guards a hang)."""
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "loopir", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def readme_demo() -> subprocess.CompletedProcess[str]:
    """The README's command, exactly: ``python -m loopir demo`` (stdout is a pipe here)."""
    return _run("demo")


def _trace_from(out: str) -> str:
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == "def apply_trace(sch):")
    body = [lines[start]]
    for ln in lines[start + 1:]:
        if not ln.startswith("        "):
            break
        body.append(ln)
    return "\n".join(ln[4:] for ln in body) + "\n"


def test_readme_demo_succeeds_in_plain_text(readme_demo) -> None:
    proc = readme_demo
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "\x1b[" not in out and "\r" not in out  # not a terminal: no color, no live progress
    for n in range(1, 8):
        assert f"[{n}/7] " in out
    assert "960, 770, 2304" in out
    assert "all steps succeeded" in out
    # without a GPU here, the demo must say what it skipped and why, then use the CPU
    from loopir.cli.env import probe_gpu

    if not probe_gpu()[0]:
        assert "skipped running on a GPU: " in out
        assert "CPU reference executor instead, same schedule at 60 x 50 x 70" in out
        assert re.search(r"lowered, local padding on +\S+ +ok", out)
        assert "MISMATCH" not in out


def test_demo_prints_a_trace_that_replays(readme_demo) -> None:
    proc = readme_demo
    ns: dict[str, object] = {}
    exec(_trace_from(proc.stdout), ns)
    sch = loopir.Schedule(loopir.examples.dense_func(960, 770, 2304))
    ns["apply_trace"](sch)
    loopir.assert_structural_equal(sch.func, loopir.examples.dense(960, 770, 2304).func)


def test_demo_shows_the_local_padding_diff_and_cuda_source(readme_demo) -> None:
    out = readme_demo.stdout
    removed = [ln for ln in out.splitlines() if ln.startswith("    -") and "A_shared[" in ln]
    added = [ln for ln in out.splitlines() if ln.startswith("    +") and "A_shared[" in ln]
    assert removed and added
    assert any("< 960" in ln and "if " in ln for ln in out.splitlines() if ln.startswith("    -"))
    assert any("T.Select(" in ln for ln in added)
    assert "LocalPadding report" in out and "[fetch] A_shared: padded" in out
    assert '__global__ void __launch_bounds__(256) main_kernel0' in out
    from loopir.cli.env import probe_nvcc

    if probe_nvcc()[0]:
        assert re.search(r"padded +main_kernel0 +sm_\d+a? +\d+", out)
    else:
        assert "skipped compiling the CUDA source: " in out


def test_demo_cutlass_step_names_a_kernel_or_says_why_not(readme_demo) -> None:
    out = readme_demo.stdout
    step = out[out.index("[7/7]"):]
    from loopir.cli.env import probe_cutlass

    if probe_cutlass()[0]:
        assert "GemmOffload: block C -> CUTLASS" in step
        assert re.search(r"(gemm_C|chosen kernel): cutlass\w+", step)
    else:
        assert "skipped the CUTLASS handoff: the nvidia-cutlass package is not installed" in step


def test_small_demo_with_color_forced() -> None:
    proc = _run("--color", "always", "demo", "--small", "--no-cutlass", "--cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "\x1b[1;36m[1/7] The workload" in proc.stdout
    assert "M, K, N = 60, 50, 70" in proc.stdout
    assert "skipped the CUTLASS GEMM: --no-cutlass was given" in proc.stdout
    assert "skipped running on a GPU: --cpu was given" in proc.stdout


def _demo(opts: DemoOptions) -> tuple[_Demo, int, str]:
    out = io.StringIO()
    demo = _Demo(Console(out, "never"), opts)
    rc = demo.main()
    return demo, rc, out.getvalue()


def test_a_failing_step_is_reported_and_its_dependents_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: _Demo) -> None:
        raise loopir.ScheduleError("split: factors must be positive ints or None, got 0")

    monkeypatch.setattr(_Demo, "schedule", broken)
    demo, rc, out = _demo(DemoOptions(shape=(60, 50, 70), cutlass=False, force_cpu=True))
    assert rc == 1
    assert "FAILED: ScheduleError: split: factors must be positive ints or None, got 0" in out
    assert "Replaying the trace from JSON: needs the result of an earlier step that failed (sch)" in out
    assert any("The DietCode schedule" in f for f in demo.failed)
    assert "failed  The DietCode schedule and its trace" in out
    assert "all steps succeeded" not in out


def test_a_wrong_result_fails_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU branch's table and check, with the GPU work replaced (no GPU needed)."""
    import loopir.cli.demo as demo_mod
    import loopir.cli.gpu as gpu_mod

    monkeypatch.setattr(demo_mod, "probe_gpu", lambda: (True, "Fake GPU"))
    rows = [["loopir, local padding off", "1.000", "4.3", "1.0e-07", "ok"],
            ["loopir, local padding on", "0.900", "4.8", "3.0e-01", "MISMATCH"]]  # fmt: skip
    monkeypatch.setattr(gpu_mod, "compare_dense", lambda con, sch, shape: (rows, False, ["the cuBLAS baseline: torch is not installed"]))
    _, rc, out = _demo(DemoOptions(shape=(60, 50, 70), cutlass=False))
    assert rc == 1
    assert "GPU: Fake GPU" in out
    assert re.search(r"loopir, local padding on +0\.900 +4\.8 +3\.0e-01 +MISMATCH", out)
    assert "skipped the cuBLAS baseline: torch is not installed" in out
    assert "a GPU result differs from the float64 reference" in out


def test_run_demo_returns_zero_on_the_cpu_path() -> None:
    out = io.StringIO()
    rc = run_demo(Console(out, "never"), DemoOptions(shape=(60, 50, 70), cutlass=False, force_cpu=True, source_lines=5))
    text = out.getvalue()
    assert rc == 0, text
    assert "first 5 of" in text and "more lines; `python -m loopir show --cuda` prints all" in text
    assert "padded and unpadded results are bit-identical" in text


def test_gpu_helpers() -> None:
    import numpy as np

    from loopir.cli.gpu import fp16_gemm_func, rel_error, tflops

    ref = np.ones((2, 2))
    assert rel_error(np.ones((2, 2), np.float32), ref) == 0.0
    assert rel_error(np.array([[1, np.nan], [1, 1]], np.float32), ref) == float("inf")
    assert tflops((1000, 1000, 1000), 1.0) == pytest.approx(2.0)
    f = fp16_gemm_func(16, 8, 24)
    assert [p.dtype for p in f.params] == ["float16"] * 3
    assert [tuple(int(s.value) for s in p.shape) for p in f.params] == [(16, 8), (8, 24), (16, 24)]


def test_without_nvcc_and_cutlass_the_demo_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import loopir.cli.demo as demo_mod

    why_nvcc = "CUDA compile: nvcc was not found (set LOOPIR_NVCC or CUDA_HOME, or put it on PATH)"
    monkeypatch.setattr(demo_mod, "probe_nvcc", lambda: (False, why_nvcc))
    monkeypatch.setattr(demo_mod, "probe_cutlass", lambda: (False, "the nvidia-cutlass package is not installed"))
    _, rc, out = _demo(DemoOptions(shape=(60, 50, 70), force_cpu=True))
    assert rc == 0, out
    assert "CUDA C++ of the padded kernel" in out  # the emitter needs no nvcc
    assert f"skipped compiling the CUDA source: {why_nvcc}" in out
    assert "skipped the CUTLASS handoff: the nvidia-cutlass package is not installed" in out
    assert "fp16 GEMM 60 x 56 x 70 with fp32 accumulation (K rounded up from 50" in out
