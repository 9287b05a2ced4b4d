"""docs/schedule.md shows the real dense trace and IR (regenerate: python -m tests.schedule.test_docs)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "schedule.md"


def _generated() -> dict[str, str]:
    import loopir

    sch = loopir.examples.dense(960, 770, 2304)
    return {
        "dense trace": f"```python\n{sch.trace}\n```",
        "dense func": f"```python\n{sch.func}\n```",
    }


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- BEGIN GENERATED: {name} -->\n)(.*?)(<!-- END GENERATED: {name} -->)", re.S
    )


def render(text: str) -> str:
    for name, body in _generated().items():
        text, n = _pattern(name).subn(lambda m, b=body: f"{m.group(1)}{b}\n{m.group(3)}", text)
        if n != 1:
            raise ValueError(f"docs/schedule.md: marker {name!r} found {n} times")
    return text


def test_docs_show_the_real_trace_and_ir() -> None:
    text = DOC.read_text()
    assert render(text) == text, "docs/schedule.md is stale: run python -m tests.schedule.test_docs"


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
