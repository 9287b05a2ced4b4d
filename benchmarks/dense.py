"""fp32 dense (GEMM) on the GPU: loopir's generated CUDA against cuBLAS.

One command runs every case, checks each result against a float64 reference on fresh random
inputs (poisoned outputs, relative Frobenius error) *before* timing it, prints a table and
writes JSON::

    python benchmarks/dense.py --json dense.json

Cases (issue 5):

(a) the DietCode dense schedule at 960x770x2304, local padding off;
(b) the same, local padding on (``tir.enable_local_pad``);
(c) the same schedule at 1024x772x2304 (tile-aligned: no guards);
(d) ``torch.matmul`` in fp32 with TF32 disabled (cuBLAS) on the same inputs as each shape;
(e) the best hand-written loopir schedule (``gemm_schedules.tiled_gemm``; a few tile
    configurations are tried and the fastest correct one is reported) at 960x770x2304 and
    4096^3.

Prefetch rows (register double buffering, ``InjectSharedPrefetch``, docs/prefetch.md):

(b+p) (b) with ``tir.prefetch_shared``: the next A/B tiles are loaded into registers while the
      current one is computed (default register budget, and capped at 128 registers);
(e+p) the best of ``E_PREFETCH_CONFIGS`` (``tiled_gemm(..., prefetch=True)``) per shape.

Timing: CUDA events around each run, median of ``--repeat`` runs after ``--warmup`` runs,
on device-resident torch tensors (no host copies in the timed region).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loopir  # noqa: E402
from loopir.codegen_cuda import build_cuda  # noqa: E402

log = logging.getLogger("benchmarks.dense")

# (e): configurations tried per shape: tiled_gemm keyword arguments, local padding, nvcc flags
E_CONFIGS: list[dict[str, Any]] = [
    {"tile": dict(bm=64, bn=128, bk=16, vm=2, vn=2, tm=8, tn=16), "min_blocks": 3},
    {"tile": dict(bm=64, bn=128, bk=16, vm=2, vn=2, tm=4, tn=32), "min_blocks": 3},
    {"tile": dict(bm=64, bn=128, bk=32, vm=2, vn=2, tm=4, tn=32), "min_blocks": 3},
    {"tile": dict(bm=128, bn=128, bk=16, vm=2, vn=2, tm=8, tn=32), "min_blocks": 2},
    {"tile": dict(bm=128, bn=128, bk=16, vm=2, vn=2, tm=16, tn=16), "min_blocks": 2},
    {"tile": dict(bm=128, bn=64, bk=16, vm=2, vn=2, tm=16, tn=8), "min_blocks": 3},
    {"tile": dict(bm=64, bn=64, bk=16, vm=2, vn=2, tm=8, tn=8), "min_blocks": 4},
    {"tile": dict(bm=64, bn=64, bk=32, vm=2, vn=2, tm=4, tn=16), "min_blocks": 4},
]


# (e+p): configurations tried with prefetch; the prefetch registers (bm*bk + bk*bn) / threads
# per thread come on top of the accumulators, so the 128x128 tiles run uncapped (min_blocks 1)
# and a bk=8 variant halves the prefetch registers (nvcc -Xptxas -v showed spills otherwise).
E_PREFETCH_CONFIGS: list[dict[str, Any]] = [
    {"tile": dict(bm=64, bn=128, bk=16, vm=2, vn=2, tm=8, tn=16), "min_blocks": 3},
    {"tile": dict(bm=64, bn=128, bk=16, vm=2, vn=2, tm=4, tn=32), "min_blocks": 3},
    {"tile": dict(bm=128, bn=64, bk=16, vm=2, vn=2, tm=16, tn=8), "min_blocks": 3},
    {"tile": dict(bm=64, bn=64, bk=16, vm=2, vn=2, tm=8, tn=8), "min_blocks": 4},
    {"tile": dict(bm=64, bn=64, bk=32, vm=2, vn=2, tm=4, tn=16), "min_blocks": 4},
    {"tile": dict(bm=128, bn=128, bk=16, vm=2, vn=2, tm=8, tn=32), "min_blocks": None},
    {"tile": dict(bm=128, bn=128, bk=16, vm=2, vn=2, tm=16, tn=16), "min_blocks": None},
    {"tile": dict(bm=128, bn=128, bk=8, vm=2, vn=2, tm=16, tn=16), "min_blocks": 2},
]


def tflops(m: int, k: int, n: int, ms: float) -> float:
    return 2.0 * m * k * n / (ms * 1e-3) / 1e12


class Bench:
    def __init__(self, warmup: int, repeat: int, cache_dir: str | None,
                 save_sources: Path | None = None) -> None:
        import torch

        self.torch = torch
        self.warmup = warmup
        self.repeat = repeat
        self.cache_dir = cache_dir
        self.save_sources = save_sources
        self.counter = 0
        self.rows: list[dict[str, Any]] = []
        self.inputs: dict[tuple[int, int, int], tuple[Any, Any, Any]] = {}

    # -- data ------------------------------------------------------------------------------
    def fresh(self, m: int, k: int, n: int) -> tuple[Any, Any, Any]:
        """New random inputs on the GPU and their float64 reference product."""
        torch = self.torch
        a = torch.randn(m, k, device="cuda", dtype=torch.float32)
        b = torch.randn(k, n, device="cuda", dtype=torch.float32)
        ref = a.double() @ b.double()
        return a, b, ref

    def check(self, run: Any, m: int, k: int, n: int) -> float:
        """Relative error of ``run(a, b, c)`` on fresh inputs, output poisoned with NaN."""
        torch = self.torch
        a, b, ref = self.fresh(m, k, n)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        run(a, b, c)
        torch.cuda.synchronize()
        if torch.isnan(c).any():
            return math.inf
        return float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))

    def time_fn(self, fn: Any) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.repeat):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return float(np.median(times))

    def spin_up(self, seconds: float = 2.0) -> None:
        """Keep the GPU busy for ``seconds`` so that clocks have ramped up before measuring.

        (In an earlier run the first cases, timed right after the GPU left idle, were 10-15 %
        slower than the same kernels timed again at the end.)
        """
        torch = self.torch
        a = torch.randn(4096, 4096, device="cuda")
        end = time.time() + seconds
        while time.time() < end:
            for _ in range(10):
                torch.matmul(a, a)
            torch.cuda.synchronize()

    # -- cases -----------------------------------------------------------------------------
    def loopir_case(self, case: str, func: Any, shape: tuple[int, int, int], local_pad: bool,
                    min_blocks: int | None = None, note: str = "", prefetch: bool = False,
                    nvcc_flags: tuple[str, ...] = ()) -> dict[str, Any]:
        m, k, n = shape
        t0 = time.time()
        mod = build(func, local_pad, prefetch, min_blocks, nvcc_flags, self.cache_dir)
        build_s = time.time() - t0
        err = self.check(mod, m, k, n)
        row: dict[str, Any] = {
            "case": case, "shape": f"{m}x{k}x{n}", "m": m, "k": k, "n": n,
            "local_pad": local_pad, "min_blocks_per_sm": min_blocks, "note": note,
            "prefetch": prefetch, "nvcc_flags": list(nvcc_flags),
            "rel_err": err, "build_s": round(build_s, 2),
            "resources": {name: attrs.asdict(r) for name, r in mod.resource_usage.items()},
        }
        if self.save_sources is not None:
            self.counter += 1
            tag = case.replace("?", "")
            fname = f"{self.counter:02d}_{tag}_{m}x{k}x{n}_{'pad' if local_pad else 'nopad'}.cu"
            fname = fname.replace("+", "_")
            (self.save_sources / fname).write_text(mod.source)
            lib = self.save_sources / fname.replace(".cu", ".so")
            lib.write_bytes(Path(mod.library_path).read_bytes())  # cuobjdump -sass reads it
            row["source_file"] = fname
        if not err < 1e-4:
            row.update(ok=False, ms=None, tflops=None)
            log.error("%s %s: wrong result (rel err %s); not timed", case, shape, err)
            return row
        a, b, _ = self.fresh(m, k, n)
        c = self.torch.empty((m, n), device="cuda", dtype=self.torch.float32)
        ms = mod.benchmark(a, b, c, warmup=self.warmup, repeat=self.repeat)
        row.update(ok=True, ms=ms, tflops=tflops(m, k, n, ms), source_kernel=mod.source)
        return row

    def cublas_case(self, shape: tuple[int, int, int]) -> dict[str, Any]:
        torch = self.torch
        m, k, n = shape
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        try:
            torch.set_float32_matmul_precision("highest")
        except AttributeError:  # older torch
            pass

        def run(a: Any, b: Any, c: Any) -> None:
            torch.matmul(a, b, out=c)

        err = self.check(run, m, k, n)
        a, b, _ = self.fresh(m, k, n)
        c = torch.empty((m, n), device="cuda", dtype=torch.float32)
        ms = self.time_fn(lambda: torch.matmul(a, b, out=c))
        return {"case": "d", "shape": f"{m}x{k}x{n}", "m": m, "k": k, "n": n,
                "note": "torch.matmul fp32, TF32 off (cuBLAS)", "rel_err": err,
                "ok": err < 1e-4, "ms": ms, "tflops": tflops(m, k, n, ms)}


def build(func: Any, local_pad: bool, prefetch: bool, min_blocks: int | None,
          nvcc_flags: tuple[str, ...], cache_dir: str | None) -> Any:
    """build_cuda under the benchmark's PassContext (local padding, prefetch)."""
    config = {"tir.enable_local_pad": local_pad, "tir.prefetch_shared": prefetch}
    with loopir.PassContext(config=config):
        return build_cuda(func, cache_dir=cache_dir, min_blocks_per_sm=min_blocks,
                          nvcc_flags=nvcc_flags)


# (b+p) variants: (nvcc flags, note)
BP_VARIANTS: list[tuple[tuple[str, ...], str]] = [
    ((), "DietCode, pad on, prefetch"),
    (("-maxrregcount=128",), "DietCode, pad on, prefetch, <=128 regs (2 blocks/SM)"),
]


def compile_all(cache_dir: str | None, e_configs: int) -> int:
    """Build every module of the benchmark (no GPU needed): fills the nvcc cache."""
    from gemm_schedules import tiled_gemm

    dense = loopir.examples.dense
    s960 = (960, 770, 2304)
    jobs: list[tuple[str, Any, bool, bool, int | None, tuple[str, ...]]] = [
        ("a", dense(*s960).func, False, False, None, ()),
        ("b", dense(*s960).func, True, False, None, ()),
        ("c", dense(1024, 772, 2304).func, False, False, None, ()),
    ]
    for flags, _ in BP_VARIANTS:
        jobs.append(("b+p", dense(*s960).func, True, True, None, flags))
    for shape, pad in ((s960, True), ((4096, 4096, 4096), False)):
        for cfg in E_CONFIGS[:e_configs]:
            jobs.append(("e", tiled_gemm(*shape, **cfg["tile"]).func, pad, False, cfg["min_blocks"], ()))
        for cfg in E_PREFETCH_CONFIGS[:e_configs]:
            func = tiled_gemm(*shape, **cfg["tile"], prefetch=True).func
            jobs.append(("e+p", func, pad, True, cfg["min_blocks"], ()))
    for case, func, pad, prefetch, min_blocks, flags in jobs:
        mod = build(func, pad, prefetch, min_blocks, flags, cache_dir)
        for name, r in mod.resource_usage.items():
            print(f"{case:4} {name} pad={pad} prefetch={prefetch} min_blocks={min_blocks} "
                  f"flags={' '.join(flags) or '-'}: {r.registers} regs, "
                  f"{r.spill_store_bytes}/{r.spill_load_bytes} B spills, {r.shared_bytes} B smem")
    return 0


def cpu_check(e_configs: int) -> int:
    """Dry run without a GPU: every schedule family of the table, prefetch on and off, lowered
    exactly as for CUDA and run by the CPU executor at small imperfect shapes, against float64."""
    from gemm_schedules import tiled_gemm

    rng = np.random.default_rng(0)
    dense = loopir.examples.dense
    jobs: list[tuple[str, Any, tuple[int, int, int], bool, bool]] = []
    for pad in (False, True):
        for prefetch in (False, True):
            jobs.append(("dense", dense(130, 35, 260).func, (130, 35, 260), pad, prefetch))
    for configs, prefetch in ((E_CONFIGS, False), (E_PREFETCH_CONFIGS, True)):
        for cfg in configs[:e_configs]:
            t = cfg["tile"]
            shape = (t["bm"] + 3, 2 * t["bk"] + 5, t["bn"] - 7)
            for pad in (False, True):
                jobs.append((f"tiled_gemm{t}", tiled_gemm(*shape, **t, prefetch=prefetch).func,
                             shape, pad, prefetch))
    bad = 0
    for name, func, (m, k, n), pad, prefetch in jobs:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.full((m, n), np.nan, np.float32)
        with loopir.PassContext(config={"tir.enable_local_pad": pad, "tir.prefetch_shared": prefetch}):
            lowered = loopir.lower(func)
        loopir.build(lowered, target="cpu")(a, b, c)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.linalg.norm(c - ref) / np.linalg.norm(ref)) if not np.isnan(c).any() else math.inf
        ok = err < 1e-5 and (not prefetch or "_prefetch" in lowered.script())
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {name} {m}x{k}x{n} pad={pad} prefetch={prefetch}: rel err {err:.2e}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default="dense_benchmark.json", help="where to write the results")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--cache-dir", default=None, help="nvcc cache (default: loopir's)")
    p.add_argument("--e-configs", type=int, default=len(E_CONFIGS),
                   help="how many (e) configurations to try per shape")
    p.add_argument("--save-sources", default=None, help="folder for the generated .cu files")
    p.add_argument("--compile-only", action="store_true",
                   help="only build every module (fills the nvcc cache; needs no GPU)")
    p.add_argument("--cpu-check", action="store_true",
                   help="dry run without a GPU: every schedule, prefetch on/off, on the CPU "
                        "executor at small shapes against float64")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from gemm_schedules import tiled_gemm

    if args.compile_only:
        return compile_all(args.cache_dir, args.e_configs)
    if args.cpu_check:
        return cpu_check(args.e_configs)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible: nothing to benchmark", file=sys.stderr)
        return 2
    save = None
    if args.save_sources:
        save = Path(args.save_sources)
        save.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.warmup, args.repeat, args.cache_dir, save)
    dense = loopir.examples.dense
    rows = bench.rows
    bench.spin_up()
    s960, s1024, s4096 = (960, 770, 2304), (1024, 772, 2304), (4096, 4096, 4096)
    rows.append(bench.loopir_case("a", dense(*s960).func, s960, False, note="DietCode, pad off"))
    rows.append(bench.loopir_case("b", dense(*s960).func, s960, True, note="DietCode, pad on"))
    rows.append(bench.loopir_case("c", dense(*s1024).func, s1024, False, note="DietCode, aligned"))
    for flags, note in BP_VARIANTS:
        rows.append(bench.loopir_case("b+p", dense(*s960).func, s960, True, note=note,
                                      prefetch=True, nvcc_flags=flags))
    for shape in (s960, s1024, s4096):
        rows.append(bench.cublas_case(shape))
    for shape in (s960, s4096):
        for case, configs, prefetch in (("e", E_CONFIGS, False), ("e+p", E_PREFETCH_CONFIGS, True)):
            tried = []
            for cfg in configs[: args.e_configs]:
                t = cfg["tile"]
                name = "tiled_gemm({}{})".format(", ".join(f"{k}={v}" for k, v in t.items()),
                                                 ", prefetch=True" if prefetch else "")
                for pad in ((True,) if shape == s960 else (False,)):
                    try:
                        func = tiled_gemm(*shape, **t, prefetch=prefetch).func
                        row = bench.loopir_case(f"{case}?", func, shape, pad, cfg["min_blocks"],
                                                note=name, prefetch=prefetch)
                    except Exception as exc:  # a configuration the schedule cannot express
                        log.warning("(%s) %s %s failed: %s", case, shape, name, exc)
                        continue
                    tried.append(row)
            ok = [r for r in tried if r["ok"]]
            for r in tried:
                r["case"] = f"{case}-tried"
            if ok:
                best = dict(min(ok, key=lambda r: r["ms"]))
                best["case"] = case
                rows.append(best)
            rows.extend(tried)

    # the same versions timed a second time, last: their spread is the noise of this table
    rows.append(bench.loopir_case("b-again", dense(*s960).func, s960, True, note="DietCode, pad on"))
    rows.append(bench.loopir_case("c-again", dense(*s1024).func, s1024, False, note="DietCode, aligned"))
    for flags, note in BP_VARIANTS:
        rows.append(bench.loopir_case("b+p-again", dense(*s960).func, s960, True, note=note,
                                      prefetch=True, nvcc_flags=flags))
    for shape in (s960, s4096):
        again = bench.cublas_case(shape)
        again["case"] = "d-again"
        rows.append(again)

    cublas = {r["shape"]: r["ms"] for r in rows if r["case"] == "d"}
    for r in rows:
        if r.get("ms") and r["case"] != "d" and r["shape"] in cublas:
            r["vs_cublas"] = cublas[r["shape"]] / r["ms"]

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    lines = [
        f"{'case':8} {'shape':16} {'pad':4} {'ms':>9} {'TFLOP/s':>8} {'x cuBLAS':>8} "
        f"{'rel err':>9} {'regs':>5} {'spill':>6}  note"
    ]
    for r in rows:
        res = next(iter(r.get("resources", {}).values()), None)
        regs = "-" if res is None else str(res["registers"])
        spill = "-" if res is None else str(res["spill_store_bytes"] + res["spill_load_bytes"])
        mb = r.get("min_blocks_per_sm")
        flags = f"min_blocks_per_sm={mb}" if mb else ""
        lines.append(
            f"{r['case']:8} {r['shape']:16} {('on' if r.get('local_pad') else 'off') if 'local_pad' in r else '-':4} "
            f"{fmt(r.get('ms'), '9.4f')} {fmt(r.get('tflops'), '8.2f')} "
            f"{fmt(r.get('vs_cublas'), '8.2f')} {fmt(r['rel_err'], '9.2e')} {regs:>5} {spill:>6}  "
            f"{r['note']} {flags}".rstrip()
        )
    by = {(r["case"], r["shape"]): r for r in rows}
    a, b, c = by.get(("a", "960x770x2304")), by.get(("b", "960x770x2304")), by.get(("c", "1024x772x2304"))
    summary = {}
    if b and c and b.get("ms") and c.get("ms"):
        summary["b_over_c_time"] = b["ms"] / c["ms"]
        summary["b_tflops"] = b["tflops"]
    if a and b and a.get("ms") and b.get("ms"):
        summary["a_over_b_time"] = a["ms"] / b["ms"]
    bp = [r for r in rows if r["case"] == "b+p" and r.get("ms")]
    if bp and b and b.get("ms"):
        best_bp = min(bp, key=lambda r: r["ms"])
        summary["bp_tflops"] = best_bp["tflops"]
        summary["b_over_bp_time"] = b["ms"] / best_bp["ms"]
    for shape in ("960x770x2304", "4096x4096x4096"):
        for case in ("e", "e+p"):
            e = by.get((case, shape))
            if e and e.get("vs_cublas") is not None:
                summary[f"{case.replace('+', 'p')}_vs_cublas_{shape}"] = e["vs_cublas"]
    lines.append("summary: " + ", ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    table = "\n".join(lines)

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "warmup": args.warmup,
        "repeat": args.repeat,
    }
    for r in rows:
        r.pop("source_kernel", None)
    out = {"meta": meta, "summary": summary, "rows": rows, "table": table}
    Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    print(f"# {meta['gpu']}, {meta['date']}, torch {meta['torch']}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
