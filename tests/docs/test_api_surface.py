"""docs/tvm_differences.md's API surface table lists every public member of loopir.Schedule
(and nothing loopir.Schedule does not have), so that the table cannot rot on loopir's side."""

from __future__ import annotations

import re
from pathlib import Path

import loopir

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tvm_differences.md"


def _rows() -> list[list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## API surface\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].startswith("| TVM 0.27 `s_tir.Schedule` | loopir `Schedule` | status |")
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def test_the_table_lists_every_public_member_of_loopir_schedule() -> None:
    listed = [name for row in _rows() for name in re.findall(r"`([A-Za-z_]+)`", row[1])]
    public = {m for m in dir(loopir.Schedule) if not m.startswith("_")}
    assert len(listed) == len(set(listed)), "a loopir member is listed twice"
    assert sorted(public - set(listed)) == [], "public Schedule members missing from the table"
    assert sorted(set(listed) - public) == [], "the table names members loopir.Schedule lacks"


def test_every_row_has_a_known_status() -> None:
    statuses = {"same", "alias", "different arguments", "not planned", "planned (issue 31)", "n/a",
                "loopir only"}  # fmt: skip
    tvm = [name for row in _rows() for name in re.findall(r"`([A-Za-z_]+)`", row[0])]
    assert len(tvm) == len(set(tvm)) == 70  # dir(tvm.s_tir.Schedule) of TVM 0.27, public names
    for row in _rows():
        assert row[2] in statuses, row
        assert bool(row[0]) or row[2] == "loopir only", row
        assert bool(row[1]) == (row[2] not in ("not planned", "planned (issue 31)", "n/a")), row
