"""Differential run of loopir's refusals against TVM 0.27 (issue 29, item 2): a reference
tool, not a test (it needs TVM, which the test suite does not).

Two steps, two Pythons::

    # 1. loopir: random schedules (the schedule fuzzer's draws); every refused
    #    compute_at / reverse_compute_at / pad is written with the trace before it
    PYTHONPATH=. python3 tests/schedule/_tvm_differential.py gen 1500 12 cases.jsonl
    # 2. TVM: rebuild each workload with TVM's te, replay the trace, apply the refused
    #    call; when TVM accepts it, build for llvm and compare with the unscheduled result
    /work/tvm-venv/bin/python tests/schedule/_tvm_differential.py tvm cases.jsonl out.jsonl
    # 3. counts per loopir message and TVM outcome
    python3 tests/schedule/_tvm_differential.py report out.jsonl

TVM outcomes: ``tvm-refused``, ``tvm-right``, ``tvm-wrong`` (the call is accepted and the
function computes something else), ``tvm-build`` (accepted, does not build), ``replay`` (the
trace before the call does not replay in TVM: names or semantics differ). Thread bindings are
made serial loops before the TVM build (the block semantics is sequential; the CPU build has
no threads).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

KINDS = ("compute_at", "reverse_compute_at", "pad")


# --------------------------------------------------------------------------------------------
# step 1: loopir
# --------------------------------------------------------------------------------------------


def _names(trace: Any) -> dict[int, str]:
    """Handle names of ``trace.as_json()`` (one counter over the outputs), by identity."""
    names: dict[int, str] = {}
    for inst in trace:
        for o in inst.outputs:
            names[id(o)] = f"{o.prefix}{len(names)}"
    return names


def _refused_call(call: Any, names: dict[int, str]) -> dict[str, Any] | None:
    """The refused call as a trace instruction, or None when an argument is not a handle."""
    from loopir.schedule import BlockRV, LoopRV

    def h(rv: Any, cls: type) -> str | None:
        return names.get(id(rv)) if isinstance(rv, cls) else None

    if call.kind == "pad":
        b = h(call.args[0], BlockRV)
        if b is None:
            return None
        return {"kind": "pad", "inputs": {"block": b}, "attrs": {"factors": call.args[1]}}
    b, lp = h(call.args[0], BlockRV), h(call.args[1], LoopRV)
    if b is None or lp is None:
        return None
    attrs = {"preserve_unit_loops": call.kwargs.get("preserve_unit_loops", False),
             "index": call.kwargs.get("index", -1)}  # fmt: skip
    return {"kind": call.kind, "inputs": {"block": b, "loop": lp}, "attrs": attrs}


def gen(n: int, steps: int, out: str, first: int = 0) -> None:
    import loopir.testing.fuzz as fz_mod
    from loopir.testing.fuzz import FuzzFinding, RandomChooser, ScheduleFuzzer, draw_workload

    fz_mod.run_cpu = lambda *a, **k: None  # the expected outputs are not needed here
    with open(out, "w") as f:
        for seed in range(first, first + n):
            ch = RandomChooser(seed)
            w = draw_workload(ch)
            fz = ScheduleFuzzer(w, seed=seed, check_every_step=False, gpu_lowering=False)
            for _ in range(steps):
                call = fz.draw(ch)
                trace = fz.sch.trace
                try:
                    ok = fz.step(call)
                except FuzzFinding:
                    break
                if ok or call.kind not in KINDS:
                    continue
                refused = _refused_call(call, _names(trace))
                if refused is None:
                    continue
                try:
                    fz.sch.__getattribute__(call.kind)(*call.args, **call.kwargs)
                except Exception as e:  # noqa: BLE001 - the message is what we want
                    msg = getattr(e, "message", str(e))
                rec = {"seed": seed, "workload": w.name, "args": dict(w.args),
                       "trace": trace.as_json(), "call": refused, "message": msg}  # fmt: skip
                f.write(json.dumps(rec) + "\n")


# --------------------------------------------------------------------------------------------
# step 2: TVM
# --------------------------------------------------------------------------------------------


def tvm_workload(name: str, args: dict[str, Any]) -> tuple[Any, dict[str, int]]:
    """The PrimFunc of loopir.testing.workloads' builder ``name`` built with TVM's te."""
    from tvm import te, tirx

    dtype = args.get("dtype", "float32")
    a = dict(args)
    a.pop("dtype", None)
    sizes: dict[str, int] = {}
    if name in ("matmul", "symbolic_matmul"):
        M = a["M"] if name == "matmul" else te.var("n")
        if name == "symbolic_matmul":
            sizes["n"] = a["n"]
        K, N = a["K"], a["N"]
        A = te.placeholder((M, K), dtype, name="A")
        B = te.placeholder((K, N), dtype, name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return te.create_prim_func([A, B, C]), sizes
    if name == "batch_matmul":
        Bt, M, K, N = a["Bt"], a["M"], a["K"], a["N"]
        A = te.placeholder((Bt, M, K), dtype, name="A")
        B = te.placeholder((Bt, K, N), dtype, name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
        return te.create_prim_func([A, B, C]), sizes
    if name == "matmul_bias_relu":
        M, K, N = a["M"], a["K"], a["N"]
        A = te.placeholder((M, K), dtype, name="A")
        B = te.placeholder((K, N), dtype, name="B")
        bias = te.placeholder((N,), dtype, name="bias")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        Bi = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="BiasAdd")
        D = te.compute((M, N), lambda i, j: te.max(Bi[i, j], tirx.const(0, dtype)), name="D")
        return te.create_prim_func([A, B, bias, D]), sizes
    if name == "conv2d_nhwc":
        N, H, W, CI, CO, KH, KW = (a[x] for x in ("N", "H", "W", "CI", "CO", "KH", "KW"))
        pad, stride = a["pad"], a["stride"]
        X = te.placeholder((N, H, W, CI), dtype, name="X")
        Wt = te.placeholder((KH, KW, CI, CO), dtype, name="W")
        HP, WP = H + 2 * pad, W + 2 * pad
        Xp = te.compute(
            (N, HP, WP, CI),
            lambda n, h, w, c: tirx.if_then_else(
                tirx.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
                X[n, h - pad, w - pad, c], tirx.const(0, dtype)),
            name="Xpad",
        )  # fmt: skip
        OH, OW = (HP - KH) // stride + 1, (WP - KW) // stride + 1
        rh = te.reduce_axis((0, KH), name="rh")
        rw = te.reduce_axis((0, KW), name="rw")
        rc = te.reduce_axis((0, CI), name="rc")
        Y = te.compute(
            (N, OH, OW, CO),
            lambda n, h, w, o: te.sum(
                Xp[n, h * stride + rh, w * stride + rw, rc] * Wt[rh, rw, rc, o], axis=[rh, rw, rc]),
            name="Y",
        )  # fmt: skip
        return te.create_prim_func([X, Wt, Y]), sizes
    if name == "elementwise_chain":
        M, N, stages = a["M"], a["N"], a["stages"]
        A = te.placeholder((M, N), dtype, name="A")
        B = te.placeholder((M, N), dtype, name="B")
        ops = [
            lambda t, a_, b: t * b + 1.0,
            lambda t, a_, b: t * 0.5 - a_,
            lambda t, a_, b: te.max(t, b),
            lambda t, a_, b: te.exp(t * 0.25),
        ]
        cur = te.compute((M, N), lambda i, j: A[i, j] * B[i, j] + 1.0, name="T1")
        def stage(p: Any, o: Any) -> Any:
            return lambda i, j: o(p[i, j], A[i, j], B[i, j])

        for s in range(1, stages):
            cur = te.compute((M, N), stage(cur, ops[s % len(ops)]), name=f"T{s + 1}")
        return te.create_prim_func([A, B, cur]), sizes
    if name in ("reduce_max", "reduce_min"):
        M, K = a["M"], a["K"]
        A = te.placeholder((M, K), dtype, name="A")
        k = te.reduce_axis((0, K), name="k")
        red = te.max if name == "reduce_max" else te.min
        R = te.compute((M,), lambda i: red(A[i, k] * 2.0, axis=k), name="R")
        S = te.compute((M,), lambda i: R[i] + 1.0, name="S")
        return te.create_prim_func([A, S]), sizes
    if name == "symbolic_elementwise":
        m = te.var("n")
        sizes["n"] = a["n"]
        N = a["N"]
        A = te.placeholder((m, N), dtype, name="A")
        B = te.compute((m, N), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        C = te.compute((m, N), lambda i, j: B[i, j] - A[i, j], name="C")
        return te.create_prim_func([A, C]), sizes
    raise KeyError(name)


def _index_map(text: str) -> Any:
    # loopir's map text is a plain lambda of +, -, *, //, %: TVM's PrimExpr operators mean
    # the same (// and % are floordiv / floormod)
    return eval(text, {})  # noqa: S307 - our own trace text


def apply_inst(sch: Any, inst: dict[str, Any], rvs: dict[str, Any]) -> Any:
    """Apply one loopir trace instruction to TVM's schedule; returns its outputs."""
    k, ins, at = inst["kind"], inst["inputs"], inst["attrs"]

    def rv(name: str) -> Any:
        return rvs[name]

    if k == "get_block":
        return sch.get_sblock(at["name"])
    if k == "get_loops":
        return sch.get_loops(rv(ins["block"]))
    if k == "split":
        return sch.split(rv(ins["loop"]), at["factors"],
                         disable_predication=at.get("disable_predication", False))  # fmt: skip
    if k == "fuse":
        return sch.fuse(*[rv(x) for x in ins["loops"]])
    if k == "reorder":
        return sch.reorder(*[rv(x) for x in ins["ordered_loops"]])
    if k == "bind":
        return sch.bind(rv(ins["loop"]), at["thread_axis"])
    if k in ("vectorize", "unroll", "parallel", "add_unit_loop"):
        key = "block_or_loop" if k == "add_unit_loop" else "loop"
        return getattr(sch, k)(rv(ins[key]))
    if k in ("cache_read", "cache_write"):
        consumers = ins.get("consumer_blocks")
        idx = at["read_buffer_index" if k == "cache_read" else "write_buffer_index"]
        return getattr(sch, k)(rv(ins["block"]), idx, at["storage_scope"],
                               consumer_blocks=[rv(c) for c in consumers] if consumers else None)
    if k in ("set_scope", "storage_align"):
        idx = at["buffer_index"]
        if isinstance(idx, str):  # TVM takes the index into the block's writes
            writes = [w.buffer.name for w in sch.get(rv(ins["block"])).writes]
            idx = writes.index(idx)
        if k == "set_scope":
            return sch.set_scope(rv(ins["block"]), idx, at["storage_scope"])
        return sch.storage_align(rv(ins["block"]), idx, at["axis"], at["factor"], at["offset"])
    if k == "transform_layout":
        buf = at["buffer"]
        buf = ("write", buf) if isinstance(buf, int) else tuple(buf) if isinstance(buf, list) else buf
        return sch.transform_layout(rv(ins["block"]), buf, _index_map(at["index_map"]))
    if k in ("compute_at", "reverse_compute_at"):
        return getattr(sch, k)(rv(ins["block"]), rv(ins["loop"]),
                               preserve_unit_loops=at["preserve_unit_loops"], index=at["index"])
    if k in ("compute_inline", "reverse_compute_inline", "get_producers", "get_consumers"):
        return getattr(sch, k)(rv(ins["block"]))
    if k in ("get_child_blocks",):
        return sch.get_child_blocks(rv(ins["block_or_loop"]))
    if k == "get_output_blocks":
        return sch.get_output_blocks(rv(ins["scope_block"]))
    if k in ("decompose_reduction", "decompose_padding"):
        return getattr(sch, k)(rv(ins["block"]), rv(ins["loop"]))
    if k == "rfactor":
        return sch.rfactor(rv(ins["loop"]), at["factor_axis"])
    if k == "pad":
        return sch.pad_einsum(rv(ins["block"]), at["factors"])
    if k == "loop_partition":
        return sch.loop_partition(rv(ins["loop"]), at["factors"])
    if k == "reindex":
        buf = at["buffer"]
        return sch.reindex(rv(ins["block"]), tuple(buf) if isinstance(buf, list) else buf)
    raise KeyError(k)


def _serial_threads(func: Any) -> Any:
    """``func`` with thread-bound loops made serial (the CPU build has no threads): through
    its TVMScript text, as TVM 0.27's Python has no statement mutator."""
    import re

    from tvm import script

    text = re.sub(r'T\.thread_binding\(([^()]*?), thread="[^"]*"\)', r"T.serial(\1)", func.script())
    return script.from_source(text)


def run_tvm(func: Any, sizes: dict[str, int], seed: int = 0) -> list[Any]:
    import numpy as np
    import tvm

    mod = tvm.IRModule({"main": _serial_threads(func)})
    lib = tvm.compile(mod, target="llvm")
    rng = np.random.default_rng(seed)
    arrays = []
    for p in func.params:
        buf = p  # TVM 0.27's parameters are the buffers
        shape = [int(d) if isinstance(d, (int, tvm.tirx.IntImm)) else sizes[d.name] for d in buf.shape]
        arrays.append(rng.uniform(-1, 1, size=shape).astype(buf.dtype))
    nd = [tvm.runtime.tensor(a) for a in arrays]
    lib["main"](*nd)
    return [x.numpy() for x in nd]


def tvm_case(rec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    from tvm import s_tir

    func, sizes = tvm_workload(rec["workload"], rec["args"])
    expected = run_tvm(func, sizes)
    sch = s_tir.Schedule(func)
    rvs: dict[str, Any] = {}
    try:
        for inst in rec["trace"]["instructions"]:
            out = apply_inst(sch, inst, rvs)
            outs = inst["outputs"]
            vals = list(out) if isinstance(out, (list, tuple)) else [out]
            for n, v in zip(outs, vals):
                rvs[n] = v
    except Exception as e:  # noqa: BLE001
        return {"outcome": "replay", "detail": f"{type(e).__name__}: {str(e)[-300:]}"}
    before = sch.mod["main"].script()
    try:
        apply_inst(sch, rec["call"], rvs)
    except Exception as e:  # noqa: BLE001
        return {"outcome": "tvm-refused", "detail": str(e).strip().splitlines()[-1][-300:]}
    after = sch.mod["main"]
    try:
        got = run_tvm(after, sizes)
    except Exception as e:  # noqa: BLE001
        return {"outcome": "tvm-build", "detail": f"{type(e).__name__}: {str(e)[-300:]}",
                "before": before, "after": after.script()}  # fmt: skip
    out = expected[-1]
    ok = np.allclose(got[-1], out, rtol=1e-4, atol=1e-4)
    return {"outcome": "tvm-right" if ok else "tvm-wrong", "before": before,
            "after": after.script()}  # fmt: skip


def tvm_all(inp: str, out: str, start: int = 0) -> None:
    """Each case of ``inp`` from line ``start`` on; ``out`` is appended to. A case that
    crashes TVM (a segfault, seen on some replays) ends the process: :func:`tvm_driver`
    records it and starts again after it."""
    with open(inp) as f, open(out, "a") as g:
        for i, line in enumerate(f):
            if i < start:
                continue
            with open(out + ".current", "w") as cur:
                cur.write(str(i))
            rec = json.loads(line)
            try:
                rec["tvm"] = tvm_case(rec)
            except Exception as e:  # noqa: BLE001
                rec["tvm"] = {"outcome": "driver", "detail": f"{type(e).__name__}: {e}"}
            g.write(json.dumps(rec) + "\n")
            g.flush()


def tvm_driver(inp: str, out: str) -> None:
    import subprocess

    open(out, "w").close()
    with open(inp) as f:
        lines = f.readlines()
    start = 0
    while start < len(lines):
        r = subprocess.run([sys.executable, __file__, "tvm-from", inp, out, str(start)],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode == 0:
            break
        with open(out + ".current") as cur:
            bad = int(cur.read())
        rec = json.loads(lines[bad])
        rec["tvm"] = {"outcome": "tvm-crash", "detail": r.stderr[-300:]}
        with open(out, "a") as g:
            g.write(json.dumps(rec) + "\n")
        start = bad + 1


# --------------------------------------------------------------------------------------------
# step 4: loopir again (after a refusal was lifted)
# --------------------------------------------------------------------------------------------


def recheck(inp: str, out: str) -> None:
    """Each case of ``inp`` (TVM's outcomes) replayed in loopir: ``loopir`` becomes
    ``refused`` (with the new message), ``right`` or ``wrong`` (CPU executor)."""
    import loopir
    from loopir.errors import ScheduleError
    from loopir.testing import EquivalenceError, check_equivalent
    from loopir.testing.workloads import make_workload

    with open(inp) as f, open(out, "w") as g:
        for line in f:
            rec = json.loads(line)
            w = make_workload(rec["workload"], **rec["args"])
            func = w.func
            sch = loopir.Schedule(func)
            trace = {"version": rec["trace"]["version"],
                     "instructions": [*rec["trace"]["instructions"], {**rec["call"], "outputs": []}]}
            try:
                loopir.Trace.from_json(trace).apply_to(sch)
            except ScheduleError as e:
                rec["loopir"] = {"outcome": "refused", "detail": e.message.splitlines()[0]}
            else:
                try:
                    check_equivalent(func, sch.func, sizes=dict(w.sizes))
                    rec["loopir"] = {"outcome": "right"}
                except EquivalenceError as e:
                    rec["loopir"] = {"outcome": "wrong", "detail": str(e)[:300]}
            g.write(json.dumps(rec) + "\n")


# --------------------------------------------------------------------------------------------
# step 3: report
# --------------------------------------------------------------------------------------------


def _bucket(msg: str) -> str:
    import re

    first = msg.strip().splitlines()[0]
    first = re.sub(r"'[^']*'", "'_'", first)
    first = re.sub(r"\b[a-z]+_?\d+\b", "_", first)
    return first[:150]


def report(inp: str) -> None:
    per: Counter[tuple[str, str, str]] = Counter()
    with open(inp) as f:
        for line in f:
            rec = json.loads(line)
            now = rec.get("loopir", {}).get("outcome", "")
            per[(rec["call"]["kind"], _bucket(rec["message"]), rec["tvm"]["outcome"], now)] += 1
    for (kind, b, o, now), c in sorted(per.items()):
        print(f"{c:5d}  {kind:20s} {o:12s} {now:8s} {b}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "gen":
        gen(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
            int(sys.argv[5]) if len(sys.argv) > 5 else 0)  # fmt: skip
    elif mode == "tvm":
        tvm_driver(sys.argv[2], sys.argv[3])
    elif mode == "recheck":
        recheck(sys.argv[2], sys.argv[3])
    elif mode == "tvm-from":
        tvm_all(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        report(sys.argv[2])
