"""One launch of a memory-bound kernel through ``mod()``, to run under Nsight Compute::

    ncu --section SpeedOfLight -k regex:main_kernel python benchmarks/profile_row.py softmax float16 32768 1024

Ops: softmax, layernorm, rmsnorm (default GPU schedule, ``cuda.fast_math`` on unless
``--accurate``), gemv (``M K N``: rows, columns read, outputs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import loopir
from loopir.examples.reductions import layernorm_func, rmsnorm_func, softmax_func

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("op", choices=["softmax", "layernorm", "rmsnorm", "gemv"])
    ap.add_argument("dtype")
    ap.add_argument("sizes", type=int, nargs="+")
    ap.add_argument("--accurate", action="store_true")
    args = ap.parse_args()
    import torch

    tdt = getattr(torch, args.dtype)
    if args.op == "gemv":
        from memory_bound import gemv_func

        m, k, n = args.sizes
        func = gemv_func(m, n, k, args.dtype)
        tensors = [torch.rand(m, k, device="cuda").to(tdt), torch.rand(n, k, device="cuda").to(tdt),
                   torch.empty(m, n, device="cuda")]  # fmt: skip
    else:
        r, c = args.sizes
        func = {"softmax": softmax_func, "layernorm": layernorm_func, "rmsnorm": rmsnorm_func}[args.op](r, c, args.dtype)
        x = torch.rand(r, c, device="cuda").to(tdt)
        w = torch.rand(c, device="cuda").to(tdt)
        extra = {"softmax": [], "layernorm": [w, w], "rmsnorm": [w]}[args.op]
        tensors = [x, *extra, torch.empty_like(x)]
    with loopir.PassContext(config={"cuda.fast_math": not args.accurate}):
        mod = loopir.build(func, target="cuda")
    mod(*tensors)
    torch.cuda.synchronize()
    print(getattr(mod, "library_calls", None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
