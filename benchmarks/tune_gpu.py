"""Tuning on the GPU (issue 16): the GEMM design space searched, and shape buckets vs per-shape.

One command on the GPU machine::

    python benchmarks/tune_gpu.py --trials 16 --json tune.json

- ``search``: fp32 dense M=960, K=770, N=2304 with local padding on. ``loopir.tune`` over
  ``loopir.tune.spaces.gemm_space`` (evolutionary: 8 random candidates, then mutations of the
  best 4) against random search with the same number of trials (every candidate sampled),
  next to the DietCode sample schedule (``loopir.examples.dense``), the default GPU schedule
  (the unscheduled function, ``DefaultGPUSchedule``) and cuBLAS (``torch.matmul``, fp32, TF32
  off). Candidates are compiled by a local process pool and measured by one GPU worker
  (``loopir.tune.farm.local_farm``); candidates per minute are reported.
- ``buckets``: ``C[n, 2304] = A[n, 770] @ B`` with a symbolic ``n``, tuned once per bucket
  (``n`` in 1..256 and 257..1024, measured at the bucket's top) with ``tune_buckets``, built
  with ``database=`` (one kernel per bucket, dispatched per call), against tuning each of the
  shapes 200 and 960 separately.

Every kernel is checked against float64 (relative Frobenius error) on fresh random inputs
before it is timed; times are CUDA events around ``--calls`` back-to-back ``mod(...)`` calls
on device tensors (median of ``--repeat``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import loopir
from loopir.examples.dense import dense, dense_func
from loopir.ir.expr import Var
from loopir.schedule.database import Database
from loopir.tune import tune, tune_buckets
from loopir.tune.farm import local_farm
from loopir.tune.spaces import gemm_space

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call, rel_err  # noqa: E402

PAD = {"tir.enable_local_pad": True}


def _time(torch: Any, args: argparse.Namespace, mod: Any, m: int, k: int, n: int) -> dict[str, Any]:
    a = torch.rand(m, k, device="cuda") - 0.5
    b = torch.rand(k, n, device="cuda") - 0.5
    c = torch.full((m, n), float("nan"), device="cuda")
    mod(a, b, c)
    torch.cuda.synchronize()
    err = rel_err(c, a.double() @ b.double())
    if not err < 1e-5:
        raise AssertionError(f"{m}x{k}x{n}: relative error {err}")
    ms = events_per_call(torch, lambda: mod(a, b, c), args.calls, args.repeat, warmup=3)
    return {"ms": ms, "TFLOPs": 2 * m * n * k / ms / 1e9, "rel_err": err}


def _cublas(torch: Any, args: argparse.Namespace, m: int, k: int, n: int) -> dict[str, Any]:
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.rand(m, k, device="cuda") - 0.5
    b = torch.rand(k, n, device="cuda") - 0.5
    c = torch.empty(m, n, device="cuda")
    ms = events_per_call(torch, lambda: torch.matmul(a, b, out=c), args.calls, args.repeat, warmup=3)
    return {"ms": ms, "TFLOPs": 2 * m * n * k / ms / 1e9, "rel_err": rel_err(c, a.double() @ b.double())}


def _tune(func: Any, args: argparse.Namespace, farm: Any, population: int, db: Any = None) -> tuple[Any, float]:
    t0 = time.perf_counter()
    with loopir.PassContext(config=PAD):
        res = tune(func, gemm_space, target="cuda", trials=args.trials, population=population, seed=args.seed,
                   farm=farm, database=db, show_progress=True)  # fmt: skip
    return res, time.perf_counter() - t0


def search(torch: Any, args: argparse.Namespace, farm: Any) -> dict[str, Any]:
    m, k, n = 960, 770, 2304  # M x K x N, as docs/benchmarks.md's "960x770x2304"
    func = dense_func(m, k, n)
    out: dict[str, Any] = {"shape": [m, k, n], "trials": args.trials}
    for label, population in (("evolutionary", 8), ("random", args.trials)):
        res, secs = _tune(func, args, farm, population)
        with loopir.PassContext(config=PAD):
            mod = loopir.build(res.func, target="cuda")
        out[label] = {**_time(torch, args, mod, m, k, n), "search_s": secs, "dropped": res.dropped,
                      "candidates_per_min": len(res.measured) / secs * 60, "decisions": res.trace.decisions}  # fmt: skip
        print(f"search {label}: {out[label]['TFLOPs']:.2f} TFLOP/s, {secs:.0f} s, "
              f"{out[label]['candidates_per_min']:.1f} candidates/min", flush=True)  # fmt: skip
    with loopir.PassContext(config=PAD):
        out["dietcode_sample"] = _time(torch, args, loopir.build(dense(m, k, n).func, target="cuda"), m, k, n)
    with loopir.PassContext(config={"cuda.gemm_backend": "generated"}):
        out["default_schedule"] = _time(torch, args, loopir.build(func, target="cuda"), m, k, n)
    out["cublas"] = _cublas(torch, args, m, k, n)
    for key in ("dietcode_sample", "default_schedule", "cublas"):
        print(f"search {key}: {out[key]['TFLOPs']:.2f} TFLOP/s", flush=True)
    return out


def buckets(torch: Any, args: argparse.Namespace, farm: Any) -> dict[str, Any]:
    k, n = 770, 2304
    nv = Var("n")
    func = dense_func(nv, k, n)
    db = Database(Path(tempfile.mkdtemp()) / "tuned.jsonl")
    t0 = time.perf_counter()
    with loopir.PassContext(config=PAD):
        tune_buckets(func, gemm_space, [{"n": (1, 256)}, {"n": (257, 1024)}], target="cuda", database=db,
                     trials=args.trials, seed=args.seed, farm=farm, show_progress=True)  # fmt: skip
        dispatch = loopir.build(func, target="cuda", database=db)
    out: dict[str, Any] = {"bucket_tuning_s": time.perf_counter() - t0, "shapes": {}}
    for m in (200, 960):
        res, secs = _tune(dense_func(m, k, n), args, farm, 8)
        with loopir.PassContext(config=PAD):
            own = loopir.build(res.func, target="cuda")
        row = {"bucketed": _time(torch, args, dispatch, m, k, n), "tuned_for_shape": _time(torch, args, own, m, k, n),
               "shape_tuning_s": secs}  # fmt: skip
        row["bucketed_over_own"] = row["bucketed"]["ms"] / row["tuned_for_shape"]["ms"]
        out["shapes"][m] = row
        print(f"buckets n={m}: bucketed {row['bucketed']['TFLOPs']:.2f} vs tuned for the shape "
              f"{row['tuned_for_shape']['TFLOPs']:.2f} TFLOP/s", flush=True)  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--builders", type=int, default=None)
    ap.add_argument("--only", choices=["search", "buckets"], default=None)
    args = ap.parse_args()
    import torch

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("loopir._progress").setLevel(logging.INFO)  # one line per measured candidate
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
    }  # fmt: skip
    with local_farm("cuda", builders=args.builders) as farm:
        for part, fn in (("search", search), ("buckets", buckets)):
            if args.only in (None, part):
                out[part] = fn(torch, args, farm)
                if args.json:  # after each part: a later one running out of time loses only itself
                    args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
