"""``python -m loopir bench``: a quick built-in benchmark, or one of the ``benchmarks/`` scripts.

- ``bench`` alone: the CPU reference executor on a te matmul and the lowered dense schedule
  (``loopir.runtime.bench``), and on a GPU the dense schedule with local padding off/on
  against cuBLAS.
- ``bench --list``: the scripts in ``benchmarks/``.
- ``bench NAME [ARGS...]``: run ``benchmarks/NAME.py ARGS...`` (with this Python) and return
  its exit status; those scripts need a GPU and write their results as JSON.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from loopir.cli.env import probe_gpu
from loopir.cli.term import Console
from loopir.errors import LoopIRError

__all__ = ["BenchError", "find_benchmarks_dir", "list_scripts", "quick_bench", "run_script"]


class BenchError(LoopIRError):
    """A benchmark script cannot be found."""


def find_benchmarks_dir(explicit: str | Path | None = None) -> Path:
    """The ``benchmarks/`` folder: ``explicit``, else ``./benchmarks``, else the one next to
    the loopir package (an editable install of the repository).

    Raises
    ------
    BenchError
        If none of them exists.
    """
    import loopir

    cands = [Path(explicit)] if explicit is not None else [
        Path.cwd() / "benchmarks",
        Path(loopir.__file__).resolve().parents[1] / "benchmarks",
    ]
    for c in cands:
        if c.is_dir():
            return c
    raise BenchError(
        f"bench: no benchmarks folder (looked in {', '.join(str(c) for c in cands)}); run from "
        "the repository root or pass --dir"
    )


def list_scripts(folder: Path) -> dict[str, str]:
    """``{name: first line of the module docstring}`` of the runnable scripts in ``folder``
    (those with an ``if __name__ == "__main__"`` guard)."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "__main__" not in text:
            continue  # a helper module, not a benchmark
        try:
            doc = ast.get_docstring(ast.parse(text)) or ""
        except SyntaxError:
            doc = "(does not parse)"
        out[path.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return out


def run_script(con: Console, name: str, args: Sequence[str], folder: Path) -> int:
    """Run ``folder/name.py args`` in a child Python; returns its exit status."""
    scripts = list_scripts(folder)
    stem = name.removesuffix(".py")
    if stem not in scripts:
        raise BenchError(
            f"bench: unknown benchmark {name!r} in {folder}; available: {', '.join(scripts) or 'none'}"
        )
    script = str(folder / f"{stem}.py")
    con.write(f"$ {' '.join([sys.executable, script, *args])}", "dim")
    return subprocess.call([sys.executable, "-c", _RUNNER, script, *args])


# Runs a benchmark script as ``python SCRIPT ARGS`` would, except that a missing optional
# package (PyTorch for the GPU comparisons) ends in one clear line instead of a traceback.
# Scripts import such packages lazily, on the paths that need them, so this cannot be checked
# before running. Exit status 2, like a usage error.
_RUNNER = """\
import os, runpy, sys
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
try:
    runpy.run_path(script, run_name="__main__")
except ModuleNotFoundError as exc:
    top = (exc.name or "").split(".")[0]
    if not top or top == "loopir":
        raise
    hint = {"torch": "PyTorch (pip install torch)", "pycuda": "pycuda (pip install -e '.[cuda]')"}
    name = os.path.splitext(os.path.basename(script))[0]
    print(f"bench {name}: this benchmark needs the Python package {top!r}, which is not "
          f"installed: install {hint.get(top, top)}", file=sys.stderr)
    sys.exit(2)
"""


def quick_bench(con: Console, cpu_shape: tuple[int, int, int], gpu_shape: tuple[int, int, int],
                force_cpu: bool = False) -> int:  # fmt: skip
    """The built-in benchmark (see the module doc); returns the exit status."""
    from loopir.runtime.bench import run as cpu_run

    M, K, N = cpu_shape
    con.heading(f"CPU reference executor, {M} x {K} x {N} float32")
    with con.progress("codegen + gcc + timed runs"):
        rows = cpu_run(M, K, N)
    table = [
        [str(r["what"]), str(r["check_bounds"]), f"{r['compile_s']:.3f}", f"{r['run_s']:.4f}",
         f"{r['max_rel_err']:.1e}"]
        for r in rows
    ]  # fmt: skip
    con.table(["function", "check_bounds", "compile s", "run s (median)", "max rel. error"], table)
    bad = [r["what"] for r in rows if not float(r["max_rel_err"]) < 1e-4]
    has_gpu, gpu = probe_gpu()
    if force_cpu:
        has_gpu, gpu = False, "--cpu was given"
    con.heading(f"GPU, dense schedule {' x '.join(map(str, gpu_shape))}")
    if not has_gpu:
        con.note(f"  skipped the GPU benchmark: {gpu}")
    else:
        from loopir.cli.gpu import compare_dense
        from loopir.examples import dense

        con.write(f"  GPU: {gpu}")
        gpu_rows, ok, notes = compare_dense(con, dense(*gpu_shape), gpu_shape)
        con.table(["variant", "ms", "TFLOP/s", "rel. error", "check"], gpu_rows)
        for n in notes:
            con.note(f"  skipped {n}")
        if not ok:
            bad.append("GPU dense")
    if bad:
        con.fail(f"  wrong results: {', '.join(map(str, bad))}")
        return 1
    return 0
