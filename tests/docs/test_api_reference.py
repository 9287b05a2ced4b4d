"""The API reference's docstrings: cross-references instead of Sphinx roles, every target real,
and the top-level and te names all documented.

mkdocstrings renders Markdown: a Sphinx role (``:func:`x```) shows as raw text, while a
cross-reference ``[`x`][loopir.a.x]`` becomes a link that ``mkdocs build --strict`` checks.
These tests read the docstrings the way mkdocstrings does (griffe, static analysis), without
building the site.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api"
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const|ref):`[^`]+`")
CROSSREF = re.compile(r"\]\[(loopir(?:\.\w+)+)\]")


@pytest.fixture(scope="module")
def griffe_loopir() -> Any:
    griffe = pytest.importorskip("griffe", reason="griffe comes with mkdocstrings[python]")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    pkg = loader.load("loopir")
    loader.resolve_aliases(implicit=True, external=False)
    return pkg


def _identifiers() -> Iterator[tuple[str, str]]:
    """(page, identifier) of every ``::: identifier`` of docs/api."""
    for page in sorted(API.glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("::: "):
                yield page.name, line[4:].strip()


def _target(obj: Any) -> Any:
    return obj.final_target if obj.is_alias else obj


def _rendered(obj: Any, seen: set[str]) -> Iterator[Any]:
    """``obj`` and the members mkdocstrings renders with it (this site's options: public
    names, no submodules, imported names only when the module's ``__all__`` lists them)."""
    obj = _target(obj)
    if obj.path in seen:
        return
    seen.add(obj.path)
    yield obj
    for name, member in obj.members.items():
        if name.startswith("_"):
            continue
        if member.is_alias:
            if not (obj.is_module and obj.exports is not None and name in obj.exports):
                continue
            try:
                _ = member.final_target
            except Exception:  # noqa: BLE001 - an alias outside loopir (typing, numpy, ...)
                continue
        if member.is_module:
            continue
        yield from _rendered(member, seen)


def _rendered_objects(pkg: Any) -> list[tuple[str, Any]]:
    seen: set[str] = set()
    out = []
    for page, ident in _identifiers():
        for obj in _rendered(pkg[ident.split(".", 1)[1]], seen):
            out.append((page, obj))
    return out


def test_rendered_docstrings_have_no_sphinx_roles(griffe_loopir: Any) -> None:
    """Write ``[`name`][loopir.module.name]`` (a link), not ``:func:`name``` (raw text)."""
    objects = _rendered_objects(griffe_loopir)
    assert len(objects) > 500, "the walk over the API pages found too few objects"
    found = [
        f"{page}: {obj.path} ({obj.filepath.relative_to(ROOT)}:{obj.docstring.lineno}): {m.group(0)}"
        for page, obj in objects
        if obj.docstring is not None
        for m in ROLE.finditer(obj.docstring.value)
    ]
    assert found == [], "Sphinx roles in rendered docstrings:\n" + "\n".join(found)


def test_the_role_check_sees_a_role(griffe_loopir: Any) -> None:
    """The check above is not vacuous: the walk reaches docstrings, and ROLE matches a role."""
    objects = dict((obj.path, obj) for _, obj in _rendered_objects(griffe_loopir))
    doc = objects["loopir.testing.check_equivalent"].docstring.value
    assert "[`TOLERANCES`][loopir.testing.TOLERANCES]" in doc
    assert ROLE.search(doc.replace("[`TOLERANCES`][loopir.testing.TOLERANCES]", ":data:`TOLERANCES`"))


def test_every_crossref_names_a_loopir_object(griffe_loopir: Any) -> None:
    """Every ``[...][loopir.x]`` in loopir's sources names an object that exists, also in
    modules the API reference does not render (where the strict build cannot check it)."""
    bad = []
    for path in sorted((ROOT / "loopir").rglob("*.py")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in CROSSREF.finditer(line):
                try:
                    griffe_loopir[m.group(1).split(".", 1)[1]]
                except KeyError:
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: {m.group(1)}")
    assert bad == [], "cross-references to nothing:\n" + "\n".join(bad)


def test_every_top_level_name_is_on_the_top_level_page() -> None:
    import loopir

    page = (API / "loopir.md").read_text(encoding="utf-8")
    missing = [n for n in loopir.__all__ if not n.endswith("Error") and f"`loopir.{n}`" not in page]
    assert missing == [], f"docs/api/loopir.md lacks a row for: {missing}"
    for name in ("build", "lower", "verify"):
        obj = getattr(loopir, name)
        assert f"::: {obj.__module__}.{obj.__name__}" in page, name


def test_every_te_name_is_rendered(griffe_loopir: Any) -> None:
    """te's functions (math, casts, constants, ...) each appear in the API reference: each
    resolves to a function, class or attribute with a docstring."""
    import loopir.te

    te = griffe_loopir["te"]
    undocumented = [n for n in loopir.te.__all__ if _target(te[n]).docstring is None]
    assert undocumented == [], f"te names without a docstring (not rendered): {undocumented}"
