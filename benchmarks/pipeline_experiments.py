"""Software pipelining, tile by tile (issue 15): GEMM configurations x pipeline stages, with SASS.

One command on the GPU machine (cuobjdump on PATH)::

    OUT=. python benchmarks/pipeline_experiments.py

fp32 dense M x K x N = 960x770x2304, local padding on, ``tile_gemm`` configurations (the best
tuned one of the session, with 1- and 4-wide fetches and a K step of 16, and DietCode's sample
tiles with a K step of 16) at 1, 2 and 3 stages. Each kernel is compiled in parallel (a process
pool), checked against float64 and timed through ``mod()`` (CUDA events, 20 calls, median of
10); the SASS of each is counted for the instructions that show the pipeline: LDGSTS
(``cp.async``), LDGDEPBAR (commit), DEPBAR (wait), BAR, LDS/LDG/STS and FFMA. Results go to
``$OUT/pipeline-experiments-s5.json``.
"""

import collections
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loopir  # noqa: E402
from loopir.examples.dense import dense_func  # noqa: E402
from loopir.schedule.default_gpu import tile_gemm  # noqa: E402

SHAPE = (960, 770, 2304)
BEST = dict(ti=4, tj=32, vi=2, ri=4, vj=2, rj=2, ki=32, vec=1)
DIET = dict(ti=8, tj=32, vi=1, ri=16, vj=2, rj=2, ki=4, vec=4)
CONFIGS = []
for st in (1, 2):
    CONFIGS.append(("best", {**BEST, "stages": st}))
    CONFIGS.append(("best vec4", {**BEST, "vec": 4, "stages": st}))
    CONFIGS.append(("dietcode ki16", {**DIET, "ki": 16, "stages": st}))
for st in (1, 2, 3):
    CONFIGS.append(("best ki16", {**BEST, "ki": 16, "stages": st}))

def sched(params: dict) -> loopir.PrimFunc:
    sch = loopir.Schedule(dense_func(*SHAPE))
    tile_gemm(sch, "C", **params)
    return sch.func

def build(i: int) -> tuple:
    from loopir.codegen_cuda import compile_cuda, prepare_function
    from loopir.tune.farm import build_artifact
    name, params = CONFIGS[i]
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        art = build_artifact(sched(params), "cuda")
        code = prepare_function(sched(params))
    src = "\n".join(code.emitted.preamble) + "\n" + "\n".join(code.emitted.kernel_texts)
    cub = compile_cuda(src, arch="sm_90a", cache_dir=tempfile.mkdtemp(), output="cubin")
    try:
        sass = subprocess.run(["cuobjdump", "-sass", str(cub.path)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        sass = ""
    ops = collections.Counter()
    for l in sass.splitlines():
        parts = l.split()
        if len(parts) > 1 and l.strip().startswith("/*") and parts[1][:1].isupper():
            ops[parts[1].split(".")[0].rstrip(";")] += 1
    keep = {k: ops.get(k, 0) for k in ("LDGSTS", "LDGDEPBAR", "DEPBAR", "BAR", "LDS", "LDG", "STS", "FFMA")}
    return art, keep, cub.resources

if __name__ == "__main__":
    import torch
    from tune_gpu import _time

    from loopir.tune.farm import load_artifact

    class A:
        calls, repeat = 20, 10

    with ProcessPoolExecutor(len(CONFIGS), mp_context=mp.get_context("spawn")) as pool:
        results = list(pool.map(build, range(len(CONFIGS))))
    rows = []
    for (name, params), (art, ops, res) in zip(CONFIGS, results):
        r = _time(torch, A, load_artifact(art), *SHAPE)
        regs = next(iter(res.values())).registers if res else None
        rows.append({"case": name, "params": params, **r, "sass": ops, "registers": regs})
        print(f"{name} stages={params['stages']}: {r['TFLOPs']:.2f} TFLOP/s  regs {regs}  sass {ops}", flush=True)
    out = os.environ.get("OUT", "/tmp")
    json.dump(rows, open(f"{out}/pipeline-experiments-s5.json", "w"), indent=1, default=str)
