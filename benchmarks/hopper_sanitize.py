"""Run ``examples.hopper_gemm`` once per shape on the GPU and check it: a driver for
``compute-sanitizer`` (racecheck, synccheck, memcheck), whose overhead makes the test suite slow.

One command per tool on the GPU machine (a hang shows as the ``timeout``)::

    timeout 600 compute-sanitizer --tool racecheck --error-exitcode 9 \\
        python benchmarks/hopper_sanitize.py --hopper '{"tma": true, "warp_specialized": true}'

Each shape's result is compared with float64 NumPy (fp32 output); the exit status is 1 on a
mismatch. ``--hopper`` takes ``hopper_gemm`` parameters as JSON (as ``benchmarks/tensor_core.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: small shapes (the sanitizers are slow): on the block tile, padded, one K step, many
SHAPES = ("256x512x256", "300x200x260", "128x64x256", "256x1024x256")


def main(argv: list[str] | None = None) -> int:
    import loopir
    from loopir.examples import hopper_gemm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated MxKxN")
    ap.add_argument("--hopper", type=json.loads, default={}, help="JSON of hopper_gemm parameters")
    args = ap.parse_args(argv)
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in args.hopper.items()}
    bad = 0
    for shape in args.shapes.split(","):
        M, K, N = (int(x) for x in shape.split("x"))
        rng = np.random.default_rng(M + K + N)
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((N, K)).astype(np.float16)
        c = np.full((M, N), np.nan, np.float32)
        loopir.build(hopper_gemm(M, K, N, "float16", **params).func, target="cuda")(a, b, c)
        want = a.astype(np.float64) @ b.astype(np.float64).T
        err = float(np.nanmax(np.abs(c - want))) if not np.isnan(c).any() else float("nan")
        ok = err <= 1e-5 * max(float(np.abs(want).max()), 1.0)
        bad += not ok
        print(f"hopper_gemm {shape} {json.dumps(args.hopper)}: max error {err:.3g} {'ok' if ok else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
