"""Write TVM 0.27's LowerCrossThreadReduction output for the cases of
tests/passes/test_cross_thread_tvm.py into tests/golden/passes/tvm/ (a reference, not a test:
it needs TVM, which the test suite does not)::

    /path/to/tvm-venv/bin/python tests/passes/_tvm_cross_thread_reference.py tests/golden/passes/tvm
"""

import sys

import tvm
from tvm import s_tir, te


def func(rows, n):
    A = te.placeholder((rows, n), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


def k_outside(sch):  # issue 29: k_0 serial outside the threadIdx.x loop
    i, k = sch.get_loops(sch.get_sblock("S"))
    k0, k1 = sch.split(k, [None, 64])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")


def three_way(sch):
    i, k = sch.get_loops(sch.get_sblock("S"))
    k0, k1, k2 = sch.split(k, [None, 32, 4])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")


def y_reduce(sch):
    i, k = sch.get_loops(sch.get_sblock("S"))
    k0, k1 = sch.split(k, [None, 16])
    sch.reorder(k1, k0)
    sch.reorder(i, k1)
    sch.bind(i, "threadIdx.x")
    sch.bind(k1, "threadIdx.y")


def xy_reduce(sch):
    i, k = sch.get_loops(sch.get_sblock("S"))
    k0, k1, k2 = sch.split(k, [None, 4, 8])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.y")
    sch.bind(k2, "threadIdx.x")


CASES = {
    "k_outside": (4, 1000, k_outside),
    "three_way": (4, 1000, three_way),
    "y_reduce": (8, 100, y_reduce),
    "xy_reduce": (8, 100, xy_reduce),
}
out = sys.argv[1]
for name, (rows, n, sched) in CASES.items():
    sch = s_tir.Schedule(func(rows, n))
    sched(sch)
    mod = s_tir.transform.LowerCrossThreadReduction()(sch.mod)
    text = mod["main"].script()
    head = f"# TVM {tvm.__version__}: LowerCrossThreadReduction (tests/passes/_tvm_cross_thread_reference.py)\n"
    with open(f"{out}/cross_thread_{name}.txt", "w") as f:
        f.write(head + text.rstrip("\n") + "\n")
