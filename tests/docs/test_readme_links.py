"""The README's results table: every row links to the section of docs/ that has its details."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"^\| \[[^\]]+\]\((docs/[\w/]+\.md)#([\w-]+)\) \|")


def _github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _site_slug(heading: str) -> str:
    """Python-Markdown's (mkdocs' toc extension): runs of spaces and hyphens become one."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings that GitHub and the mkdocs site both give."""
    out = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            heading = line.lstrip("#").strip()
            if _github_slug(heading) == _site_slug(heading):
                out.add(_site_slug(heading))
    return out


def _results_rows() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Measured", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return rows[2:]  # the header and the "| --- |" line


def test_every_results_row_links_to_its_section() -> None:
    rows = _results_rows()
    assert len(rows) >= 15
    bad = []
    for row in rows:
        m = LINK.match(row)
        if m is None:
            bad.append(f"no link to docs/...md#section: {row[:80]}")
        elif m.group(2) not in _anchors(ROOT / m.group(1)):
            bad.append(f"{m.group(1)} has no section #{m.group(2)}: {row[:80]}")
    assert bad == [], "\n".join(bad)


def test_slugs_match_both_renderers() -> None:
    heading = "Latest run: with register prefetch (2026-11-29 11:48 UTC)"
    assert _site_slug(heading) == "latest-run-with-register-prefetch-2026-11-29-1148-utc"
    assert _github_slug(heading) == _site_slug(heading)
    # "loopir + CUTLASS" is one hyphen on the site, two on GitHub: such a heading is not linkable
    heading = "CUTLASS GEMMs (issue 6): loopir + CUTLASS vs torch.matmul (cuBLAS)"
    assert _github_slug(heading) != _site_slug(heading)
    assert _site_slug(heading) not in _anchors(ROOT / "docs" / "benchmarks.md")


def test_site_slug_is_mkdocs_slug() -> None:
    toc = pytest.importorskip("markdown.extensions.toc")
    for line in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") or line.startswith("### "):
            heading = line.lstrip("#").strip()
            assert _site_slug(heading) == toc.slugify(heading, "-"), heading
