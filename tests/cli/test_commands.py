"""``python -m loopir show`` and ``bench``, and the argument parsing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import loopir
from loopir.cli import _shape, main
from loopir.cli.bench import BenchError, find_benchmarks_dir, list_scripts
from loopir.cli.show import ShowError, load_workload

ROOT = Path(__file__).resolve().parents[2]


def _file(tmp_path: Path, text: str, name: str = "work.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


FUNC_AND_TRACE = """
import loopir
func = loopir.examples.dense_func(60, 50, 70)
""" + loopir.examples.dense(60, 50, 70).trace.as_python()


def test_show_func_with_apply_trace_lowered_padded_cuda_json(tmp_path, capsys) -> None:
    path = _file(tmp_path, FUNC_AND_TRACE)
    assert main(["--color", "never", "show", str(path), "--lower", "--local-pad", "--cuda", "--json"]) == 0
    out = capsys.readouterr().out
    assert "main: the scheduled function" in out
    assert "trace (29 instructions)" in out and 'sch.bind(l17, "blockIdx.x")' in out
    assert '"version": 1' in out
    assert "lowered (tir.enable_local_pad=True)" in out and "T.Select(" in out
    assert "__global__" in out and "__syncthreads();" in out
    # the shown function is the one the trace builds
    sch = load_workload(path)
    loopir.assert_structural_equal(sch.func, loopir.examples.dense(60, 50, 70).func)


def test_show_schedule_variable_function_and_name(tmp_path, capsys) -> None:
    path = _file(tmp_path, """
        import loopir

        def schedule():
            return loopir.examples.dense(16, 8, 24)

        sch = None  # 'schedule' comes first
        other = loopir.examples.dense_func(4, 4, 4)
    """)
    work = load_workload(path)
    assert isinstance(work, loopir.Schedule) and len(work.trace) == 29
    assert isinstance(load_workload(path, "other"), loopir.PrimFunc)
    assert main(["show", str(path), "--name", "other", "--no-trace"]) == 0
    out = capsys.readouterr().out
    assert "main: the function" in out and "trace" not in out


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("x = 1\n", None, "defines none of schedule, sch, func"),
        ("func = 3\n", None, "func must be a loopir.Schedule or loopir.PrimFunc"),
        ("def func(n):\n    return n\n", None, "it must take no arguments"),
        ("raise ValueError('bad workload')\n", None, "raised ValueError: bad workload"),
        ("func = None\n", "missing", "defines no 'missing'"),
    ],
)
def test_show_errors_are_clear(tmp_path, capsys, text, name, message) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ShowError, match=message):
        load_workload(path, name)
    args = ["show", str(path)] + (["--name", name] if name else [])
    assert main(args) == 1
    assert message in capsys.readouterr().err


def test_show_missing_file(tmp_path, capsys) -> None:
    assert main(["show", str(tmp_path / "nope.py")]) == 1
    assert "show: no such file" in capsys.readouterr().err


def test_bench_lists_and_runs_scripts(tmp_path, capsys) -> None:
    scripts = list_scripts(find_benchmarks_dir(ROOT / "benchmarks"))
    assert "dense" in scripts and "gemm_schedules" not in scripts  # a helper, not a script
    _file(tmp_path, '''
        """Echo the arguments into a file."""
        import sys
        from pathlib import Path

        if __name__ == "__main__":
            Path(sys.argv[1]).write_text(" ".join(sys.argv[2:]))
            sys.exit(3)
    ''', "echo.py")
    _file(tmp_path, "x = 1\n", "helper.py")
    assert main(["bench", "--dir", str(tmp_path), "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == ["echo         Echo the arguments into a file."]
    out_file = tmp_path / "args.txt"
    assert main(["bench", "--dir", str(tmp_path), "echo", str(out_file), "--repeat", "5"]) == 3
    assert out_file.read_text() == "--repeat 5"
    assert main(["bench", "--dir", str(tmp_path), "nope"]) == 1
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
    with pytest.raises(BenchError, match="no benchmarks folder"):
        find_benchmarks_dir(tmp_path / "missing")


def test_bench_script_missing_a_package_says_so_without_a_traceback(tmp_path) -> None:
    # `bench dense` without torch used to end in a raw ModuleNotFoundError traceback.
    _file(tmp_path, '''
        """Needs a package that is not installed."""
        import sys
        from helper import VALUE  # the script's own folder is importable, as with `python x.py`

        if __name__ == "__main__":
            assert VALUE == 1 and sys.argv[1:] == ["--fast"]
            import loopir_no_such_package_xyz  # noqa: F401
    ''', "needy.py")
    _file(tmp_path, "VALUE = 1\n", "helper.py")
    proc = subprocess.run([sys.executable, "-m", "loopir", "bench", "--dir", str(tmp_path), "needy",
                           "--fast"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "bench needy: this benchmark needs the Python package 'loopir_no_such_package_xyz'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_quick_bench_on_the_cpu(capsys) -> None:
    assert main(["--color", "never", "bench", "--shape", "16x16x16", "--cpu"]) == 0
    out = capsys.readouterr().out
    assert "CPU reference executor, 16 x 16 x 16 float32" in out
    assert "dense schedule, lowered" in out
    assert "skipped the GPU benchmark: --cpu was given" in out


def test_shapes_and_usage(capsys) -> None:
    assert _shape("960x770x2304") == (960, 770, 2304)
    assert _shape("1,2,3") == (1, 2, 3)
    for bad in ("1x2", "0x1x1", "axbxc"):
        with pytest.raises(Exception, match="expected a shape M x K x N"):
            _shape(bad)
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--shape", "12x3"])
    assert exc.value.code == 2
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_module_entry_point_and_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "loopir", "--version"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == f"loopir {loopir.__version__}"


def test_a_closed_pipe_ends_the_demo_quietly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "loopir", "demo", "--small", "--no-cutlass", "--cpu"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # like `python -m loopir demo | head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert first.startswith("loopir demo")
    assert "Traceback" not in err


def test_show_prefers_the_files_own_sch_over_an_imported_schedule(tmp_path) -> None:
    path = _file(tmp_path, """
        import loopir
        from loopir.examples.dense import dense as schedule  # imported, not the file's

        sch = loopir.Schedule(loopir.examples.dense_func(8, 8, 8))
    """)
    work = load_workload(path)
    assert isinstance(work, loopir.Schedule) and len(work.trace) == 0, "took the imported function"


def test_show_local_pad_alone_shows_the_padded_lowered_ir(tmp_path, capsys) -> None:
    path = _file(tmp_path, FUNC_AND_TRACE)
    assert main(["--color", "never", "show", str(path), "--no-trace"]) == 0
    plain = capsys.readouterr().out
    assert "lowered" not in plain
    assert main(["--color", "never", "show", str(path), "--no-trace", "--local-pad"]) == 0
    out = capsys.readouterr().out
    assert "lowered (tir.enable_local_pad=True)" in out and "T.Select(" in out
