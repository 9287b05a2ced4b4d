"""benchmarks/compile_time.py keeps working: one tiny case end to end, and its target checks.

No timing is asserted (the numbers depend on the machine); the run checks that every phase
ran, that the table, the checks and the JSON are written, and that a TVM interpreter that
cannot run the comparison is reported and skipped rather than failing the script.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.benchmarks import BENCHMARKS, load_script

SCRIPT = BENCHMARKS / "compile_time.py"


def _module() -> Any:
    return load_script("compile_time")


def test_one_tiny_case_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "ct.json"
    missing = tmp_path / "no-venv" / "python"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "smoke", "--repeat", "1", "--json", str(out), "--tvm", str(missing)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| case | schedule ms | lower ms | emit ms | total ms |" in proc.stdout
    assert "| smoke/elementwise_chain/64x32 |" in proc.stdout
    assert "lower + emit <= 150 ms per case:" in proc.stdout
    assert f"skipped: no Python at {missing}" in proc.stdout
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert row["case"] == "smoke/elementwise_chain/64x32" and row["repeat"] == 1
    for key in ("schedule_ms", "lower_ms", "emit_ms", "total_ms"):
        assert row[key] > 0
    assert row["total_ms"] >= row["lower_emit_ms"]
    assert data["tvm"] is None and data["checks"]["dietcode_vs_tvm"] is None


def test_unknown_case_is_an_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cases", "no-such-case"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)  # fmt: skip
    assert proc.returncode == 2 and "no case matches 'no-such-case'" in proc.stderr


def test_every_listed_case_has_a_unique_name_and_the_default_set_covers_the_examples() -> None:
    ct = _module()
    names = [c.name for c in ct.cases()]
    assert len(names) == len(set(names))
    chosen = {c.example for c in ct.select(ct.cases(), None)}
    for example in ("dense (tiles divide)", "dense (tiles do not divide)", "pipelined_gemm", "softmax",
                    "layernorm", "rmsnorm", "transpose"):
        assert example in chosen
    assert sum(e.startswith("default/") for e in chosen) == 5
    assert ct.DIETCODE in names
    assert [c.name for c in ct.select(ct.cases(), "transpose/*")] == ["transpose/1024x1024", "transpose/8192x8192"]


def _row(case: str, example: str, lower_emit: float, total: float) -> dict[str, Any]:
    return {"case": case, "example": example, "schedule_ms": total - lower_emit,
            "lower_ms": lower_emit / 2, "emit_ms": lower_emit / 2, "lower_emit_ms": lower_emit,
            "total_ms": total}  # fmt: skip


def test_checks_report_the_targets_without_asserting() -> None:
    ct = _module()
    rows = [
        _row("t/small", "t", 100.0, 120.0),
        _row("t/large", "t", 200.0, 240.0),  # 2x: over the 1.3x target, and over 150 ms
        _row("u/small", "u", 10.0, 20.0),
        _row("u/large", "u", 12.0, 24.0),  # 1.2x
        _row(ct.DIETCODE, "dense", 50.0, 90.0),
    ]
    lines, result = ct.checks(rows, {"total_ms": 100.0}, "")
    text = "\n".join(lines)
    assert "FAIL t/large: 200.0 ms" in text and "pass t/small: 100.0 ms" in text and "4/5 pass" in text
    assert result["size_ratio"]["t"]["pass"] is False and result["size_ratio"]["t"]["total"] == 2.0
    assert result["size_ratio"]["u"]["pass"] is True
    # a large size much faster than the small one is size-dependent too
    _, faster = ct.checks([_row("v/small", "v", 100.0, 100.0), _row("v/mid", "v", 900.0, 900.0),
                           _row("v/large", "v", 10.0, 10.0)], None, "")  # fmt: skip
    assert faster["size_ratio"]["v"]["total"] == 0.1 and faster["size_ratio"]["v"]["spread_total"] == 90.0
    assert faster["size_ratio"]["v"]["pass"] is False
    assert "dense" not in result["size_ratio"]  # one size: no ratio
    assert result["dietcode_vs_tvm"]["pass"] is True and result["dietcode_vs_tvm"]["ratio"] == 0.9
    _, slower = ct.checks(rows, {"total_ms": 80.0}, "")
    assert slower["dietcode_vs_tvm"]["pass"] is False
    skipped, none = ct.checks(rows, None, "no --tvm PYTHON given")
    assert none["dietcode_vs_tvm"] is None and "  skipped: no --tvm PYTHON given" in skipped
