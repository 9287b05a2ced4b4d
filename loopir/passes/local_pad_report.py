"""The report of the LocalPadding pass: what it did with every candidate, and why."""

from __future__ import annotations

import attrs

__all__ = ["CandidateReport", "ConjunctDecision", "LocalPaddingReport", "node_text"]


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


@attrs.define
class ConjunctDecision:
    """One conjunct of a candidate's guard: whether it was inlined/dropped, and why."""

    text: str
    inlined: bool
    reason: str


@attrs.define
class CandidateReport:
    """What LocalPadding did with one guarded store."""

    kind: str  # "fetch" | "init" | "compute"
    buffer: str
    store: str
    conjuncts: list[ConjunctDecision] = attrs.field(factory=list)
    outcome: str = "unchanged"  # "padded" | "guard reduced" | "unchanged" | "refused"
    reason: str = ""
    pad_value: str | None = None

    def __str__(self) -> str:
        head = f"[{self.kind}] {self.buffer}: {self.outcome}"
        if self.pad_value is not None:
            head += f" (pad {self.pad_value})"
        if self.reason:
            head += f" -- {self.reason}"
        lines = [head, f"    store: {self.store}"]
        for c in self.conjuncts:
            verb = "dropped" if self.kind == "compute" else "inlined"
            tag = verb if c.inlined else "kept"
            lines.append(f"    {tag:8s} {c.text}" + (f"  ({c.reason})" if c.reason else ""))
        return "\n".join(lines)


@attrs.define
class LocalPaddingReport:
    """Every candidate LocalPadding considered: fetches and inits in program order, then the
    computes (which depend on what the fetches padded)."""

    candidates: list[CandidateReport] = attrs.field(factory=list)

    def __str__(self) -> str:
        if not self.candidates:
            return "LocalPadding: no guarded shared/local store"
        return "LocalPadding report\n" + "\n".join(str(c) for c in self.candidates)

    def by_buffer(self, name: str) -> list[CandidateReport]:
        return [c for c in self.candidates if c.buffer == name]


def node_text(node: object) -> str:
    try:
        return str(node).strip()
    except Exception:  # pragma: no cover - reports must never fail
        return repr(node)
