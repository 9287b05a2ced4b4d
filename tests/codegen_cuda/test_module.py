"""An IRModule built for CUDA: one shared library, functions by name, units and their cache,
CUTLASS configurations instantiated once (nvcc needed; no GPU: trace builds)."""

from __future__ import annotations

import pytest

import loopir
from loopir import te
from loopir.errors import LaunchError

pytestmark = pytest.mark.nvcc
TRACE = ("-DLOOPIR_HOST_TRACE",)


def _elementwise(n, fn):
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    sch = loopir.Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    bx, tx = sch.split(i, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.func


class _Fake:
    def __init__(self, shape, ptr, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None}  # fmt: skip


def _module():
    return loopir.IRModule({"add": _elementwise(1000, lambda a, b: a + b),
                            "mul": _elementwise(300, lambda a, b: a * b)})  # fmt: skip


@pytest.mark.parametrize("strategy", ["single", "units"])
def test_module_builds_into_one_library_called_by_name(strategy, tmp_path):
    rt = loopir.build(_module(), target="cuda", cache_dir=tmp_path, nvcc_flags=TRACE, strategy=strategy)
    assert rt.names == ("add", "mul")
    assert rt["add"].library_path == rt["mul"].library_path == rt.library_path
    assert "add_kernel0" in rt.source and "mul_kernel0" in rt.source
    assert "loopir_call_add" in rt.source and "loopir_call_mul" in rt.source
    rt["add"](_Fake((1000,), 16), _Fake((1000,), 32), _Fake((1000,), 48))
    rt["mul"](_Fake((300,), 64), _Fake((300,), 80), _Fake((300,), 96))
    assert rt["add"]._library().trace().splitlines() == [
        "launch add_kernel0 grid=(8,1,1) block=(128,1,1) args= 0x10 0x20 0x30",
        "launch mul_kernel0 grid=(3,1,1) block=(128,1,1) args= 0x40 0x50 0x60",
    ]
    with pytest.raises(LaunchError, match="parameter 'A': dimension 0 must be 300, got 1000"):
        rt["mul"](_Fake((1000,), 16), _Fake((300,), 32), _Fake((300,), 48))
    with pytest.raises(LaunchError, match="cuda module has no function 'sub'; its functions: add, mul"):
        rt["sub"]
    assert set(rt["add"].resource_usage) >= {"add_kernel0", "mul_kernel0"}


def test_changing_one_function_recompiles_its_unit_only(tmp_path):
    first = loopir.build(_module(), target="cuda", cache_dir=tmp_path, strategy="units")
    assert [u["unit"] for u in first.units] == ["add", "mul", "runtime", "link"]
    assert not any(u["cache_hit"] for u in first.units)
    again = loopir.build(_module(), target="cuda", cache_dir=tmp_path, strategy="units")
    assert all(u["cache_hit"] for u in again.units)
    changed = _module().with_function("mul", _elementwise(300, lambda a, b: a - b))
    third = loopir.build(changed, target="cuda", cache_dir=tmp_path, strategy="units")
    assert {u["unit"]: u["cache_hit"] for u in third.units} == {
        "add": True, "mul": False, "runtime": True, "link": False}


def test_unknown_strategy_is_refused(tmp_path):
    with pytest.raises(loopir.CodegenError, match=r"strategy must be one of \('single', 'units'\), got 'fast'"):
        loopir.build(_module(), target="cuda", cache_dir=tmp_path, strategy="fast")


def _gemm(m, n, k):
    A = te.placeholder((m, k), "float16", name="A")
    B = te.placeholder((k, n), "float16", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r), name="C")
    D = te.compute((m, n), lambda i, j: C[i, j].astype("float16"), name="D")
    return te.create_prim_func([A, B, D])


@pytest.mark.parametrize("strategy", ["single", "units"])
def test_two_gemms_with_one_configuration_instantiate_it_once(strategy):
    # the session cache (tests/conftest.py): the CUTLASS unit is shared with the other tests
    mod = loopir.IRModule({"qkv": _gemm(256, 256, 128), "up": _gemm(512, 256, 128)})
    rt = loopir.build(mod, target="cuda", nvcc_flags=TRACE, strategy=strategy)
    cutlass_units = [u["unit"] for u in rt.units if u["unit"].startswith("cutlass")]
    assert len(cutlass_units) == 1  # one configuration, one unit either way
    (q,), (u,) = rt["qkv"].library_calls, rt["up"].library_calls
    assert q["kernel"] == u["kernel"]
    cutlass = rt.source.split("// ---- the CUTLASS unit ----")[1]
    assert cutlass.count(f'extern "C" int {q["kernel"]}(') == 1
    rt["qkv"](_Fake((256, 128), 0x1000, "<f2"), _Fake((128, 256), 0x2000, "<f2"), _Fake((256, 256), 0x3000, "<f2"))
    rt["up"](_Fake((512, 128), 0x4000, "<f2"), _Fake((128, 256), 0x5000, "<f2"), _Fake((512, 256), 0x6000, "<f2"))
    assert rt["up"]._library().trace().splitlines() == [
        f"call {q['kernel']} args= 0x1000 0x2000 (nil) (nil) 0x3000 256 256 128 1 1 0 (nil)",
        f"call {q['kernel']} args= 0x4000 0x5000 (nil) (nil) 0x6000 512 256 128 1 1 0 (nil)",
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["single", "units"])
def test_module_functions_run_on_the_gpu(strategy, tmp_path):
    torch = pytest.importorskip("torch")
    rt = loopir.build(_module(), target="cuda", cache_dir=tmp_path, strategy=strategy)
    a, b = torch.rand(1000, device="cuda") + 0.5, torch.rand(1000, device="cuda") + 0.5
    c = torch.full((1000,), float("nan"), device="cuda")
    rt["add"](a, b, c)
    d = torch.full((300,), float("nan"), device="cuda")
    rt["mul"](a[:300].clone(), b[:300].clone(), d)
    rt.synchronize()
    assert torch.equal(c, a + b) and torch.equal(d, a[:300] * b[:300])
