"""docs/prefetch.md shows the real IR and CUDA (regenerate: python tests/passes/test_prefetch_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "prefetch.md"


def _k0_loop(text: str) -> str:
    """The lines of the ``k_0`` loop (and the prefetch prologue above it) of a printed function."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "_prefetch = T.allocate" in ln or "for k_0 in" in ln)
    k0 = next(i for i, ln in enumerate(lines) if "for k_0 in" in ln)
    indent = len(lines[k0]) - len(lines[k0].lstrip())
    end = k0 + 1
    while end < len(lines) and (len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return "\n".join(lines[start:end])


def _generated() -> dict[str, str]:
    import loopir
    from loopir.codegen_cuda.translation_unit import emit_cuda
    from loopir.passes import PassContext, RecordIRInstrument

    rec = RecordIRInstrument()
    with PassContext(config={"tir.enable_local_pad": True}, instruments=[rec]):
        sch = loopir.examples.dense(60, 50, 70)
        sch.annotate(sch.get_loops(sch.get_block("C"))[3], "loopir.prefetch_shared", True)
        loopir.lower(sch.func)
    before = rec.after("ThreadSync").script()
    after = rec.after("InjectSharedPrefetch").script()
    with PassContext(config={"tir.enable_local_pad": True, "tir.prefetch_shared": True}):
        src = emit_cuda(loopir.lower(loopir.examples.dense(960, 770, 2304).func)).source
    lines = src.splitlines()
    start = next(i for i, ln in enumerate(lines) if "float A_shared_prefetch[" in ln)
    stop = next(i for i, ln in enumerate(lines) if "for (int i_3 = 0;" in ln)
    cuda = "\n".join(ln[2:] for ln in lines[start : stop - 1])
    return {
        "trace": f"```python\ndef apply_trace(sch):\n    ...\n{sch.trace.as_python().splitlines()[-1]}\n```",
        "before": f"```python\n{_k0_loop(before)}\n```",
        "after": f"```python\n{_k0_loop(after)}\n```",
        "cuda": f"```cuda\n{cuda}\n  // ... the compute of tile k_0 (unchanged) ...\n}}\n```",
    }


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN GENERATED: {name} -->\n)(.*?)(<!-- END GENERATED: {name} -->)", re.S)


def render(text: str) -> str:
    for name, body in _generated().items():
        text, n = _pattern(name).subn(lambda m, b=body: f"{m.group(1)}{b}\n{m.group(3)}", text)
        if n != 1:
            raise ValueError(f"docs/prefetch.md: marker {name!r} found {n} times")
    return text


def test_prefetch_page_is_current() -> None:
    text = DOC.read_text()
    assert render(text) == text, "docs/prefetch.md is stale: run python tests/passes/test_prefetch_docs.py"


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
