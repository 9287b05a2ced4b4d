"""Write TVM 0.27's IR for the blockize cases of tests/schedule/test_blockize_tvm.py into
tests/golden/schedule/tvm/ (a reference, not a test: it needs TVM, which the test suite does
not)::

    /path/to/tvm-venv/bin/python tests/schedule/_tvm_blockize_reference.py tests/golden/schedule/tvm

Each case is written the same way in both files (``get_sblock`` here, ``get_block`` there). A
case TVM refuses is written as ``# ScheduleError`` and the error's last line.
"""

import sys

import tvm
from tvm import s_tir, te


def ew(m=64, n=32):
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    return te.create_prim_func([A, B])


def mm(m=32, n=32, k=32):
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def chain(m=16, n=8):
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def spatial(sch):
    i, j = sch.get_loops(sch.get_sblock("B"))
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, i1, j1)
    sch.blockize(i1)


def tiled_mm(pui):
    def f(sch):
        i, j, k = sch.get_loops(sch.get_sblock("C"))
        i0, i1 = sch.split(i, [None, 16])
        j0, j1 = sch.split(j, [None, 16])
        k0, k1 = sch.split(k, [None, 16])
        sch.reorder(i0, j0, k0, i1, j1, k1)
        sch.blockize(i1, preserve_unit_iters=pui)
    return f


def unit_loop(block, which, pui):
    def f(sch):
        loops = sch.get_loops(sch.get_sblock(block))
        sch.blockize(loops[which], preserve_unit_iters=pui)
    return f


def inexact(which):
    def f(sch):
        i, j = sch.get_loops(sch.get_sblock("B"))
        i0, i1 = sch.split(i, [None, 10])
        sch.blockize({"j": j, "i0": i0, "i1": i1}[which])
    return f


def k_outer(sch):
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    sch.reorder(k, i, j)
    sch.blockize(i)


def decomposed(sch):
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 4])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.decompose_reduction(sch.get_sblock("C"), k0)
    sch.blockize(i1)


def two_blocks(sch):
    i, j = sch.get_loops(sch.get_sblock("C"))
    sch.compute_at(sch.get_sblock("B"), i)
    sch.blockize([sch.get_sblock("B"), sch.get_sblock("C")])


def fused(sch):
    i, j = sch.get_loops(sch.get_sblock("B"))
    f = sch.fuse(i, j)
    _, f1 = sch.split(f, [None, 64])
    sch.blockize(f1)


def reordered(sch):
    i, j = sch.get_loops(sch.get_sblock("B"))
    i0, i1 = sch.split(i, [None, 16])
    sch.reorder(i1, j)
    sch.reorder(i1, i0)
    sch.blockize(i0)


def middle(sch):
    i, j = sch.get_loops(sch.get_sblock("B"))
    i0, i1, i2 = sch.split(i, [4, 4, 4])
    sch.reorder(i1, j, i0, i2)
    sch.blockize(i0)


CASES = {
    "spatial": (ew, spatial),
    "reduction": (mm, tiled_mm(True)),
    "reduction_no_unit_iters": (mm, tiled_mm(False)),
    "unit_outer": (lambda: mm(1, 32, 8), unit_loop("C", 1, True)),
    "unit_outer_no_unit_iters": (lambda: mm(1, 32, 8), unit_loop("C", 1, False)),
    "unit_inner": (lambda: ew(1, 32), unit_loop("B", 0, True)),
    "unit_inner_no_unit_iters": (lambda: ew(1, 32), unit_loop("B", 0, False)),
    "inexact_outer_predicate": (ew, inexact("j")),
    "inexact_inner_predicate": (ew, inexact("i0")),
    "reduce_loop_outside": (lambda: mm(8, 8, 8), k_outer),
    "decomposed": (lambda: mm(16, 16, 16), decomposed),
    "two_blocks": (chain, two_blocks),
    "error_fused": (ew, fused),
    "error_inexact_mixed_predicate": (ew, inexact("i1")),
    "error_reordered": (ew, reordered),
    "error_middle_outer": (ew, middle),
}

if __name__ == "__main__":
    out = sys.argv[1]
    for name, (make, schedule) in CASES.items():
        sch = s_tir.Schedule(make())
        head = f"# TVM {tvm.__version__}: blockize case {name!r} (tests/schedule/_tvm_blockize_reference.py)\n"
        try:
            schedule(sch)
            text = sch.mod["main"].script()
        except s_tir.ScheduleError as e:
            text = "# ScheduleError\n" + str(e).strip().splitlines()[-1]
        with open(f"{out}/blockize_{name}.txt", "w") as f:
            f.write(head + text.rstrip("\n") + "\n")
