"""Software pipelining with cp.async on the GPU (issue 15): DietCode + stages, the tuned GEMM.

One command on the GPU machine::

    python benchmarks/pipelined.py --trials 32 --json pipelined.json

- the DietCode sample schedule (``loopir.examples.dense``) with 1, 2 and 3 pipeline stages,
  local padding on, at M x K x N = 960x770x2304 and the tile-aligned 1024x772x2304;
- ``loopir.tune`` over ``gemm_space`` (tiles, threads, vector widths and the pipeline depth
  1-3 sampled) at 960x770x2304, local padding on; the best trace replayed on 1024^3 and
  4096^3 (a trace names blocks and loops, not sizes);
- with ``--space sgemm``: ``loopir.tune.spaces.sgemm_space`` (cuBLAS-class 8 x 8 register
  tiles, the K step unrolled, A padded) instead; with ``--tune-each``: a search at every shape
  instead of one trace replayed;
- cuBLAS (``torch.matmul``, fp32, TF32 off) at each shape, in the same run.

Every kernel is checked against float64 on random data first; times are CUDA events around
20 back-to-back ``mod(a, b, c)`` calls (median of 10).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from pathlib import Path
from typing import Any

import loopir
from loopir.examples.dense import dense, dense_func
from loopir.tune import tune
from loopir.tune.farm import local_farm
from loopir.tune.spaces import gemm_space, sgemm_space

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_gpu import _cublas, _time  # noqa: E402

PAD = {"tir.enable_local_pad": True}
SHAPES = [(960, 770, 2304), (1024, 772, 2304), (1024, 1024, 1024), (4096, 4096, 4096)]


def _build(func: Any) -> Any:
    with loopir.PassContext(config=PAD):
        return loopir.build(func, target="cuda")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--builders", type=int, default=None)
    ap.add_argument("--space", choices=["gemm", "sgemm"], default="gemm")
    ap.add_argument("--tune-each", action="store_true", help="search at every shape, not only the first")
    args = ap.parse_args()
    space = gemm_space if args.space == "gemm" else sgemm_space
    import torch

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "rows": [],
    }  # fmt: skip

    def row(label: str, shape: tuple[int, int, int], mod: Any, **extra: Any) -> None:
        m, k, n = shape
        r = {"case": label, "shape": list(shape), **_time(torch, args, mod, m, k, n), **extra}
        out["rows"].append(r)
        print(f"{label} {m}x{k}x{n}: {r['TFLOPs']:.2f} TFLOP/s ({r['ms']:.4f} ms)", flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))

    for shape in SHAPES[:2]:
        for stages in (1, 2, 3):
            row(f"dietcode stages={stages}", shape, _build(dense(*shape, stages=stages).func))
    with local_farm("cuda", builders=args.builders) as farm, loopir.PassContext(config=PAD):
        searched = SHAPES if args.tune_each else SHAPES[:1]
        results = {shape: tune(dense_func(*shape), space, target="cuda", trials=args.trials, seed=args.seed,
                               farm=farm, show_progress=False) for shape in searched}  # fmt: skip
    res = results[SHAPES[0]]
    out["tuned_trace"] = str(res.trace)
    for shape in SHAPES:
        own = results.get(shape)
        sch = loopir.Schedule(dense_func(*shape))
        (own or res).trace.apply_to(sch)
        label = f"tuned ({args.space}_space, " + ("at this shape)" if own else "960x770x2304 trace)")
        row(label, shape, _build(sch.func), decisions=(own or res).trace.decisions)
    for shape in SHAPES:
        m, k, n = shape
        r = {"case": "cublas", "shape": list(shape), **_cublas(torch, args, m, k, n)}
        out["rows"].append(r)
        print(f"cublas {m}x{k}x{n}: {r['TFLOPs']:.2f} TFLOP/s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
