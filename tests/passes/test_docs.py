"""docs/local_padding.md is generated from the real code and must not go stale."""

from __future__ import annotations

from pathlib import Path

from _passes_docgen import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "local_padding.md"


def test_local_padding_page_is_current() -> None:
    assert DOC.exists(), "docs/local_padding.md is missing"
    assert DOC.read_text() == render(), (
        "docs/local_padding.md is stale: run "
        "`python tests/passes/_passes_docgen.py > docs/local_padding.md`"
    )
