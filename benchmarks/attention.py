"""Attention forward through ``mod()``: loopir ``examples.attention`` vs torch's
``scaled_dot_product_attention`` with each backend forced (flash, cuDNN, efficient) and the
default, and a Triton fused-attention kernel written here for the same shapes (issue 33).

One command on the GPU machine::

    python benchmarks/attention.py --json attention.json [--cases 'b4h32s1024d64*']

Cases ``b{batch}h{heads}s{seq}d{head_dim}[c]`` (``c``: causal), fp16 and bf16, Q, K, V and O
``(batch, heads, seq, head_dim)``. Every implementation is first checked against float64 on
random data (batch 0, the first two heads; max abs error), then timed with CUDA events around
``--calls`` back-to-back calls (median of ``--repeat``); TFLOP/s count 4 * seq_q * seq_kv *
head_dim per head (halved when causal), as FlashAttention reports.

Then decode (``--decode``; one query per sequence, batch 8, 32 heads, head_dim 128, KV length 4k
and 32k): ``examples.decode_attention`` (one build for every KV length) vs torch SDPA and the
KV read's bandwidth (K and V bytes over the time); ``--paged`` also over a paged KV cache (the
same keys in shuffled pages of 16, a page table and per-sequence lengths).
``--decode-variants '[{"prefetch": "v"}, {"prefetch": "kv"}]'`` times other decode schedules
(``decode_attention`` keyword arguments) beside the default in the same run: ``decode_variant0``,
... (and ``paged_variant0``, ... with ``--paged``), each checked first as the rest, with its
ratio to torch (``decode_variant0_vs_torch``); with ``--smoke`` it builds them too.

``--variants '[{"block_m": 128}, {"block_m": 128, "min_blocks_per_sm": 2}]'`` times other
schedules beside the default in the same run (``variant0``, ...; ``min_blocks_per_sm`` is the
build's ``__launch_bounds__`` argument), each checked first as the rest.

``--wgmma`` times the forms of the kernel beside the default (``loopir``: on a Hopper
FlashAttention 3's GEMMs on ``wgmma`` with the softmax overlapped, elsewhere FA2): ``fa2``
(``wgmma=False``: ``mma.sync``), ``wgmma`` (``wgmma=True, overlap=False``: both GEMMs, P from
registers, each wgmma waited for at once; default tiles 64 x 64), ``wgmma_qk`` (``wgmma="qk"``:
``S = Q K^T`` only) and ``wgmma_overlap`` (``overlap=True``: FlashAttention 3's
intra-warpgroup overlap of the softmax with the asynchronous GEMMs, the default on a Hopper),
``wgmma_tma`` (``tma=True``: the overlap with K and V by TMA from a producer warpgroup, FA3's
warp specialization; ``wgmma_tma_128``: 128 x 64 tiles, two consumer warpgroups, ``setmaxnreg``
24 / 240),
each with its ratio to the fastest torch backend (``wgmma_vs_best_torch``, ...); ``--wgmma-tiles '[[64, 64], [128, 128]]'`` adds one
``wgmma_{bm}x{bn}`` and one ``wgmma_overlap_{bm}x{bn}`` per tile (both GEMMs). With
``--smoke`` it builds them too (and says when ptxas serialized the wgmma, C7515).

``--smoke`` builds what it can without a GPU: every loopir kernel of the run, lowered, race
checked, emitted and compiled with nvcc for ``--arch`` when nvcc is on PATH; it imports neither
torch nor Triton.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
import shutil
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loopir
from loopir.examples import attention, decode_attention
from loopir.ir.expr import Var

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call  # noqa: E402

#: (batch, heads, seq, head_dim, causal)
CASES = [(b, 32, s, d, c) for s, b in ((1024, 4), (4096, 1), (16384, 1)) for d in (64, 128) for c in (False, True)]
DTYPES = ["float16", "bfloat16"]
#: decode: (batch, heads, kv_heads, KV length, head_dim), one query per sequence
DECODE = [(8, 32, 32, 4096, 128), (8, 32, 32, 32768, 128)]


def case_name(batch: int, heads: int, seq: int, d: int, causal: bool) -> str:
    return f"b{batch}h{heads}s{seq}d{d}" + ("c" if causal else "")


def selected(pattern: str | None) -> list[tuple[int, int, int, int, bool]]:
    if pattern is None:
        return CASES
    pats = pattern.split(",")
    return [c for c in CASES if any(fnmatch.fnmatch(case_name(*c), p) for p in pats)]


def wgmma_variants(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The ``--wgmma`` schedules by label (module doc)."""
    if not args.wgmma:
        return {}
    out: dict[str, dict[str, Any]] = {"fa2": {"wgmma": False}, "wgmma": {"wgmma": True, "overlap": False},
                                      "wgmma_qk": {"wgmma": "qk"},
                                      "wgmma_overlap": {"wgmma": True, "overlap": True},
                                      "wgmma_tma": {"wgmma": True, "overlap": True, "tma": True},
                                      "wgmma_tma_128": {"wgmma": True, "overlap": True, "tma": (24, 240),
                                                        "block_m": 128}}  # fmt: skip
    for bm, bn in args.wgmma_tiles:
        out[f"wgmma_{bm}x{bn}"] = {"wgmma": True, "overlap": False, "block_m": bm, "block_n": bn}
        out[f"wgmma_overlap_{bm}x{bn}"] = {"wgmma": True, "overlap": True, "block_m": bm, "block_n": bn}
    return out


def smoke(arch: str, cases: list[tuple[int, int, int, int, bool]], params: dict[str, Any] | None = None,
          variants: dict[str, dict[str, Any]] | None = None,
          decode_variants: list[dict[str, Any]] | None = None, dtypes: tuple[str, ...] = tuple(DTYPES)) -> int:  # fmt: skip
    from loopir.codegen_cuda import compile_cuda, prepare_function

    nvcc = shutil.which("nvcc") is not None
    for dtype in dtypes:
        for b, h, s, d, causal in cases:
            for label, kw in {"": params or {}, **(variants or {})}.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # a RaceCheckWarning fails the smoke run
                    src = prepare_function(attention(b, h, s, s, d, dtype, causal, **kw).func).emitted.source
                line = f"{dtype} {case_name(b, h, s, d, causal)}{' ' + label if label else ''}: {len(src)} chars of CUDA"
                if nvcc:
                    binary = compile_cuda(src, arch=arch)
                    kr = next(iter(binary.resources.values()))
                    line += f", {arch}: {kr.registers} registers, spills {kr.spill_store_bytes}/{kr.spill_load_bytes}"
                    if "C7515" in binary.log:  # ptxas inserted waits: no wgmma overlaps anything
                        line += ", wgmma serialized (C7515)"
                print(line, flush=True)
    b, h, kh, _, d = DECODE[0]  # one build serves every KV length
    for i, kw in enumerate([{}, *(decode_variants or [])]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            src = prepare_function(decode_attention(b, h, Var("seq_kv"), d, "float16", kh, **kw).func).emitted.source
        label = f" decode_variant{i - 1}" if i else ""
        line = f"decode b{b}h{h}kv{kh}d{d}{label}: {len(src)} chars of CUDA"
        if nvcc:
            res = compile_cuda(src, arch=arch).resources
            line += f", {arch}: spills {sum(r.spill_store_bytes + r.spill_load_bytes for r in res.values())}"
            if i:  # the chunks' kernel (the combine's is the default's)
                line += f", {max(r.registers for r in res.values())} registers"
        print(line, flush=True)
    return 0


def _triton_attention() -> Any:
    """A FlashAttention-2 style Triton kernel: a program per (query block, batch x head), online
    softmax over key blocks, causal blocks past the diagonal skipped (None without Triton)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, causal: tl.constexpr,  # type: ignore[no-untyped-def]
               D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        qb, bh = tl.program_id(0), tl.program_id(1)
        base = bh * seq * D
        rows = qb * BM + tl.arange(0, BM)
        dims = tl.arange(0, D)
        q = tl.load(q_ptr + base + rows[:, None] * D + dims[None, :], mask=rows[:, None] < seq, other=0.0)
        m = tl.full([BM], float("-inf"), tl.float32)
        l = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        end = tl.minimum((qb + 1) * BM, seq) if causal else seq
        for start in range(0, end, BN):
            cols = start + tl.arange(0, BN)
            kv_mask = cols[:, None] < seq
            k = tl.load(k_ptr + base + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            valid = cols[None, :] < seq
            if causal:
                valid = valid & (cols[None, :] <= rows[:, None])
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + base + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / l[:, None]
        tl.store(o_ptr + base + rows[:, None] * D + dims[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=rows[:, None] < seq)

    def run(q: Any, k: Any, v: Any, o: Any, causal: bool) -> Any:
        b, h, s, d = q.shape
        bm, bn = 128, 64 if d <= 64 else 32
        kernel[(triton.cdiv(s, bm), b * h)](q, k, v, o, s, 1.0 / math.sqrt(d), causal, d, bm, bn,
                                            num_warps=4 if d <= 64 else 8, num_stages=3)  # fmt: skip
        return o

    return run


def _sdpa_backends(torch: Any) -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    out = {"torch_default": None}
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        if hasattr(SDPBackend, name):
            out[f"torch_{name.split('_')[0].lower()}"] = getattr(SDPBackend, name)
    return out


def _sdpa(torch: Any, backend: Any, q: Any, k: Any, v: Any, o: Any, causal: bool) -> Any:
    from torch.nn.attention import sdpa_kernel

    f = torch.nn.functional.scaled_dot_product_attention
    if backend is None:
        o.copy_(f(q, k, v, is_causal=causal))
    else:
        with sdpa_kernel(backend):
            o.copy_(f(q, k, v, is_causal=causal))
    return o


def run_case(torch: Any, args: argparse.Namespace, dtype: str, case: tuple[int, int, int, int, bool],
             triton_attn: Any) -> dict[str, Any]:  # fmt: skip
    b, h, s, d, causal = case
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=tdt, generator=gen) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q[:1, :2].double(), k[:1, :2].double(),
                                                           v[:1, :2].double(), is_causal=causal)  # fmt: skip
    mod = loopir.build(attention(b, h, s, s, d, dtype, causal, **args.params).func, target="cuda")
    impls: dict[str, Any] = {"loopir": lambda o: mod(q, k, v, o)}
    for i, variant in enumerate(args.variants):  # the sweep's schedules, timed beside the default
        kw = dict(variant)
        min_blocks = kw.pop("min_blocks_per_sm", None)
        vmod = loopir.build(attention(b, h, s, s, d, dtype, causal, **kw).func, target="cuda",
                            min_blocks_per_sm=min_blocks)  # fmt: skip
        impls[f"variant{i}"] = lambda o, vmod=vmod: vmod(q, k, v, o)
    for label, kw in wgmma_variants(args).items():  # FlashAttention 3's GEMMs on wgmma
        wmod = loopir.build(attention(b, h, s, s, d, dtype, causal, **kw).func, target="cuda")
        impls[label] = lambda o, wmod=wmod: wmod(q, k, v, o)
    for label, backend in _sdpa_backends(torch).items():
        impls[label] = lambda o, backend=backend: _sdpa(torch, backend, q, k, v, o, causal)
    if triton_attn is not None:
        impls["triton"] = lambda o: triton_attn(q, k, v, o, causal)
    flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
    row: dict[str, Any] = {"case": f"{dtype} {case_name(*case)}", "flops": flops}
    for label, fn in impls.items():
        o = torch.full_like(q, float("nan"))
        try:
            fn(o)
            torch.cuda.synchronize()
        except RuntimeError as exc:  # a forced backend that does not take the shape
            row[label] = f"unavailable: {str(exc).splitlines()[0][:120]}"
            continue
        err = float((o[:1, :2].double() - ref).abs().max())
        if not err < args.tol:
            if label == "loopir":
                raise AssertionError(f"{row['case']} {label}: max abs error {err} >= {args.tol}")
            row[label] = f"wrong: max abs error {err} >= {args.tol}; not timed"
            print(f"  {row['case']} {label}: {row[label]}", flush=True)
            continue
        ms = events_per_call(torch, lambda fn=fn, o=o: fn(o), args.calls, args.repeat, warmup=2)
        row[label] = {"ms": ms, "TFLOP/s": flops / ms / 1e9, "err": err}
    timed = {k: v["ms"] for k, v in row.items() if isinstance(v, dict)}
    best_torch = min((v for k, v in timed.items() if k.startswith("torch")), default=None)
    if best_torch:
        row["loopir_vs_best_torch"] = best_torch / timed["loopir"]
        for label in wgmma_variants(args):
            if label in timed:
                row[f"{label}_vs_best_torch"] = best_torch / timed[label]
    if "triton" in timed:
        row["loopir_vs_triton"] = timed["triton"] / timed["loopir"]
    print(row["case"] + ": " + "  ".join(f"{k} {v:.3f} ms" for k, v in timed.items()) + "  " +
          "  ".join(f"{k} {v:.2f}x" for k, v in row.items() if k.endswith("_vs_best_torch") or k.startswith("loopir_vs")),
          flush=True)  # fmt: skip
    return row


def _call(mod: Any, *inputs: Any) -> Callable[[Any], Any]:
    """``mod`` on ``inputs`` and the output ``o``: ``fn(o)``."""
    return lambda o: mod(*inputs, o)


def run_decode(torch: Any, args: argparse.Namespace, mods: dict[str, Any],
               case: tuple[int, int, int, int, int]) -> dict[str, Any]:  # fmt: skip
    b, h, kh, skv, d = case
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.float16, generator=gen)
    k, v = (torch.randn(b, kh, skv, d, device="cuda", dtype=torch.float16, generator=gen) for _ in range(2))
    kr, vr = (x.repeat_interleave(h // kh, 1) if h != kh else x for x in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q[:1].double(), kr[:1].double(), vr[:1].double())
    mod = mods.setdefault(f"{b}x{h}x{kh}x{d}", loopir.build(decode_attention(b, h, Var("seq_kv"), d, "float16", kh).func,
                                                            target="cuda"))  # fmt: skip
    impls: dict[str, Callable[[Any], Any]] = {"loopir": lambda o: mod(q, k, v, o),
             "torch": lambda o: o.copy_(torch.nn.functional.scaled_dot_product_attention(q, kr, vr))}  # fmt: skip
    if args.paged:  # the same keys in a pool of shuffled pages of 16 (vLLM's paged KV cache)
        pages = skv // 16
        perm = torch.randperm(b * pages, device="cuda", generator=gen)
        kp, vp = (torch.empty(b * pages, kh, 16, d, device="cuda", dtype=torch.float16) for _ in range(2))
        for pool, x in ((kp, k), (vp, v)):
            pool[perm] = x.view(b, kh, pages, 16, d).permute(0, 2, 1, 3, 4).reshape(b * pages, kh, 16, d)
        table = perm.view(b, pages).to(torch.int32)
        lens = torch.full((b,), skv, device="cuda", dtype=torch.int32)
        paged = mods.setdefault(f"paged{b}x{h}x{kh}x{d}", loopir.build(
            decode_attention(b, h, Var("max_pages"), d, "float16", kh, page_size=16, num_pages=Var("num_pages")).func,
            target="cuda"))  # fmt: skip
        impls["paged"] = lambda o: paged(q, kp, vp, table, lens, o)
    for i, kw in enumerate(args.decode_variants):  # the sweep's schedules, timed beside the default
        vmod = mods.setdefault(f"{b}x{h}x{kh}x{d} {json.dumps(kw, sort_keys=True)}", loopir.build(
            decode_attention(b, h, Var("seq_kv"), d, "float16", kh, **kw).func, target="cuda"))  # fmt: skip
        impls[f"decode_variant{i}"] = _call(vmod, q, k, v)
        if args.paged:
            vpaged = mods.setdefault(f"paged{b}x{h}x{kh}x{d} {json.dumps(kw, sort_keys=True)}", loopir.build(
                decode_attention(b, h, Var("max_pages"), d, "float16", kh, page_size=16, num_pages=Var("num_pages"),
                                 **kw).func, target="cuda"))  # fmt: skip
            impls[f"paged_variant{i}"] = _call(vpaged, q, kp, vp, table, lens)
    row: dict[str, Any] = {"case": f"decode b{b}h{h}kv{kh}s{skv}d{d}", "kv_bytes": 2 * b * kh * skv * d * 2}
    for label, fn in impls.items():
        o = torch.full_like(q, float("nan"))
        fn(o)
        torch.cuda.synchronize()
        err = float((o[:1].double() - ref).abs().max())
        if not err < args.tol:
            raise AssertionError(f"{row['case']} {label}: max abs error {err} >= {args.tol}")
        ms = events_per_call(torch, lambda fn=fn, o=o: fn(o), args.calls, args.repeat, warmup=2)
        row[label] = {"ms": ms, "GB/s": row["kv_bytes"] / ms / 1e6, "err": err}
    row["loopir_vs_torch"] = row["torch"]["ms"] / row["loopir"]["ms"]
    paged_line = f"  paged {row['paged']['ms']:.3f} ms {row['paged']['GB/s']:.0f} GB/s" if "paged" in row else ""
    extra = [label for label in impls if "_variant" in label]
    for label in extra:
        row[f"{label}_vs_torch"] = row["torch"]["ms"] / row[label]["ms"]
    variant_line = "".join(f"  {label} {row[label]['ms']:.3f} ms {row[label]['GB/s']:.0f} GB/s "
                           f"{row[label + '_vs_torch']:.2f}x" for label in extra)  # fmt: skip
    print(f"{row['case']}: loopir {row['loopir']['ms']:.3f} ms {row['loopir']['GB/s']:.0f} GB/s  torch "
          f"{row['torch']['ms']:.3f} ms  loopir/torch {row['loopir_vs_torch']:.2f}x{paged_line}{variant_line}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cases", default=None, help="comma-separated glob patterns of case names")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--tol", type=float, default=2e-2, help="max abs error against float64")
    ap.add_argument("--decode", action="store_true", help="also the decode cases")
    ap.add_argument("--paged", action="store_true", help="decode: also over a paged KV cache (pages of 16)")
    ap.add_argument("--decode-variants", type=json.loads, default=[],
                    help="JSON list of examples.decode_attention keyword arguments (prefetch, splits, ...), "
                         "each timed as decode_variant<i> beside the default decode (paged_variant<i> with --paged)")  # fmt: skip
    ap.add_argument("--params", type=json.loads, default={},
                    help="JSON of examples.attention keyword arguments (block_m, unroll_rows, ...)")
    ap.add_argument("--variants", type=json.loads, default=[],
                    help="JSON list of examples.attention keyword arguments (and min_blocks_per_sm, "
                         "the build's), each timed as variant<i> beside the default")  # fmt: skip
    ap.add_argument("--wgmma", action="store_true",
                    help="also time attention(..., wgmma=True) and wgmma='qk' (FlashAttention 3's GEMMs, sm_90a)")
    ap.add_argument("--wgmma-tiles", type=json.loads, default=[],
                    help="with --wgmma: JSON list of [block_m, block_n] tiles of wgmma=True, each timed too")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes of the prefill cases")
    ap.add_argument("--smoke", action="store_true", help="build the loopir kernels only (no GPU)")
    ap.add_argument("--arch", default="sm_90a", help="nvcc architecture of --smoke")
    args = ap.parse_args(argv)
    cases = selected(args.cases)
    if args.smoke:
        return smoke(args.arch, cases, args.params, wgmma_variants(args), args.decode_variants,
                     tuple(args.dtypes.split(",")))  # fmt: skip

    import torch

    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "command": " ".join(sys.argv),
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": [],
    }  # fmt: skip
    triton_attn = _triton_attention()
    for dtype in args.dtypes.split(","):
        for case in cases:
            out["cases"].append(run_case(torch, args, dtype, case, triton_attn))
    mods: dict[str, Any] = {}
    for dcase in DECODE if args.decode else []:
        out["cases"].append(run_decode(torch, args, mods, dcase))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
