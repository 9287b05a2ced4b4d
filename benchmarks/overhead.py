"""What a call of a loopir module costs a torch program, against torch and Triton.

One command on the GPU machine::

    python benchmarks/overhead.py --json overhead.json

Every case is checked against a float64 reference on random (never zero) inputs before it is
timed. Cases (issue 12):

1. **host time per call** of a 3-argument elementwise kernel (``c = a + b``, 4096 floats) on
   CUDA torch tensors: ``mod(a, b, c)`` vs ``torch.add(a, b, out=c)`` vs a Triton kernel, each
   called ``--calls`` times in a Python loop (host clock around the loop, then one
   synchronization); the target is loopir <= 1.0x torch and below Triton;
2. **user-level time over kernel time** for the DietCode dense schedule at 960x770x2304 (local
   padding on) and the CUTLASS fp16 GEMM at 2048^3 (default configuration): user-level is
   ``mod()`` called in a loop between two CUDA events, divided by the calls; kernel time is the
   same calls captured in a CUDA graph and replayed (no host work between kernels); also one
   call between events, as ``mod.benchmark`` reports it; the target is <= 1.03;
3. a CUDA graph of 100 captured calls (``A += B`` in place) replays with the right result;
4. a torch program interleaving loopir calls and torch ops on a side stream, while a long
   torch op keeps the default stream busy: ``mod()`` returns before that op finishes and the
   side stream's result is right (no device-wide synchronization).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import loopir
from loopir import te

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call, rel_err  # noqa: E402


def _elementwise(n: int) -> Any:
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    sch = loopir.Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    bx, tx = sch.split(i, [None, 256])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return loopir.build(sch.func, target="cuda")


def _triton_add() -> Any:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)

    def run(a: Any, b: Any, c: Any) -> None:
        n = a.numel()
        add_kernel[(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024)

    return run


def host_time_per_call(torch: Any, fn: Any, args: tuple[Any, ...], calls: int, rounds: int) -> float:
    """Median over rounds of (host time of ``calls`` calls) / calls, in microseconds."""
    for _ in range(200):
        fn(*args)
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out.append((t1 - t0) / calls * 1e6)
    return statistics.median(out)


def case_elementwise(torch: Any, calls: int, rounds: int) -> dict[str, Any]:
    n = 4096
    mod = _elementwise(n)
    a = torch.rand(n, device="cuda") + 0.5
    b = torch.rand(n, device="cuda") + 0.5
    ref = a.double() + b.double()
    rows: dict[str, Any] = {}
    candidates: dict[str, Any] = {
        "loopir mod(a, b, c)": lambda a, b, c: mod(a, b, c),
        "torch.add(a, b, out=c)": lambda a, b, c: torch.add(a, b, out=c),
    }
    tri = _triton_add()
    if tri is not None:
        candidates["triton add kernel"] = tri
    for name, fn in candidates.items():
        c = torch.full((n,), float("nan"), device="cuda")
        fn(a, b, c)
        torch.cuda.synchronize()
        err = rel_err(c, ref)
        assert err < 1e-6, f"{name}: relative error {err}"
        rows[name] = {"us_per_call": host_time_per_call(torch, fn, (a, b, c), calls, rounds), "rel_err": err}
    base = rows["torch.add(a, b, out=c)"]["us_per_call"]
    for r in rows.values():
        r["vs_torch"] = r["us_per_call"] / base
    return rows


def _graph_per_call(torch: Any, fn: Any, calls: int, repeat: int) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return events_per_call(torch, g.replay, 1, repeat) / calls


def user_vs_kernel(torch: Any, name: str, mod: Any, args: tuple[Any, ...], calls: int, repeat: int) -> dict[str, Any]:
    def call() -> None:
        mod(*args)

    for _ in range(10):
        call()
    torch.cuda.synchronize()
    user = events_per_call(torch, call, calls, repeat)
    one = events_per_call(torch, call, 1, repeat * 5)
    kernel = _graph_per_call(torch, call, calls, repeat)
    return {"case": name, "user_ms": user, "one_call_ms": one, "kernel_ms": kernel,
            "user_over_kernel": user / kernel, "mod.benchmark_ms": mod.benchmark(*args)}  # fmt: skip


def case_dense(torch: Any, calls: int, repeat: int) -> dict[str, Any]:
    from loopir.examples.dense import dense

    M, K, N = 960, 770, 2304
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        mod = loopir.build(dense(M, K, N).func, target="cuda")
    a = torch.rand(M, K, device="cuda") - 0.5
    b = torch.rand(K, N, device="cuda") - 0.5
    c = torch.full((M, N), float("nan"), device="cuda")
    mod(a, b, c)
    torch.cuda.synchronize()
    err = rel_err(c, a.double() @ b.double())
    assert err < 1e-5, f"dense: relative error {err}"
    row = user_vs_kernel(torch, "DietCode dense 960x770x2304, pad on", mod, (a, b, c), calls, repeat)
    row["rel_err"] = err
    return row


def case_cutlass(torch: Any, calls: int, repeat: int) -> dict[str, Any]:
    m = n = k = 2048
    from module import gemm  # benchmarks/module.py: fp16 in, fp32 accumulation, fp16 out

    mod = loopir.build(gemm(m, n, k), target="cuda")
    assert mod.library_calls, "the GEMM was not handed to CUTLASS"
    a = (torch.rand(m, k, device="cuda") - 0.5).half()
    b = (torch.rand(k, n, device="cuda") - 0.5).half()
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    mod(a, b, d)
    torch.cuda.synchronize()
    err = rel_err(d, a.double() @ b.double())
    assert err < 1e-2, f"cutlass: relative error {err}"
    row = user_vs_kernel(torch, "CUTLASS fp16 GEMM 2048^3 (default config)", mod, (a, b, d), calls, repeat)
    mm = events_per_call(torch, lambda: torch.matmul(a, b, out=d), calls, repeat)
    row["torch_matmul_ms"] = mm
    row["rel_err"] = err
    return row


def case_graph(torch: Any) -> dict[str, Any]:
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import Var
    from loopir.ir.stmt import BufferStore, For, ForKind, IfThenElse, PrimFunc

    n = 100_000
    a_buf, b_buf = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 256 + tx
    body = IfThenElse(i < n, BufferStore(a_buf, a_buf[i] + b_buf[i], (i,)))
    func = PrimFunc((a_buf, b_buf), For(bx, 0, (n + 255) // 256, ForKind.THREAD_BINDING,
                    For(tx, 0, 256, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x"),
                    thread_tag="blockIdx.x"), name="acc")  # fmt: skip
    mod = loopir.build(func, target="cuda")
    a = torch.rand(n, device="cuda") + 0.5
    b = torch.rand(n, device="cuda") + 0.5
    a0 = a.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        mod(a, b)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100):
            mod(a, b)
    a.copy_(a0)
    g.replay()
    torch.cuda.synchronize()
    err = rel_err(a, a0.double() + 100 * b.double())
    return {"captured_calls": 100, "rel_err": err, "ok": err < 1e-5}


def case_side_stream(torch: Any) -> dict[str, Any]:
    mod = _elementwise(1 << 20)
    n = 1 << 20
    a = torch.rand(n, device="cuda") + 0.5
    b = torch.rand(n, device="cuda") + 0.5
    c = torch.empty(n, device="cuda")
    mod(a, b, c)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    x, y = torch.empty_like(a), torch.empty_like(a)

    def program() -> None:
        torch.mul(a, 3.0, out=x)
        mod(x, b, c)
        torch.sub(c, b, out=y)
        mod(y, b, c)

    with torch.cuda.stream(side):
        # once before timing: the first launch of a torch kernel loads it (lazy module loading),
        # which waits for the device; that is torch's first-use cost, not the program's
        program()
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000_000)  # a long op in flight on the default stream
    t0 = time.perf_counter()
    with torch.cuda.stream(side):
        program()
    returned = time.perf_counter() - t0
    busy_before = not torch.cuda.current_stream().query()
    side.synchronize()
    side_done = time.perf_counter() - t0
    default_busy = not torch.cuda.current_stream().query()
    err = rel_err(c, 3.0 * a.double() + b.double())
    torch.cuda.synchronize()
    return {"host_ms_for_4_ops": returned * 1e3, "side_done_ms": side_done * 1e3,
            "default_busy_before_side_sync": busy_before,
            "default_stream_still_busy_after_side_done": default_busy,
            "rel_err": err, "ok": default_busy and err < 1e-6}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per host-timing round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    logging.basicConfig(level=logging.WARNING)
    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "command": " ".join(sys.argv),
    }  # fmt: skip
    cases = {
        "elementwise": lambda: case_elementwise(torch, args.calls, args.rounds),
        "dense": lambda: case_dense(torch, 50, args.repeat),
        "cutlass": lambda: case_cutlass(torch, 100, args.repeat),
        "graph": lambda: case_graph(torch),
        "side_stream": lambda: case_side_stream(torch),
    }
    failed = []
    for key, run in cases.items():
        try:
            out[key] = run()
            print(key, json.dumps(out[key]), flush=True)
        except Exception:
            traceback.print_exc()
            failed.append(key)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if failed:
        print("FAILED cases:", ", ".join(failed))
        return 1
    print(f"\n{out['gpu']}, {out['date']}")
    print(f"{'elementwise 4096 floats, 3 args':40s} {'us/call (host)':>15s} {'vs torch':>9s}")
    for name, r in out["elementwise"].items():
        print(f"  {name:38s} {r['us_per_call']:15.2f} {r['vs_torch']:9.2f}")
    print(f"{'case':44s} {'user ms':>9s} {'kernel ms':>9s} {'ratio':>6s} {'1 call':>8s}")
    for key in ("dense", "cutlass"):
        r = out[key]
        print(f"  {r['case']:42s} {r['user_ms']:9.4f} {r['kernel_ms']:9.4f} {r['user_over_kernel']:6.3f} "
              f"{r['one_call_ms']:8.4f}")  # fmt: skip
    if "torch_matmul_ms" in out["cutlass"]:
        print(f"  torch.matmul 2048^3 fp16 back to back: {out['cutlass']['torch_matmul_ms']:.4f} ms")
    print(f"graph of 100 captured calls: {'right' if out['graph']['ok'] else 'WRONG'} (rel err {out['graph']['rel_err']:.2e})")
    ss = out["side_stream"]
    print(f"side stream: {'ok' if ss['ok'] else 'FAILED'} (4 ops queued in {ss['host_ms_for_4_ops']:.3f} ms "
          f"while the default stream was busy: {ss['default_stream_still_busy_after_side_done']})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
