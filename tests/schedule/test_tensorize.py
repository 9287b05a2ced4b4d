"""tensorize (issue 31) with intrinsics registered by the tests (loopir.testing.intrinsics):
a 4x4x4 matmul tile whose implementation is a differently shaped loop nest, a dot product of 4
whose implementation is one unrolled expression, copies of 4 from global to shared / local
memory whose implementation is one vector access.

The docstring example as a golden; the block part of it against TVM 0.27 (TVM's tensorize
keeps the blockized block's iter vars and regions and replaces its body: its IR before the
body is the IR its blockize gives, tests/golden/schedule/tvm/blockize_decomposed.txt; TVM 0.27's
tensorize itself cannot run where the reference was written: DeepCopy's save_json crashes);
mismatches naming what differs; the trace; and the CPU executor against the untensorized
function, lowered too, over hypothesis-drawn shapes and tiles (an inexact tile is refused).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te, tensor_intrin
from loopir.errors import ScheduleError
from loopir.schedule import tree
from loopir.tensor_intrin.binding import TENSORIZED, with_descriptions
from loopir.testing import check_equivalent
from loopir.testing.intrinsics import register_test_intrinsics
from tests.schedule.dm_util import check_schedule, golden_pair
from tests.schedule.test_blockize import assert_docstring_shows
from tests.schedule.tvm_text import normalize

TVM_DIR = Path(__file__).parent.parent / "golden" / "schedule" / "tvm"


@pytest.fixture(autouse=True, scope="module")
def _intrinsics() -> None:
    register_test_intrinsics()


def mm(m: int, n: int, k: int, dtype: str = "float32", b_transposed: bool = False) -> loopir.PrimFunc:
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((n, k) if b_transposed else (k, n), dtype, name="B")
    r = te.reduce_axis(k, name="k")
    if b_transposed:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def tiled(sch: loopir.Schedule, t: int = 4, decompose: bool = True) -> list[loopir.schedule.LoopRV]:
    """Tile i, j, k by ``t`` (i0, j0, k0, i1, j1, k1) and decompose the reduction at k0."""
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, t])
    j0, j1 = sch.split(j, [None, t])
    k0, k1 = sch.split(k, [None, t])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    if decompose:
        sch.decompose_reduction(sch.get_block("C"), k0)
    return [i0, j0, k0, i1, j1, k1]


def test_golden_docstring_example(golden) -> None:
    func = mm(16, 16, 16)
    sch = loopir.Schedule(func)
    loops = tiled(sch)
    before = sch.func
    sch.tensorize(loops[3], "test.mm4")
    golden_pair(golden, "tensorize_mm4", before, sch.func)
    assert_docstring_shows(loopir.Schedule.tensorize.__doc__ or "", sch.func.script())
    assert 'sch.tensorize(l5, "test.mm4", preserve_unit_iters=True)' in str(sch.trace)
    blk = sch.get(sch.get_block("C_o"))
    assert blk.annotations[TENSORIZED] == "test.mm4"
    check_schedule(func, sch)


def _header(lines: list[str], block: str) -> list[str]:
    """The lines of block ``block`` down to its regions (its iter vars, T.reads, T.writes)."""
    start = next(k for k, line in enumerate(lines) if line.strip() == f'with T.block("{block}"):')
    out = []
    for line in lines[start:]:
        out.append(line)
        if line.strip().startswith("T.writes("):
            return out
    raise AssertionError(f"no T.writes in block {block}")


def test_tensorized_block_is_tvms_blockized_block_with_the_implementation() -> None:
    """TVM's tensorize keeps the loops, the iter vars and the regions its blockize gives and
    replaces the body by the implementation, the parameters bound to the tile's start."""
    sch = loopir.Schedule(mm(16, 16, 16))
    loops = tiled(sch)
    sch.tensorize(loops[3], "test.mm4")
    tvm = (TVM_DIR / "blockize_decomposed.txt").read_text().replace('T.sblock("C_update', 'T.sblock("C')
    ours = normalize(sch.func.script())
    theirs = normalize(tvm)
    assert _header(ours, "C_o") == _header(theirs, "C_o")
    # above the block (the loops, the decomposed init) everything is TVM's
    k = ours.index('                with T.block("C_o"):')
    assert ours[:k] == theirs[:k]
    body = [line.strip() for line in ours[k + len(_header(ours, "C_o")):]]
    v_i, v_j, v_k = (line.split(" = ")[0].strip() for line in _header(ours, "C_o")[1:4])
    assert body[0] == 'T.block_attr({"loopir.tensorized": "test.mm4"})'
    ij, kk = body[2].split()[1], body[1].split()[1]
    c = f"C[{v_i} * 4 + {ij} // 4, {v_j} * 4 + {ij} % 4]"
    a = f"A[{v_i} * 4 + {ij} // 4, {v_k} * 4 + {kk}]"
    b = f"B[{v_k} * 4 + {kk}, {v_j} * 4 + {ij} % 4]"
    assert body[3] == f"{c} = {c} + {a} * {b}"


def test_block_form_equals_loop_form() -> None:
    a = loopir.Schedule(mm(16, 16, 16))
    a.tensorize(tiled(a)[3], "test.mm4")
    b = loopir.Schedule(mm(16, 16, 16))
    block = b.blockize(tiled(b)[3])
    b.tensorize(block, "test.mm4")
    loopir.assert_structural_equal(a.func, b.func)


def test_dot4_on_a_transposed_matmul(golden) -> None:
    func = mm(6, 5, 8, b_transposed=True)
    sch = loopir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.decompose_reduction(sch.get_block("C"), k)
    _, k1 = sch.split(k, [None, 4])
    before = sch.func
    sch.tensorize(k1, "test.dot4")
    golden_pair(golden, "tensorize_dot4", before, sch.func)
    text = sch.func.script()
    # the rank-1 operands are bound to rows of the rank-2 buffers (leading index fixed)
    assert "C[v_i_o, v_j_o] = C[v_i_o, v_j_o] + A[v_i_o, v_k_o * 4] * B[v_j_o, v_k_o * 4]" in text
    check_schedule(func, sch)


@pytest.mark.parametrize("scope", ["shared", "local"])
def test_copy4_into_a_cache(scope: str) -> None:
    func = mm(8, 8, 8)
    sch = loopir.Schedule(func)
    cache = sch.cache_read(sch.get_block("C"), "A", scope)
    _, ax1 = sch.get_loops(cache)
    _, inner = sch.split(ax1, [None, 4])
    sch.tensorize(inner, "test.copy4" if scope == "shared" else "test.copy4_local")
    text = sch.func.script()
    # the 4-lane vector access of the implementation, at the tile's start
    assert f"A_{scope}[v0_o, T.Ramp(v1_o * 4, 1, 4)] = A[v0_o, T.Ramp(v1_o * 4, 1, 4)]" in text, text
    check_schedule(func, sch)


def _two_matmuls() -> loopir.PrimFunc:
    A = te.placeholder((8, 8), "float32", name="A")
    B = te.placeholder((8, 8), "float32", name="B")
    r = te.reduce_axis(8, name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.reduce_axis(8, name="s")
    D = te.compute((8, 8), lambda i, j: te.sum(C[i, s] * B[s, j], axis=s), name="D")
    return te.create_prim_func([A, B, D])


def test_two_tensorized_blocks_in_one_function() -> None:
    func = _two_matmuls()
    sch = loopir.Schedule(func)
    for name in ("C", "D"):
        i, j, k = sch.get_loops(sch.get_block(name))
        i0, i1 = sch.split(i, [None, 4])
        j0, j1 = sch.split(j, [None, 4])
        k0, k1 = sch.split(k, [None, 4])
        sch.reorder(i0, j0, k0, i1, j1, k1)
        sch.decompose_reduction(sch.get_block(name), k0)
        sch.tensorize(i1, "test.mm4")
    loopir.verify(sch.func)
    loops = [s.loop_var for s, _ in tree.walk(sch.func) if isinstance(s, loopir.ir.For)]
    assert len(loops) == len(set(loops))
    check_schedule(func, sch)


# --------------------------------------------------------------------------------------------
# Mismatches
# --------------------------------------------------------------------------------------------


def _refuses(sch: loopir.Schedule, target: object, intrin: str, *match: str) -> ScheduleError:
    before, steps = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError) as info:
        sch.tensorize(target, intrin)  # type: ignore[arg-type]
    e = info.value
    assert e.primitive == "tensorize"
    assert sch.func is before and len(sch.trace) == steps
    text = str(e)
    for m in match:
        assert m in text, text
    return e


def _marked(text: str) -> list[str]:
    """The lines of ``text`` underlined by the next line's ``^^^``."""
    lines = text.splitlines()
    return [a.strip() for a, b in zip(lines, lines[1:]) if b.strip() and set(b.strip()) == {"^"}]


def test_dtype_mismatch_names_the_dtypes() -> None:
    sch = loopir.Schedule(mm(16, 16, 16, "float16"))
    loops = tiled(sch)
    e = _refuses(sch, loops[3], "test.mm4", "dtype differs", "float16", "float32",
                 "the intrinsic's description (the differing node marked)")  # fmt: skip
    marked = _marked(str(e))
    assert marked[0] == 'with T.block("root"):'  # the description's region of C (its root lists regions)
    assert marked[1] == 'with T.block("C_o"):'  # the block in the function


def test_scope_mismatch_names_the_scopes() -> None:
    sch = loopir.Schedule(mm(8, 8, 8))
    cache = sch.cache_read(sch.get_block("C"), "A", "local")
    _, ax1 = sch.get_loops(cache)
    _, inner = sch.split(ax1, [None, 4])
    _refuses(sch, inner, "test.copy4", "scope differs", "'local'", "'shared'")


def test_extent_mismatch_names_the_extents() -> None:
    sch = loopir.Schedule(mm(16, 16, 16))
    loops = tiled(sch, t=8)
    _refuses(sch, loops[3], "test.mm4", "extent differs", "8", "4")


def test_index_pattern_mismatch_names_the_pattern() -> None:
    """B is indexed [j, k] where the description has [k, j]."""
    sch = loopir.Schedule(mm(16, 16, 16, b_transposed=True))
    loops = tiled(sch)
    e = _refuses(sch, loops[3], "test.mm4", "index pattern differs: the block accesses B[vj, vk] "
                 "relative to its tile", "the description B[vk, vj]")  # fmt: skip
    assert _marked(str(e)) == ['with T.block("update"):', 'with T.block("C"):']


def test_loop_order_mismatch() -> None:
    """k1 reordered outermost in the tile: the block's first loop feeds the reduction where
    the description's feeds i."""
    sch = loopir.Schedule(mm(16, 16, 16))
    _, _, _, i1, j1, k1 = tiled(sch)
    sch.reorder(k1, i1, j1)
    e = _refuses(sch, k1, "test.mm4", "expression differs: i_1 (standing for the description's j) "
                 "where the description has i")  # fmt: skip
    assert _marked(str(e)) == ['with T.block("update"):', 'with T.block("C"):']


def test_undecomposed_reduction_hints_at_decompose() -> None:
    sch = loopir.Schedule(mm(16, 16, 16))
    loops = tiled(sch, decompose=False)
    _refuses(sch, loops[3], "test.mm4", "reads differ", "decompose the reduction first")


def test_inexact_tile_is_refused() -> None:
    """As in TVM: a tile of an inexact split carries a predicate; blockize cannot divide it
    (tensorize needs exact tiles: pad first)."""
    sch = loopir.Schedule(mm(18, 16, 16))
    loops = tiled(sch)
    _refuses(sch, loops[3], "test.mm4", "cannot be divided", "predicate")


def test_unknown_intrinsic_lists_the_registered_ones() -> None:
    sch = loopir.Schedule(mm(16, 16, 16))
    loops = tiled(sch)
    _refuses(sch, loops[3], "no.such", "no tensor intrinsic named 'no.such'", "test.mm4")


def test_already_tensorized_block_is_refused() -> None:
    sch = loopir.Schedule(mm(16, 16, 16))
    loops = tiled(sch)
    sch.tensorize(loops[3], "test.mm4")
    _refuses(sch, sch.get_block("C_o"), "test.mm4", "already tensorized")


# --------------------------------------------------------------------------------------------
# Executing
# --------------------------------------------------------------------------------------------


def test_descriptions_compute_what_the_implementations_do() -> None:
    """``with_descriptions`` runs every tensorized block's description instead (for executors
    that cannot run an implementation's calls): the same result."""
    func = mm(16, 8, 12)
    sch = loopir.Schedule(func)
    sch.tensorize(tiled(sch)[3], "test.mm4")
    described = with_descriptions(sch.func)
    assert "with T.block(\"update\")" in described.script()
    loopir.verify(described)
    check_equivalent(func, described)
    check_equivalent(func, loopir.lower(described))


@given(
    m=st.integers(1, 3), n=st.integers(1, 3), k=st.integers(1, 3),
    extra=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
)  # fmt: skip
def test_tensorize_any_shape(m, n, k, extra) -> None:
    """Shapes in 4-tiles plus a rest: exact tiles tensorize and compute what the matmul does
    (lowered too); a rest makes the tile inexact, refused with a ScheduleError."""
    shape = (4 * m + extra[0], 4 * n + extra[1], 4 * k + extra[2])
    func = mm(*shape)
    sch = loopir.Schedule(func)
    loops = tiled(sch)
    try:
        sch.tensorize(loops[3], "test.mm4")
    except ScheduleError as e:
        assert any(extra), e
        assert "predicate" in e.message
        return
    assert not any(extra)
    check_schedule(func, sch)


def test_registry_intrinsic_parameters_match() -> None:
    for name in ("test.mm4", "test.dot4", "test.copy4"):
        intrin = tensor_intrin.get(name)
        assert [b.shape for b in intrin.desc.params] == [b.shape for b in intrin.impl.params]


@given(m=st.integers(1, 4), n=st.integers(1, 17), t=st.integers(2, 8), stages=st.integers(1, 3))
def test_muladd_tiles_of_any_size(m: int, n: int, t: int, stages: int) -> None:
    """The vector multiply-add of ``t`` lanes on ``t``-tiles of T1's rows: tensorized and
    computing what the chain does when ``t`` divides the row, refused when it does not (as
    TVM: an inexact tile has a predicate that blockize cannot divide, or, in a row shorter
    than a tile, a smaller extent)."""
    from loopir.testing.workloads import make_workload

    w = make_workload("elementwise_chain", M=m, N=n, stages=stages)
    sch = loopir.Schedule(w.func)
    _, j = sch.get_loops(sch.get_block("T1"))
    _, j1 = sch.split(j, [None, t])
    try:
        sch.tensorize(j1, f"test.muladd{t}")
    except ScheduleError as e:
        assert n % t, e
        assert "predicate" in e.message if n > t else "extent differs" in e.message, e
        return
    assert n % t == 0
    assert f"T.Ramp(v_j_o * {t}, 1, {t})" in sch.func.script() or n == t
    check_schedule(w.func, sch)


def test_tvm_keyword_forms() -> None:
    """A TVM trace passes every argument by keyword: ``blockize(target=...)``,
    ``tensorize(block_or_loop=..., tensor_intrin=...)``."""
    func = mm(16, 16, 16)
    sch = loopir.Schedule(func)
    loops = tiled(sch)
    block = sch.blockize(target=loops[3], preserve_unit_iters=True)
    sch.tensorize(block_or_loop=block, tensor_intrin="test.mm4", preserve_unit_iters=True)
    assert sch.get(block).annotations[TENSORIZED] == "test.mm4"
    check_schedule(func, sch)


def test_unit_tile_has_no_iter_var_to_match() -> None:
    """As TVM: blockize gives an inner block no iter var for a unit tile (its extent-1 iter
    var is dropped), so a description with one does not match."""
    from loopir.testing.workloads import make_workload

    w = make_workload("elementwise_chain", M=2, N=3, stages=1)
    sch = loopir.Schedule(w.func)
    _, j = sch.get_loops(sch.get_block("T1"))
    _, j1 = sch.split(j, [None, 1])
    _refuses(sch, j1, "test.muladd1", "iter vars differ: block 'T1' has 0")


def test_implementation_with_its_own_scratch_buffer() -> None:
    """An implementation whose root block allocates a scratch buffer: each tensorized block
    gets its own copy of it, which the implementation's body uses."""
    from loopir.ir import Buffer, BufferStore, For, ForKind, Var
    from loopir.testing.intrinsics import copy4, root, tile

    desc, _ = copy4("shared")
    src, dst = (Buffer(b.name, b.shape, b.dtype, b.scope) for b in desc.params)
    tmp = Buffer("tmp", (4,), "float32", "local")
    v, w = Var("v"), Var("w")
    body = loopir.ir.seq(
        For(v, 0, 4, ForKind.SERIAL, BufferStore(tmp, src[v] * 1.0, (v,))),
        For(w, 0, 4, ForKind.SERIAL, BufferStore(dst, tmp[w], (w,))),
    )
    blk = root(body, [tile(src)], [tile(dst)])
    impl = loopir.PrimFunc((src, dst), attrs.evolve(blk, block=attrs.evolve(blk.block, alloc_buffers=(tmp,))))
    tensor_intrin.register("test.copy4_via_tmp", desc, impl, override=True)
    func = mm(8, 4, 8)
    sch = loopir.Schedule(func)
    for buf in ("A", "B"):
        cache = sch.cache_read(sch.get_block("C"), buf, "shared")
        _, inner = sch.get_loops(cache)
        _, inner = sch.split(inner, [None, 4])
        sch.tensorize(inner, "test.copy4_via_tmp")
    loopir.verify(sch.func)
    allocated = [b for s, _ in tree.walk(sch.func) if isinstance(s, loopir.ir.Block) for b in s.alloc_buffers if b.name.startswith("tmp")]
    assert len(allocated) == 2 and allocated[0] is not allocated[1]
    check_schedule(func, sch)
