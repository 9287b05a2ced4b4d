"""One launch of a memory-bound kernel through ``mod()``, to run under Nsight Compute::

    ncu --section SpeedOfLight -k regex:main_kernel python benchmarks/profile_row.py softmax float16 32768 1024

Ops: softmax, layernorm, rmsnorm (default GPU schedule, or ``--variant`` the examples' schedule,
``cuda.fast_math`` on unless ``--accurate``), gemv (``M K N``: rows, columns read, outputs), xent
(``ROWS VOCAB``: ``examples.reductions.cross_entropy_func``, its chunk kernel ``main_kernel0``),
copy (``ROWS COLS``: torch's ``x * 1`` of that size, a copy kernel, the ceiling the others are
read against; ``ncu --kernel-name-base demangled -k regex:MulFunctor``); and the tensor-core examples,
``attention B H S D [1 (causal)]`` (``examples.attention`` with its defaults, fp16 or bf16; kernel
``attention_kernel0``; then torch SDPA's default backend on the same tensors), ``decode B H S D``
(``examples.decode_attention``'s default split-KV kernel and its combine, one build for every KV
length; then torch SDPA on the same tensors: one profile holds both sides) and ``hopper M K N``
(``examples.hopper_gemm``; kernel ``main_kernel0``)::

    ncu --section WarpStateStats -k regex:attention python benchmarks/profile_row.py attention float16 4 32 1024 64
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
    ap.add_argument("op", choices=["softmax", "layernorm", "rmsnorm", "gemv", "xent", "copy", "attention", "decode",
                                       "hopper"])  # fmt: skip
    ap.add_argument("dtype")
    ap.add_argument("sizes", type=int, nargs="+")
    ap.add_argument("--accurate", action="store_true")
    ap.add_argument("--variant", default=None, help="rows: the examples' schedule 'THREADS,ROWS_PER_BLOCK,REGS' "
                    "(e.g. 32,4,1: a warp per row, 4 rows a block, the row in registers) instead of the default")  # fmt: skip
    args = ap.parse_args()
    import torch

    tdt = getattr(torch, args.dtype)
    if args.op in ("attention", "decode", "hopper"):
        return _tensor_core(torch, args.op, args.dtype, args.sizes)
    if args.op == "copy":  # a kernel (copy_ is a cudaMemcpy, which ncu does not profile): x * 1
        src = torch.rand(*args.sizes, device="cuda").to(tdt)
        torch.mul(src, 1, out=torch.empty_like(src))
        torch.cuda.synchronize()
        return 0
    if args.op == "xent":
        from memory_bound import xent_partials

        from loopir.examples.reductions import cross_entropy_func

        rows, vocab = args.sizes
        func = cross_entropy_func(rows, vocab, args.dtype)
        tensors = [torch.randn(rows, vocab, device="cuda").to(tdt),
                   torch.randint(0, vocab, (rows,), device="cuda", dtype=torch.int32),
                   torch.empty(rows, device="cuda"), xent_partials(torch, rows, vocab)]  # fmt: skip
    elif args.op == "gemv":
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
        if args.variant:
            from loopir.examples.reductions import layernorm, rmsnorm, softmax

            t, rpb, regs = (int(v) for v in args.variant.split(","))
            build = {"softmax": softmax, "layernorm": layernorm, "rmsnorm": rmsnorm}[args.op]
            func = build(r, c, args.dtype, threads=t, rows_per_block=rpb, registers=bool(regs), vector=8).func
    with loopir.PassContext(config={"cuda.fast_math": not args.accurate}):
        mod = loopir.build(func, target="cuda")
    mod(*tensors)
    torch.cuda.synchronize()
    print(getattr(mod, "library_calls", None))
    return 0


def _tensor_core(torch: object, op: str, dtype: str, sizes: list[int]) -> int:
    from loopir.examples import attention, decode_attention, hopper_gemm

    tdt = getattr(torch, dtype)
    rand = lambda *shape: torch.randn(*shape, device="cuda").to(tdt)  # type: ignore[attr-defined]  # noqa: E731
    if op == "attention":
        b, h, s, d, *flag = sizes
        causal = bool(flag and flag[0])
        mod = loopir.build(attention(b, h, s, s, d, dtype, causal).func, target="cuda")
        q, k, v = rand(b, h, s, d), rand(b, h, s, d), rand(b, h, s, d)
        mod(q, k, v, torch.empty_like(q))  # type: ignore[attr-defined]
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # type: ignore[attr-defined]
    elif op == "decode":
        b, h, s, d = sizes
        mod = loopir.build(decode_attention(b, h, loopir.Var("seq_kv"), d, dtype).func, target="cuda")
        q, k, v = rand(b, h, 1, d), rand(b, h, s, d), rand(b, h, s, d)
        mod(q, k, v, torch.empty_like(q))  # type: ignore[attr-defined]
        torch.nn.functional.scaled_dot_product_attention(q, k, v)  # type: ignore[attr-defined]
    else:
        m, k, n = sizes
        mod = loopir.build(hopper_gemm(m, k, n, dtype).func, target="cuda")
        mod(rand(m, k), rand(n, k), torch.empty(m, n, device="cuda"))  # type: ignore[attr-defined]
    torch.cuda.synchronize()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
