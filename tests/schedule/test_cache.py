"""cache_read / cache_write: golden IR, placement, naming, equivalence and error cases."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from loopir.ir.stmt import BufferStore
from loopir.schedule import cache
from loopir.schedule import compute_at as CA
from tests.schedule.dm_util import (
    assert_equivalent,
    block_of,
    block_order,
    chain,
    conv2d_nhwc,
    extents,
    golden_pair,
    matmul,
    matmul_bias_relu,
    realize_of,
)


def _root_allocs(func) -> list[tuple[str, str]]:
    return [(b.name, b.scope) for b in func.body.block.alloc_buffers]


# --- cache_read -----------------------------------------------------------------------------


def test_cache_read_golden(golden) -> None:
    f = matmul(16, 8, 12)
    g, name = cache.cache_read(f, "C", "A", "shared")
    assert name == "A_shared"
    assert block_order(g) == ["A_shared", "C"]
    assert ("A_shared", "shared") in _root_allocs(g)
    # the copy covers the whole buffer with its own loops
    assert extents(g, "A_shared") == [16, 8]
    c = block_of(g, "C")
    assert [r.buffer.name for r in c.reads] == ["A_shared", "B"]
    golden_pair(golden, "cache_read_shared", f, g)


def test_cache_read_by_index_and_scopes() -> None:
    f = matmul(8, 4, 6)
    for scope in ("global", "shared", "local"):
        g, name = cache.cache_read(f, "C", 1, scope)
        assert name == f"B_{scope}"
        buf = block_of(g, name).writes[0].buffer
        assert buf.scope == scope and buf.name == name
        assert [r.buffer.name for r in block_of(g, "C").reads] == ["A", name]
        assert_equivalent(f, g)


def test_cache_read_unique_names() -> None:
    f = matmul(8, 4, 6)
    g, n1 = cache.cache_read(f, "C", "A", "shared")
    g2, n2 = cache.cache_read(g, "C", "A_shared", "shared")
    assert (n1, n2) == ("A_shared", "A_shared_shared")
    g3, n3 = cache.cache_read(f, "C", "B", "shared")
    g3, n4 = cache.cache_read(g3, "C", "A", "shared")
    assert (n3, n4) == ("B_shared", "A_shared")
    # a second cache of the same source in the same scope for another consumer
    h = chain(8, 4)
    h, m1 = cache.cache_read(h, "D", "C", "local")
    assert m1 == "C_local"
    h, m2 = cache.cache_read(cache.cache_write(h, "C", "C", "shared")[0], "C_shared", "C_shared",
                             "local")
    assert m2 == "C_shared_local"
    assert_equivalent(chain(8, 4), h)


def test_cache_read_consumer_subset_and_placement() -> None:
    f = chain(8, 4)
    # C is read by D only; B is read by C only -> placement right before the first consumer
    g, name = cache.cache_read(f, "C", "B", "local")
    assert block_order(g) == ["B", "B_local", "C", "D"]
    g2, n2 = cache.cache_read(f, "D", "C", "shared", consumer_blocks=["D"])
    assert block_order(g2) == ["B", "C", "C_shared", "D"]
    assert_equivalent(f, g)
    assert_equivalent(f, g2)


def test_cache_read_multiple_consumers_default_all() -> None:
    f = matmul_bias_relu(8, 4, 6)
    # bias is read only by D; A by C; redirect both consumers of a shared buffer
    g, name = cache.cache_read(f, "D", "bias", "global")
    d = block_of(g, "D")
    assert any(r.buffer.name == "bias_global" for r in d.reads)
    assert block_order(g).index("bias_global") < block_order(g).index("D")
    assert_equivalent(f, g)


def test_cache_read_loads_are_redirected() -> None:
    g, _ = cache.cache_read(matmul(8, 4, 6), "C", "A", "shared")
    body = block_of(g, "C").body
    assert isinstance(body, BufferStore)
    assert "A_shared[" in str(body.value) and "A[" not in str(body.value).replace("A_shared[", "")


@given(
    m=st.integers(1, 12), k=st.integers(1, 9), n=st.integers(1, 12),
    scope=st.sampled_from(["global", "shared", "local"]), which=st.sampled_from(["A", "B"]),
)
def test_cache_read_equivalence_matmul(m: int, k: int, n: int, scope: str, which: str) -> None:
    f = matmul(m, k, n)
    g, _ = cache.cache_read(f, "C", which, scope)
    assert_equivalent(f, g)


def test_cache_read_conv2d_equivalence() -> None:
    f = conv2d_nhwc()
    g, name = cache.cache_read(f, "Y", "P", "shared")
    g, wname = cache.cache_read(g, "Y", "W", "local")
    assert block_order(g) == ["P", "P_shared", "W_local", "Y"]
    assert_equivalent(f, g)


# --- cache_write ----------------------------------------------------------------------------


def test_cache_write_golden(golden) -> None:
    f = matmul(16, 8, 12)
    g, name = cache.cache_write(f, "C", "C", "local")
    assert name == "C_local"
    assert block_order(g) == ["C", "C_local"]
    c = block_of(g, "C")
    assert [w.buffer.name for w in c.writes] == ["C_local"]
    assert c.init is not None and "C_local[" in str(c.init)
    wb = block_of(g, "C_local")
    assert [r.buffer.name for r in wb.reads] == ["C_local"]
    assert [w.buffer.name for w in wb.writes] == ["C"]
    golden_pair(golden, "cache_write_local", f, g)
    assert_equivalent(f, g)


def test_cache_write_intermediate_placed_before_consumers() -> None:
    f = chain(8, 4)
    g, name = cache.cache_write(f, "C", 0, "shared")
    assert block_order(g) == ["B", "C", "C_shared", "D"]
    # D still reads the real C, written back before it
    assert [r.buffer.name for r in block_of(g, "D").reads] == ["C"]
    assert_equivalent(f, g)


@given(
    m=st.integers(1, 10), k=st.integers(1, 7), n=st.integers(1, 10),
    scope=st.sampled_from(["global", "shared", "local"]),
)
def test_cache_write_equivalence(m: int, k: int, n: int, scope: str) -> None:
    f = matmul_bias_relu(m, k, n)
    g, _ = cache.cache_write(f, "C", "C", scope)
    g, _ = cache.cache_write(g, "E", "E", scope)
    assert_equivalent(f, g)


def test_cache_write_then_compute_at_sibling_position() -> None:
    """A write-back inserted where writer and reader share a loop nest goes between them."""
    f = chain(8, 4)
    c_i = realize_of(f, "D")[1]
    d_loop = [a for a in c_i if hasattr(a, "loop_var")][0].loop_var
    g = CA.compute_at(f, "C", d_loop)
    g, name = cache.cache_write(g, "C", "C", "local")
    assert block_order(g) == ["B", "C", "C_local", "D"]
    assert_equivalent(f, g)


# --- errors ---------------------------------------------------------------------------------


def test_cache_errors() -> None:
    f = matmul(8, 4, 6)
    with pytest.raises(ScheduleError, match=r"cache_read: invalid storage scope 'texture'"):
        cache.cache_read(f, "C", "A", "texture")
    # "warp" is a scope since the tensor-core fragments (issue 31); TVM's wmma scopes are not
    with pytest.raises(ScheduleError, match=r"invalid storage scope 'wmma.accumulator'"):
        cache.cache_write(f, "C", "C", "wmma.accumulator")
    with pytest.raises(ScheduleError, match=r"no buffer named 'Z' in its reads \(A, B\)"):
        cache.cache_read(f, "C", "Z", "shared")
    with pytest.raises(ScheduleError, match=r"buffer index 2 is out of range"):
        cache.cache_read(f, "C", 2, "shared")
    with pytest.raises(ScheduleError, match=r"no buffer named 'A' in its writes \(C\)"):
        cache.cache_write(f, "C", "A", "local")
    with pytest.raises(ScheduleError, match=r"no block named 'X'"):
        cache.cache_read(f, "X", "A", "shared")
    with pytest.raises(
        ScheduleError, match=r"must be a name, an index into the block's reads or a Buffer, got float 1.5"
    ):
        cache.cache_read(f, "C", 1.5, "shared")  # type: ignore[arg-type]
    h = chain(8, 4)
    with pytest.raises(ScheduleError, match=r"consumer block 'D' does not read buffer 'B'"):
        cache.cache_read(h, "C", "B", "shared", consumer_blocks=["D"])
    with pytest.raises(ScheduleError, match=r"consumer_blocks must be a list of block names"):
        cache.cache_read(h, "C", "B", "shared", consumer_blocks="C")  # type: ignore[arg-type]


def test_cache_error_str_marks_ir() -> None:
    f = matmul(8, 4, 6)
    with pytest.raises(ScheduleError) as info:
        cache.cache_read(f, "C", "Q", "shared")
    text = str(info.value)
    assert text.startswith("cache_read: ")
    assert "T.block(\"C\")" in text  # the IR is shown


# --- the buffer given as a Buffer object (TVM accepts a buffer or its index) ----------------


def test_cache_read_and_write_accept_the_buffer_object() -> None:
    f = matmul(8, 4, 6)
    a, b, c = f.params
    for scope in ("shared", "local"):
        by_obj, name = cache.cache_read(f, "C", b, scope)
        by_name, name2 = cache.cache_read(f, "C", "B", scope)
        assert name == name2 == f"B_{scope}"
        loopir.assert_structural_equal(by_obj, by_name)
    by_obj, name = cache.cache_write(f, "C", c, "local")
    loopir.assert_structural_equal(by_obj, cache.cache_write(f, "C", "C", "local")[0])
    assert name == "C_local"
    assert_equivalent(f, by_obj)


def test_cache_read_accepts_a_te_tensor() -> None:
    A = te.placeholder((8, 4), "float32", name="A")
    B = te.placeholder((4, 6), "float32", name="B")
    r = te.reduce_axis(4, name="k")
    C = te.compute((8, 6), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    f = te.create_prim_func([A, B, C])
    g, name = cache.cache_read(f, "C", A, "shared")
    assert name == "A_shared"
    loopir.assert_structural_equal(g, cache.cache_read(f, "C", "A", "shared")[0])
    assert cache.cache_write(f, "C", C, "local")[1] == "C_local"


def test_cache_refuses_a_buffer_the_block_does_not_access() -> None:
    f = matmul(8, 4, 6)
    a, _, c = f.params
    with pytest.raises(ScheduleError, match=r"^cache_read: block 'C' does not have buffer 'C' "
                       r"in its reads \(A, B\)"):  # fmt: skip
        cache.cache_read(f, "C", c, "shared")
    with pytest.raises(ScheduleError, match=r"^cache_write: block 'C' does not have buffer 'A' "
                       r"in its writes \(C\)"):  # fmt: skip
        cache.cache_write(f, "C", a, "local")
    # Buffers compare by identity: another workload's "A" is not this function's A
    other = matmul(8, 4, 6).params[0]
    with pytest.raises(ScheduleError, match=r"a different Buffer of the same name"):
        cache.cache_read(f, "C", other, "shared")


def test_buffer_index_for_the_trace() -> None:
    f = matmul(8, 4, 6)
    a, b, c = f.params
    assert cache.buffer_index(f, "C", b, "cache_read") == 1
    assert cache.buffer_index(f, "C", a, "cache_read") == 0
    assert cache.buffer_index(f, "C", c, "cache_write") == 0
    assert cache.buffer_index(f, "C", "B", "cache_read") == "B"  # names and indices are kept
    assert cache.buffer_index(f, "C", 1, "cache_read") == 1
    with pytest.raises(ScheduleError, match=r"cache_write: block 'C' does not have buffer 'B'"):
        cache.buffer_index(f, "C", b, "cache_write")


def test_schedule_cache_read_with_a_buffer_records_its_index() -> None:
    f = matmul(8, 4, 6)
    sch = loopir.Schedule(f)
    blk = sch.get_block("C")
    sch.cache_read(blk, f.params[0], "shared")
    sch.cache_write(blk, f.params[2], "local")
    ref = loopir.Schedule(f)
    rblk = ref.get_block("C")
    ref.cache_read(rblk, 0, "shared")
    ref.cache_write(rblk, 0, "local")
    loopir.assert_structural_equal(sch.func, ref.func)
    assert sch.trace.as_json() == ref.trace.as_json()  # the trace holds the index, a literal
    with pytest.raises(ScheduleError, match=r"does not have buffer 'B' in its writes"):
        sch.cache_write(blk, f.params[1], "local")


def test_cache_read_inside_a_nested_block() -> None:
    """Producer and consumer inside one outer block (a tile's stages, as in
    ``examples.attention``): the copy goes inside that block, under the loop that produces what
    it copies (each iteration copies its own tile, shrunk to it by compute_at)."""
    from loopir.script import from_source
    from loopir.testing import check_equivalent

    func = from_source('''
def f(A: T.Buffer((4, 8, 16), "float32"), C: T.Buffer((4, 8, 16), "float32")):
    for t in range(4):
        with T.block("tile"):
            vt = T.axis.spatial(4, t)
            B = T.alloc_buffer((16,), "float32")
            for j0 in range(8):
                for i in range(16):
                    with T.block("load"):
                        vj, vi = T.axis.remap("SS", [j0, i])
                        B[vi] = A[vt, vj, vi] * T.float32(2)
                for i in range(16):
                    with T.block("use"):
                        vj, vi = T.axis.remap("SS", [j0, i])
                        C[vt, vj, vi] = B[vi] + T.float32(1)
''')
    loopir.verify(func)
    sch = loopir.Schedule(func)
    use = sch.get_block("use")
    cache = sch.cache_read(use, 0, "local")
    loops = sch.get_loops(cache)
    assert [sch.get(lp).loop_var.name for lp in loops][0] == "j0" and len(loops) == 2
    text = sch.func.script()
    tile = text.index('T.block("tile")')
    assert tile < text.index('T.block("load")') < text.index('T.block("B_local")') < text.index('T.block("use")')
    loopir.verify(sch.func)
    check_equivalent(func, sch.func)
