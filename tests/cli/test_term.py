"""Console output: plain text off a terminal, ANSI color and live progress on one."""

from __future__ import annotations

import io

import pytest

from loopir.cli.term import Console, color_wanted


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_when_not_a_terminal() -> None:
    out = io.StringIO()
    con = Console(out)
    assert not con.color
    con.heading("Title")
    con.note("skipped x")
    with con.progress("work"):
        pass
    con.bar(1, 2, "half")
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert "Title\n-----" in text
    assert "  work ...\n" in text and "work: done (" in text


def test_color_and_spinner_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = FakeTTY()
    con = Console(out)
    assert con.color
    con.ok("fine")
    with con.progress("slow"):
        import time

        time.sleep(0.25)  # long enough for the spinner thread to draw at least once
    con.bar(1, 4, "quarter")
    text = out.getvalue()
    assert "\x1b[32mfine\x1b[0m" in text
    assert "\r  | slow (" in text or "\r  / slow (" in text
    assert "[######..................] 1/4 quarter" in text


def test_no_color_and_dumb_terminal_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert not color_wanted(FakeTTY())
    assert color_wanted(io.StringIO(), "always")
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not color_wanted(FakeTTY())
    monkeypatch.setenv("TERM", "xterm")
    assert not color_wanted(FakeTTY(), "never")
    assert color_wanted(FakeTTY())


def test_failed_progress_is_reported_and_reraised() -> None:
    out = io.StringIO()
    con = Console(out)
    with pytest.raises(RuntimeError, match="boom"):
        with con.progress("step"):
            raise RuntimeError("boom")
    assert "step: failed after" in out.getvalue()


def test_table_aligns_columns_and_diff_marks_lines() -> None:
    out = io.StringIO()
    con = Console(out)
    con.table(["name", "ms"], [["a", "1.5"], ["long name", "12.25"]])
    con.diff(["--- a", "+++ b", "@@ -1 +1 @@", "-old", "+new", " same"])
    lines = out.getvalue().splitlines()
    assert lines[0] == "    name          ms"
    assert lines[2] == "    a            1.5"
    assert lines[3] == "    long name  12.25"
    assert lines[4:] == ["    --- a", "    +++ b", "    @@ -1 +1 @@", "    -old", "    +new", "     same"]
