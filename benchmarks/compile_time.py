"""Compile time of the CUDA path without nvcc: schedule, lower and emit, per example and size.

One command, CPU only (issue 28 item 2)::

    python3 benchmarks/compile_time.py [--cases GLOB,...] [--repeat 5] [--json out.json]
                                       [--tvm /work/tvm-venv/bin/python]

Phases, timed separately with ``time.perf_counter`` in this one process; every run starts
from a fresh function (the schedule is rebuilt), one warm-up run per case, then the median of
``--repeat`` runs of each phase and of their sum:

schedule
    building the scheduled function: the te function and the schedule primitives (for an
    example, ``loopir.examples.<name>(...)``; for a te workload, the default GPU schedule,
    :func:`loopir.schedule.default_gpu.default_gpu_schedule`, which is what the CUDA target's
    ``DefaultGPUSchedule`` pass applies to an unscheduled function);
lower
    ``loopir.codegen_cuda.lower_for_cuda(func)`` under the case's PassContext;
emit
    everything ``build_cuda`` does after lowering and before nvcc:
    :func:`loopir.codegen_cuda.emit_function` (kernels, the race check, host code) and the
    translation unit's text (``units.unit_source``).

After the table, the issue's targets are checked (printed, never asserted): lower + emit at
most 150 ms per case; per example, the largest size's time within 1.3x of the smallest's
(passed only when every size is within 1.3x of every other: a faster large size counts too);
the DietCode dense total at most TVM's in the same run (``--tvm PYTHON`` runs
``benchmarks/tvm_dietcode.py`` under that interpreter: a TVM 0.27 venv, never a loopir
dependency; without it the comparison is skipped).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # the checkout's loopir, when run as a script
    sys.path.insert(0, str(HERE.parent))

import loopir  # noqa: E402
from loopir.codegen_cuda import emit_function, lower_for_cuda  # noqa: E402
from loopir.codegen_cuda.units import unit_source  # noqa: E402

PHASES = ("schedule", "lower", "emit")
#: The issue's targets.
LOWER_EMIT_LIMIT_MS = 150.0
SIZE_RATIO_LIMIT = 1.3
DIETCODE = "dense/960x770x2304"


@dataclass(frozen=True)
class Case:
    """One row: ``build()`` returns the scheduled PrimFunc (the timed schedule phase).

    ``example`` groups the sizes of one example for the size-ratio check (listed smallest
    first); ``config`` is the PassContext the case is lowered and emitted under; a case that
    is not ``default`` runs only when ``--cases`` names it.
    """

    name: str
    example: str
    build: Callable[[], Any]
    config: Mapping[str, Any] = field(default_factory=dict)
    default: bool = True


def _example(name: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        return getattr(loopir.examples, name)(*args, **kwargs).func

    return build


def _default_schedule(workload: str, **args: Any) -> Callable[[], Any]:
    def build() -> Any:
        from loopir.schedule.default_gpu import default_gpu_schedule
        from loopir.testing.workloads import make_workload

        sch = loopir.Schedule(make_workload(workload, **args).func)
        default_gpu_schedule(sch)
        return sch.func

    return build


def _dims(*sizes: int) -> str:
    return "x".join(map(str, sizes))


def cases() -> list[Case]:
    """Every case, each example's sizes smallest first."""
    pad = {"tir.enable_local_pad": True}
    # dense in two families: sizes the tiles divide, and sizes they do not (guards, local
    # padding's proofs: the DietCode case). Size independence is checked within each family;
    # what the guards cost is the difference between the families, at any size.
    out = [Case(f"dense/{_dims(n, n, n)}", "dense (tiles divide)", _example("dense", n, n, n), pad)
           for n in (128, 4096, 16384)]  # fmt: skip
    for m, k, n in ((100, 77, 230), (960, 770, 2304), (16383, 16381, 16379)):
        name = DIETCODE if (m, k, n) == (960, 770, 2304) else f"dense/{_dims(m, k, n)}"
        out.append(Case(name, "dense (tiles do not divide)", _example("dense", m, k, n), pad))
    for n in (1024, 4096, 16384):
        out.append(Case(f"pipelined_gemm/{_dims(n, n, n)}", "pipelined_gemm", _example("pipelined_gemm", n, n, n)))
    for name in ("softmax", "layernorm", "rmsnorm"):
        for rows, cols in ((4096, 4096), (32768, 8192)):
            out.append(Case(f"{name}/{_dims(rows, cols)}/fp16", name, _example(name, rows, cols, "float16")))
    for n in (1024, 8192):
        out.append(Case(f"transpose/{_dims(n, n)}", "transpose", _example("transpose", n, n)))
    defaults: list[tuple[str, dict[str, Any], str]] = [
        ("elementwise_chain", dict(M=4096, N=4096, stages=4), "4096x4096x4stages"),
        ("matmul_bias_relu", dict(M=1024, K=1024, N=1024), "1024x1024x1024"),
        ("batch_matmul", dict(Bt=8, M=512, K=512, N=512), "8x512x512x512"),
        ("conv2d_nhwc", dict(N=1, H=56, W=56, CI=64, CO=64, KH=3, KW=3), "1x56x56x64x64k3"),
        ("reduce_max", dict(M=4096, K=4096), "4096x4096"),
    ]
    for workload, args, label in defaults:
        out.append(Case(f"default/{workload}/{label}", f"default/{workload}", _default_schedule(workload, **args)))
    # tiny, for the test that keeps this script working (run only when named)
    out.append(Case("smoke/elementwise_chain/64x32", "smoke", _default_schedule("elementwise_chain", M=64, N=32),
                    default=False))  # fmt: skip
    return out


def select(all_cases: list[Case], patterns: str | None) -> list[Case]:
    """The cases matching any comma-separated pattern (a glob, or else a substring)."""
    if not patterns:
        return [c for c in all_cases if c.default]
    pats = [p.strip() for p in patterns.split(",") if p.strip()]

    def hit(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p if any(ch in p for ch in "*?[") else f"*{p}*") for p in pats)

    return [c for c in all_cases if hit(c.name)]


def run_once(case: Case) -> dict[str, float]:
    """One schedule -> lower -> emit run; milliseconds per phase."""
    with loopir.PassContext(config=dict(case.config)):
        t0 = time.perf_counter()
        func = case.build()
        t1 = time.perf_counter()
        lowered = lower_for_cuda(func)
        t2 = time.perf_counter()
        code = emit_function(lowered)
        source = unit_source([code], runtime=True)
        t3 = time.perf_counter()
    if "__global__" not in source:
        raise RuntimeError(f"{case.name}: no CUDA kernel in the emitted source")
    return {"schedule": (t1 - t0) * 1e3, "lower": (t2 - t1) * 1e3, "emit": (t3 - t2) * 1e3}


def measure(case: Case, repeat: int, warmup: int) -> dict[str, Any]:
    """Medians over ``repeat`` runs after ``warmup`` runs (``total`` and ``lower_emit`` are
    the medians of the per-run sums, not sums of medians)."""
    for _ in range(warmup):
        run_once(case)
    runs = [run_once(case) for _ in range(max(1, repeat))]
    row: dict[str, Any] = {"case": case.name, "example": case.example, "repeat": len(runs),
                           "config": dict(case.config)}  # fmt: skip
    for phase in PHASES:
        row[f"{phase}_ms"] = statistics.median(r[phase] for r in runs)
    row["lower_emit_ms"] = statistics.median(r["lower"] + r["emit"] for r in runs)
    row["total_ms"] = statistics.median(sum(r.values()) for r in runs)
    return row


def run_tvm(python: str, repeat: int) -> tuple[dict[str, Any] | None, str]:
    """``benchmarks/tvm_dietcode.py`` under ``python``: (its JSON row, or None; a message)."""
    if not Path(python).exists():
        return None, f"no Python at {python} (benchmarks/tvm_dietcode.py says how to make the venv)"
    cmd = [python, str(HERE / "tvm_dietcode.py"), "--repeat", str(repeat)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{' '.join(cmd)} failed: {exc}"
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return None, f"{' '.join(cmd)}: {why}"
    try:
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, f"no JSON from {' '.join(cmd)}: {proc.stdout[-200:]!r}"
    out["case"] = f"tvm {out.get('tvm', '?')}: {DIETCODE} (no local pad)"
    out["lower_emit_ms"] = out["lower_ms"] + out["emit_ms"]
    return out, f"TVM {out.get('tvm', '?')} ran under {python}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | schedule ms | lower ms | emit ms | total ms |", "|---|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['schedule_ms']:.1f} | {r['lower_ms']:.1f} | "
                     f"{r['emit_ms']:.1f} | {r['total_ms']:.1f} |")  # fmt: skip
    return "\n".join(lines)


def checks(rows: list[dict[str, Any]], tvm: dict[str, Any] | None, tvm_note: str) -> tuple[list[str], dict[str, Any]]:
    """The issue's targets, as printed lines and as JSON (pass/fail; nothing is asserted)."""
    lines = [f"lower + emit <= {LOWER_EMIT_LIMIT_MS:.0f} ms per case:"]
    result: dict[str, Any] = {"lower_emit_limit_ms": LOWER_EMIT_LIMIT_MS, "lower_emit": {}, "size_ratio": {}}
    for r in rows:
        ok = r["lower_emit_ms"] <= LOWER_EMIT_LIMIT_MS
        result["lower_emit"][r["case"]] = ok
        lines.append(f"  {'pass' if ok else 'FAIL'} {r['case']}: {r['lower_emit_ms']:.1f} ms")
    n_ok = sum(result["lower_emit"].values())
    lines.append(f"  {n_ok}/{len(rows)} pass")
    lines.append(f"size independence per example, target: every size within {SIZE_RATIO_LIMIT}x of every other "
                 "(largest / smallest size; max / min over all sizes; total, then lower + emit):")
    by_example: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_example.setdefault(r["example"], []).append(r)
    groups = {e: g for e, g in by_example.items() if len(g) > 1}
    if not groups:
        lines.append("  (no example with two sizes among the cases run)")
    for example, group in groups.items():
        small, large = group[0], group[-1]
        ratio = {k: large[k] / small[k] for k in ("total_ms", "lower_emit_ms")}
        spread = {k: max(r[k] for r in group) / min(r[k] for r in group) for k in ("total_ms", "lower_emit_ms")}
        ok = spread["total_ms"] <= SIZE_RATIO_LIMIT
        result["size_ratio"][example] = {
            "smallest": small["case"], "largest": large["case"], "total": ratio["total_ms"],
            "lower_emit": ratio["lower_emit_ms"], "spread_total": spread["total_ms"],
            "spread_lower_emit": spread["lower_emit_ms"], "pass": ok,
        }  # fmt: skip
        lines.append(f"  {'pass' if ok else 'FAIL'} {example}: largest/smallest {ratio['total_ms']:.2f}x, "
                     f"{ratio['lower_emit_ms']:.2f}x; max/min {spread['total_ms']:.2f}x, "
                     f"{spread['lower_emit_ms']:.2f}x ({large['case']} vs {small['case']})")  # fmt: skip
    dense = next((r for r in rows if r["case"] == DIETCODE), None)
    lines.append("DietCode dense total <= TVM's:")
    if tvm is None or dense is None:
        why = tvm_note if tvm is None else f"{DIETCODE} was not run"
        lines.append(f"  skipped: {why}")
        result["dietcode_vs_tvm"] = None
    else:
        ratio = dense["total_ms"] / tvm["total_ms"]
        ok = ratio <= 1.0
        lines.append(f"  {'pass' if ok else 'FAIL'} loopir {dense['total_ms']:.1f} ms vs TVM "
                     f"{tvm['total_ms']:.1f} ms ({ratio:.2f}x)")  # fmt: skip
        result["dietcode_vs_tvm"] = {"loopir_ms": dense["total_ms"], "tvm_ms": tvm["total_ms"],
                                     "ratio": ratio, "pass": ok}  # fmt: skip
    return lines, result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=None,
                   help="comma-separated globs or substrings of case names (default: every case)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per case (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per case first")
    p.add_argument("--json", default=None, help="also write the rows and checks here")
    p.add_argument("--tvm", default=None, metavar="PYTHON",
                   help="a TVM 0.27 venv's python: adds TVM's row for the DietCode dense schedule")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    args = p.parse_args(argv)
    all_cases = cases()
    if args.list:
        for c in all_cases:
            print(c.name + ("" if c.default else "  (only when named)"))
        return 0
    chosen = select(all_cases, args.cases)
    if not chosen:
        print(f"compile_time: no case matches {args.cases!r}; --list shows them", file=sys.stderr)
        return 2
    rows = []
    for case in chosen:
        row = measure(case, args.repeat, args.warmup)
        print(f"# {case.name}: {row['total_ms']:.1f} ms", file=sys.stderr, flush=True)
        rows.append(row)
    tvm, tvm_note = (None, "no --tvm PYTHON given")
    if args.tvm:
        tvm, tvm_note = run_tvm(args.tvm, args.repeat)
        print(f"# {tvm_note}" if tvm else f"# TVM comparison skipped: {tvm_note}", file=sys.stderr)
    shown = rows + ([tvm] if tvm else [])
    print(f"loopir compile time without nvcc, median of {args.repeat} after {args.warmup} warm-up "
          f"(Python {sys.version.split()[0]})\n")  # fmt: skip
    print(table(shown))
    check_lines, check_result = checks(rows, tvm, tvm_note)
    print()
    print("\n".join(check_lines))
    if args.json:
        out = {"repeat": args.repeat, "warmup": args.warmup, "rows": rows, "tvm": tvm,
               "tvm_note": tvm_note, "checks": check_result}  # fmt: skip
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
