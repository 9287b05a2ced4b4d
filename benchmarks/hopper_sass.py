"""The SASS of ``examples.hopper_gemm``: how its tiles are fetched and its steps synchronized.

One command on the GPU machine (cuobjdump on PATH, no GPU needed)::

    python benchmarks/hopper_sass.py --shape 4096x4096x4096 --hopper '{"tma": true}'
    python benchmarks/hopper_sass.py --hopper '{"tma": true, "warp_specialized": [40, 232]}'

compiles the kernel for sm_90a (cubin) and counts, in ``cuobjdump -sass``: UTMALDG (TMA copies),
LDGSTS (``cp.async``), BAR.SYNC (``__syncthreads``), SYNCS (mbarrier operations), HGMMA
(``wgmma``), USETMAXREG (``setmaxnreg``: a warp-specialized kernel's register reallocation), with
ptxas' registers and spills, and whether ptxas ignored ``setmaxnreg`` (its warning C7508). ``--hopper`` takes ``hopper_gemm`` parameters as
JSON (as ``benchmarks/tensor_core.py``).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OPS = ("UTMALDG", "LDGSTS", "BAR", "SYNCS", "HGMMA", "USETMAXREG")


def counts(sass: str) -> dict[str, int]:
    """Instructions of ``OPS`` in ``cuobjdump -sass`` text (the opcode's first part)."""
    ops: collections.Counter[str] = collections.Counter()
    for line in sass.splitlines():
        parts = line.split()
        if len(parts) > 1 and line.strip().startswith("/*") and parts[1][:1].isupper():
            ops[parts[1].split(".")[0].rstrip(";")] += 1
    return {k: ops.get(k, 0) for k in OPS}


def main(argv: list[str] | None = None) -> int:
    from loopir.codegen_cuda import compile_cuda, prepare_function
    from loopir.examples import hopper_gemm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x4096x4096", help="MxKxN")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--hopper", type=json.loads, default={}, help="JSON of hopper_gemm parameters")
    args = ap.parse_args(argv)
    M, K, N = (int(x) for x in args.shape.split("x"))
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in args.hopper.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        code = prepare_function(hopper_gemm(M, K, N, args.dtype, out_dtype=args.dtype, **params).func)
    src = "\n".join(code.emitted.preamble) + "\n" + "\n".join(code.emitted.kernel_texts)
    cub = compile_cuda(src, arch="sm_90a", cache_dir=tempfile.mkdtemp(), output="cubin")
    res = next(iter(cub.resources.values()))
    line = f"hopper_gemm {args.shape} {args.dtype} {json.dumps(args.hopper)}: {res.registers} registers, " \
           f"spills {res.spill_store_bytes}/{res.spill_load_bytes}" \
           + ("; setmaxnreg IGNORED (C7508)" if "C7508" in cub.log else "")  # fmt: skip
    try:
        sass = subprocess.run(["cuobjdump", "-sass", str(cub.path)], capture_output=True, text=True, check=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError) as e:
        print(f"{line}; no SASS ({e})")
        return 1
    print(f"{line}; SASS: " + ", ".join(f"{k} {v}" for k, v in counts(sass).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
