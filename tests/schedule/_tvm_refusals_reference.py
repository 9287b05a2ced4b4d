"""Write TVM 0.27's IR for the schedules of tests/schedule/tvm_refusal_cases.py into
tests/golden/schedule/tvm/ (a reference, not a test: it needs TVM, which the test suite does
not)::

    /work/tvm-venv/bin/python tests/schedule/_tvm_refusals_reference.py tests/golden/schedule/tvm

Each file holds TVM's function after the schedule; for the TVM_WRONG cases the header also says
that TVM's result differs from the unscheduled function (checked here on llvm).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from _tvm_differential import run_tvm, tvm_workload  # noqa: E402
from tvm import s_tir  # noqa: E402
from tvm_refusal_cases import CASES, TVM_WRONG  # noqa: E402


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    for wrong, cases in ((False, CASES), (True, TVM_WRONG)):
        for name, (workload, args, schedule) in cases.items():
            func, sizes = tvm_workload(workload, args)
            expected = run_tvm(func, sizes)[-1]
            sch = s_tir.Schedule(func)
            schedule(sch)
            got = run_tvm(sch.mod["main"], sizes)[-1]
            right = bool(np.allclose(got, expected, rtol=1e-4, atol=1e-4))
            if right == wrong:
                raise SystemExit(f"{name}: TVM's result is {'right' if right else 'wrong'}")
            head = f"# TVM {tvm.__version__}: {name} (tests/schedule/_tvm_refusals_reference.py)"
            if wrong:
                head += "\n# TVM's result differs from the unscheduled function (llvm)"
            with open(os.path.join(out, f"{name}.txt"), "w") as f:
                f.write(head + "\n" + sch.mod["main"].script() + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
