"""The built-in CUDA intrinsics are registered under TVM's names, well formed, and the
tensor-core call builders refuse malformed operands naming them."""

from __future__ import annotations

import pytest

import loopir
from loopir import tensor_intrin
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.tensor_intrin.cuda import INTRIN_NAMES, WGMMA_INTRIN_NAMES

EXPECTED = {
    *(f"mma_ldmatrix_{t}_{w}" for t in ("f16", "bf16") for w in ("a", "a_trans", "b", "b_trans")),
    "mma_f16f16f32", "mma_bf16bf16f32", "mma_f16f16f16",
    "mma_fill_f32", "mma_fill_f16",
    *(f"mma_store_{a}_{s}" for a in ("f32", "f16") for s in ("shared", "global")),
    *(f"mma_store_f32_{o}_{s}" for o in ("f16", "bf16") for s in ("shared", "global")),
}  # fmt: skip


def test_builtin_names_are_registered() -> None:
    assert set(INTRIN_NAMES) == EXPECTED | set(WGMMA_INTRIN_NAMES)
    assert EXPECTED <= set(tensor_intrin.names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_desc_and_impl_verify(name: str) -> None:
    intrin = tensor_intrin.get(name)
    loopir.verify(intrin.desc)
    loopir.verify(intrin.impl)
    def sig(f):
        return [(tuple(int(x) for x in b.shape), b.dtype, b.scope) for b in f.params]

    assert sig(intrin.desc) == sig(intrin.impl)


def test_registering_a_builtin_name_again_is_refused() -> None:
    intrin = tensor_intrin.get("mma_f16f16f32")
    with pytest.raises(tensor_intrin.TensorIntrinError, match="already registered"):
        tensor_intrin.register("mma_f16f16f32", intrin.desc, intrin.impl)


tx = Var("tx")
W16 = Buffer("W", (32, 8), "float16", scope="warp")
W32 = Buffer("C", (32, 8), "float32", scope="warp")
S16 = Buffer("S", (16, 16), "float16", scope="shared")
G32 = Buffer("G", (16, 16), "float32")


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: op.ptx_ldmatrix(W16[tx, 0], S16[tx % 16, 0], num=3), "num 1, 2 or 4"),
        (lambda: op.ptx_ldmatrix(W16[tx, 0], G32[tx % 16, 0]), "shared buffer"),
        (lambda: op.ptx_ldmatrix(W32[tx, 0], S16[tx % 16, 0]), "16-bit dtype"),
        (lambda: op.ptx_ldmatrix(S16[tx, 0], S16[tx % 16, 0]), "fragment buffer"),
        (lambda: op.ptx_ldmatrix(Buffer("V", (16, 8), "float16", scope="warp")[tx, 0],
                                 S16[tx % 16, 0]), "second-to-last"),  # fmt: skip
        (lambda: op.ptx_mma(W16[tx, 0], W16[tx, 0], W16[tx, 0], shape="m16n8k8"), "shape"),
        (lambda: op.ptx_mma(W16[tx, 0], Buffer("Wb", (32, 8), "bfloat16", scope="warp")[tx, 0],
                            W32[tx, 0]), "both alike"),  # fmt: skip
        (lambda: op.ptx_mma(W32[tx, 0], W32[tx, 0], W32[tx, 0]), "float16 or bfloat16"),
        (lambda: op.mma_fill(W32[tx, 0], 0, 0.0), "positive"),
        (lambda: op.mma_store(G32[0, 0], W32[tx, 0], rows=8), "16 x 8 or 16 x 16"),
        (lambda: op.mma_store(G32[0, 0], W16[tx, 0]), "float16 fragment cannot be stored as float32"),
    ],
)
def test_builders_refuse_malformed_calls(build, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        build()


def test_a_float32_fragment_is_stored_as_half_precision() -> None:
    store = op.mma_store(S16[0, 0], W32[tx, 0])
    assert op.tensor_core_problem(store) is None


def test_tensor_core_predicates() -> None:
    ld = op.ptx_ldmatrix(W16[tx, 0], S16[tx % 16, 8 * (tx // 16)])
    fill = op.mma_fill(W32[tx, 0], 8, 0.0)
    assert op.is_warp_collective(ld) and not op.is_warp_collective(fill)
    assert op.is_tensor_core_call(fill) and not op.is_tensor_core_call(op.storage_sync())
    assert not op.is_barrier(ld)


def test_verify_refuses_a_malformed_call_built_directly() -> None:
    from loopir.errors import IRValidationError
    from loopir.ir.expr import Call, IntImm
    from loopir.ir.stmt import Evaluate, For, ForKind, PrimFunc

    bad = Call("int32", "ptx_ldmatrix", (IntImm(0, "bool"), IntImm(3, "int32"), W16[tx, 0], S16[tx % 16, 0]))
    func = PrimFunc((W16, S16), For(tx, 0, 32, ForKind.THREAD_BINDING, Evaluate(bad), thread_tag="threadIdx.x"))
    with pytest.raises(IRValidationError, match="num 1, 2 or 4") as info:
        loopir.verify(func)
    assert info.value.check == "tensor-core-call"


def test_tensor_core_functions_read_back_from_their_script() -> None:
    # every built-in description and implementation, and whole kernels of the calls, print as
    # scripts the parser reads back to the same function
    from loopir import tensor_intrin
    from loopir.script import from_source
    from tests.tensor_intrin import kernels

    funcs = [kernels.gemm_one_nest(), kernels.tile_16x8(), kernels.tile_16x8(b_x1=True, dtype="bfloat16")]
    for name in tensor_intrin.names():
        funcs += [tensor_intrin.get(name).desc, tensor_intrin.get(name).impl]
    for f in funcs:
        loopir.assert_structural_equal(from_source(f.script()), f)
