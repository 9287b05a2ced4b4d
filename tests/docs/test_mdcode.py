"""The Markdown code-block reader used by the docs tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .mdcode import code_blocks


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "page.md"
    p.write_text(text, encoding="utf-8")
    return p


def test_blocks_languages_lines_and_listings(tmp_path: Path) -> None:
    page = _write(tmp_path, "# t\n\n```python\nx = 1\n```\n\ntext\n\n```text\nout\n```\n\n"
                            "```python\n@T.prim_func\ndef main(): pass\n```\n")  # fmt: skip
    blocks = code_blocks(page)
    assert [(b.line, b.lang) for b in blocks] == [(3, "python"), (9, "text"), (13, "python")]
    assert blocks[0].text == "x = 1\n"
    assert not blocks[0].is_ir_listing and blocks[2].is_ir_listing
    assert [b.is_python for b in blocks] == [True, False, True]


def test_markers(tmp_path: Path) -> None:
    page = _write(tmp_path, "<!-- skip: needs GPU -->\n```python\na\n```\n\n<!-- needs: nvcc -->\n"
                            "```python\nb\n```\n\n```python title=\"needs a GPU\"\nc\n```\n\n```python\nd\n```\n")  # fmt: skip
    reqs = [b.requirement() for b in code_blocks(page)]
    assert reqs == ["gpu", "nvcc", "gpu", None]


def test_a_skip_for_another_reason_is_refused(tmp_path: Path) -> None:
    page = _write(tmp_path, "<!-- skip: too slow -->\n```python\na\n```\n")
    (block,) = code_blocks(page)
    with pytest.raises(ValueError, match="too slow"):
        block.requirement()


def test_marker_separated_by_text_does_not_apply(tmp_path: Path) -> None:
    page = _write(tmp_path, "<!-- skip: needs GPU -->\nsome text\n\n```python\na\n```\n")
    (block,) = code_blocks(page)
    assert block.requirement() is None


def test_unclosed_fence_is_an_error(tmp_path: Path) -> None:
    page = _write(tmp_path, "```python\na = 1\n")
    with pytest.raises(ValueError, match="never closed"):
        code_blocks(page)


def test_longer_fences_and_tildes(tmp_path: Path) -> None:
    page = _write(tmp_path, "````python\n```\ninner\n```\n````\n~~~py\nz\n~~~\n")
    blocks = code_blocks(page)
    assert [b.lang for b in blocks] == ["python", "py"]
    assert blocks[0].text == "```\ninner\n```\n"


def test_tvmscript_excerpts_are_listings(tmp_path: Path) -> None:
    page = _write(tmp_path, "```python\n    for k_0 in T.serial(13):\n        T.tvm_storage_sync(\"shared\")\n```\n\n"
                            "```python\nfrom loopir.ir import T\nx = T.serial\n```\n\n```python\nT = 3\nprint(T)\n```\n")  # fmt: skip
    assert [b.is_ir_listing for b in code_blocks(page)] == [True, False, False]
