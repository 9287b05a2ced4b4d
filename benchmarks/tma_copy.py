"""TMA copies through ``mod()``: ``loopir.examples.tma_copy`` against the device-to-device copy
(issue 32, the first TMA + mbarrier kernel).

One command on the GPU machine::

    python benchmarks/tma_copy.py --json tma_copy.json

Each configuration (tile, swizzle, tiles per block) copies an fp16 matrix ``B = A`` through
one ``tma_load`` per tile, checked bit-exact first, then timed with CUDA events around
``--calls`` back-to-back calls (median of ``--repeat`` samples); bandwidth counts the matrix
read once and written once, next to ``torch``'s ``B.copy_(A)`` in the same run. ``--smoke``
(no GPU needed) builds every configuration: race checked, emitted, compiled where nvcc is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import loopir
from loopir.examples import tma_copy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call  # noqa: E402

SHAPES = [(8192, 8192), (16384, 4096)]
#: (tile, swizzle, tiles per block): 64-element rows are the 128-byte swizzle's.
CONFIGS = [((64, 64), 128, 1), ((128, 64), 128, 1), ((64, 64), 128, 4), ((32, 64), 0, 1)]


def build(shape: tuple[int, int], config: tuple[tuple[int, int], int, int], target: str) -> Any:
    tile, swizzle, tiles = config
    return loopir.build(tma_copy(*shape, tile, "float16", swizzle, tiles=tiles), target=target)


def smoke() -> int:
    """Every configuration lowered (race checked), emitted, and compiled for sm_90a in one
    library where nvcc is on PATH."""
    import attrs

    from loopir.codegen_cuda import prepare_function
    from loopir.codegen_cuda.units import build_library

    codes = []
    for n, (tile, swizzle, tiles) in enumerate(CONFIGS):
        func = attrs.evolve(tma_copy(*SHAPES[0], tile, "float16", swizzle, tiles=tiles), name=f"tma_copy_{n}")
        code = prepare_function(func)
        print(f"{tile} swizzle {swizzle}, {tiles} per block: {code.emitted.source.count('loopir_tma_load_2d(&')} copy")
        codes.append(code)
    if shutil.which("nvcc") is not None:
        built = build_library(codes, arch="sm_90a")
        print(f"compiled: {len(built.binary.resources)} kernels")
    return 0


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    rows = []
    for shape in SHAPES:
        a = torch.randn(shape, device="cuda", dtype=torch.float16)
        b = torch.empty_like(a)
        nbytes = 2 * a.numel() * a.element_size()
        copy_ms = events_per_call(torch, lambda a=a, b=b: b.copy_(a), args.calls, args.repeat, warmup=3)
        for config in CONFIGS:
            mod = build(shape, config, "cuda")
            b.zero_()
            mod(a, b)
            torch.cuda.synchronize()
            assert torch.equal(a, b), (shape, config)
            ms = events_per_call(torch, lambda m=mod, a=a, b=b: m(a, b), args.calls, args.repeat, warmup=3)
            row = {"shape": shape, "tile": config[0], "swizzle": config[1], "tiles": config[2], "ms": ms,
                   "gbps": nbytes / ms / 1e6, "of_copy": copy_ms / ms, "copy_ms": copy_ms}  # fmt: skip
            print(f"{shape} {config}: {ms:.4f} ms, {row['gbps']:.0f} GB/s, {row['of_copy']:.2f} of copy")
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--json", type=Path)
    p.add_argument("--smoke", action="store_true", help="build every configuration, no timing")
    args = p.parse_args(argv)
    if args.smoke:
        return smoke()
    rows = run(args)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
