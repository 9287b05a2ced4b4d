"""Terminal output for the command line: ANSI color and a progress line, only on a terminal.

No third-party dependency: the escape codes are written by hand. When the stream is not a
terminal (a pipe, a file, a CI log) or ``NO_COLOR`` is set, everything is plain text and
progress is reported as ordinary lines, so logs stay readable.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

__all__ = ["Console", "color_wanted"]

_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}

_SPINNER = "|/-\\"


def color_wanted(stream: TextIO, mode: str = "auto") -> bool:
    """Whether to emit ANSI codes on ``stream``.

    Parameters
    ----------
    stream
        The output stream.
    mode
        ``"always"``, ``"never"`` or ``"auto"`` (a terminal, ``NO_COLOR`` unset and
        ``TERM`` not ``dumb``).
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Console:
    """Writes the CLI's output: headings, styled text, tables and progress.

    Parameters
    ----------
    stream
        Where to write (default ``sys.stdout``).
    color
        ``"auto"`` (default), ``"always"`` or ``"never"``; also decides whether progress is
        drawn as a live line (terminal) or printed as plain lines.
    """

    def __init__(self, stream: TextIO | None = None, color: str = "auto") -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.color = color_wanted(self.stream, color)
        self._lock = threading.Lock()

    # --- text -----------------------------------------------------------------------------
    def style(self, text: str, *styles: str) -> str:
        """``text`` wrapped in the ANSI codes of ``styles`` (unchanged without color)."""
        if not self.color or not styles:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def write(self, text: str = "", *styles: str) -> None:
        """Write one line (styled)."""
        with self._lock:
            self.stream.write(self.style(text, *styles) + "\n")
            self.stream.flush()

    def heading(self, text: str) -> None:
        """A section heading: a blank line, then the text underlined (or bold on a terminal)."""
        self.write()
        if self.color:
            self.write(text, "bold", "cyan")
        else:
            self.write(text)
            self.write("-" * len(text))

    def note(self, text: str) -> None:
        """A remark such as "skipped ...: why" (yellow on a terminal)."""
        self.write(text, "yellow")

    def ok(self, text: str) -> None:
        """A passed check (green on a terminal)."""
        self.write(text, "green")

    def fail(self, text: str) -> None:
        """A failed check (red on a terminal)."""
        self.write(text, "red")

    def code(self, text: str, indent: str = "    ") -> None:
        """A block of source, indented."""
        for line in text.rstrip("\n").splitlines():
            self.write(indent + line)

    def diff(self, lines: Sequence[str], indent: str = "    ") -> None:
        """Unified-diff lines, removed lines red and added lines green on a terminal."""
        for line in lines:
            line = line.rstrip("\n")
            if line.startswith("+") and not line.startswith("+++"):
                self.write(indent + line, "green")
            elif line.startswith("-") and not line.startswith("---"):
                self.write(indent + line, "red")
            elif line.startswith("@@"):
                self.write(indent + line, "cyan")
            else:
                self.write(indent + line)

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "    ") -> None:
        """A plain-text table with aligned columns (columns of numbers right-aligned)."""
        cols = len(header)
        widths = [len(h) for h in header]
        for r in rows:
            for i in range(cols):
                widths[i] = max(widths[i], len(r[i]))

        def numeric(c: str) -> bool:
            return c[:1].isdigit() or (c[:1] in "-+." and c[1:2].isdigit()) or c in ("inf", "nan")

        # a column of numbers is right-aligned, header included
        right = [bool(rows) and all(numeric(r[i]) for r in rows) for i in range(cols)]

        def fmt(cells: Sequence[str]) -> str:
            out = [c.rjust(widths[i]) if right[i] else c.ljust(widths[i]) for i, c in enumerate(cells)]
            return indent + "  ".join(out).rstrip()

        self.write(fmt(header), "bold")
        self.write(indent + "  ".join("-" * w for w in widths))
        for r in rows:
            self.write(fmt(r))

    # --- progress -------------------------------------------------------------------------
    @contextmanager
    def progress(self, what: str) -> Iterator[None]:
        """Show that ``what`` is running: a spinner with elapsed seconds on a terminal, one
        plain "what ..." line otherwise; either way ends with "what: done (N.N s)"."""
        start = time.perf_counter()
        stop = threading.Event()
        spinner: threading.Thread | None = None
        if self.color:

            def spin() -> None:
                i = 0
                while not stop.wait(0.1):
                    el = time.perf_counter() - start
                    with self._lock:
                        self.stream.write(f"\r  {_SPINNER[i % 4]} {what} ({el:4.1f} s)\x1b[K")
                        self.stream.flush()
                    i += 1

            spinner = threading.Thread(target=spin, daemon=True)
            spinner.start()
        else:
            self.write(f"  {what} ...")
        ok = False
        try:
            yield
            ok = True
        finally:
            stop.set()
            if spinner is not None:
                spinner.join()
                with self._lock:
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
            el = time.perf_counter() - start
            if ok:
                self.write(f"  {what}: done ({el:.1f} s)", "dim")
            else:
                self.write(f"  {what}: failed after {el:.1f} s", "red")

    def bar(self, done: int, total: int, what: str) -> None:
        """A progress bar for step ``done`` of ``total`` (terminal only; a no-op otherwise)."""
        if not self.color or total <= 0:
            return
        width = 24
        filled = int(width * done / total)
        with self._lock:
            self.stream.write(
                f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}\x1b[K"
            )
            if done >= total:
                self.stream.write("\r\x1b[K")
            self.stream.flush()
