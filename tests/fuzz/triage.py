"""Group and minimize the findings of a fuzz survey (``$LOOPIR_FUZZ_FINDINGS`` JSONL).

Usage::

    python tests/fuzz/triage.py /tmp/loopir_fuzz/findings.jsonl

Findings are grouped by category and the first line of their message with numbers blanked
out; for each group the shortest reproducer is minimized by dropping lines while the same
kind of failure persists, and printed.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import loopir
from loopir.errors import ScheduleError
from loopir.testing import assert_outputs_equal, random_inputs, run_cpu

_LOWER_TAIL = "with loopir.PassContext"
_GPU = "bind_for_gpu(sch)"


def _key(category: str, message: str) -> str:
    head = message.split("\n", 1)[0]
    head = re.sub(r"np\.float\d+\([^)]*\)", "#", head)
    return category + " " + re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", head)[:160]


def _split(reproducer: str) -> tuple[list[str], list[str], str | None, bool]:
    """(header lines, schedule lines, failing line or None, whether bound for the GPU)."""
    lines = reproducer.splitlines()
    header = lines[:3]
    body = lines[3:]
    failing = None
    gpu = False
    if body and body[-1].endswith("# <- fails here"):
        failing = body.pop().replace("  # <- fails here", "")
    while body and (
        body[-1].startswith(_LOWER_TAIL) or body[-1].startswith("    ") or _GPU in body[-1]
    ):
        gpu = gpu or _GPU in body[-1]
        body.pop()
    return header, body, failing, gpu


def _failure(header: list[str], body: list[str], failing: str | None, category: str,
             gpu: bool = False) -> str | None:  # fmt: skip
    """A short description of how the program fails, or None when it does not."""
    ns: dict[str, Any] = {}
    try:
        exec("\n".join(header + body), ns)  # noqa: S102 - reproducers written by the fuzzer
    except Exception:  # noqa: BLE001 - a dropped line broke an earlier one: not this failure
        return None
    sch, w = ns["sch"], ns["w"]
    if failing is not None:
        try:
            exec(failing, ns)  # noqa: S102
        except ScheduleError:
            return None
        except Exception as e:  # noqa: BLE001
            return f"crash {type(e).__name__}"
        if category == "crash":
            return None
    if gpu:
        from loopir.testing.fuzz import bind_for_gpu

        bind_for_gpu(sch)
    try:
        loopir.verify(sch.func)
    except Exception as e:  # noqa: BLE001
        return f"verify {type(e).__name__}"
    inputs = random_inputs(w.func, w.sizes)
    expected = run_cpu(w.func, inputs)
    funcs = [("wrong-output", sch.func)]
    if category in ("lower", "local-pad"):
        for pad in (False, True):
            try:
                with loopir.PassContext(config={"tir.enable_local_pad": pad}):
                    funcs.append(("local-pad" if pad else "lower", loopir.lower(sch.func)))
            except Exception as e:  # noqa: BLE001
                return f"{'local-pad' if pad else 'lower'} raised {type(e).__name__}"
    for cat, f in funcs:
        try:
            assert_outputs_equal(w.func, expected, run_cpu(f, inputs))
        except Exception as e:  # noqa: BLE001
            return f"{cat} {type(e).__name__}"
    return None


def minimize(reproducer: str, category: str) -> str:
    """Drop reproducer lines one at a time while the same failure persists."""
    header, body, failing, gpu = _split(reproducer)
    want = _failure(header, body, failing, category, gpu)
    if want is None:
        return reproducer + "\n# (did not reproduce in isolation)"
    i = len(body) - 1
    while i >= 0:
        trial = body[:i] + body[i + 1 :]
        if _failure(header, trial, failing, category, gpu) == want:
            body = trial
        i -= 1
    tail = [failing + "  # <- fails here"] if failing else []
    if gpu:
        tail.append("loopir.testing.fuzz." + _GPU)
    return "\n".join(header + body + tail) + f"\n# fails with: {want}"


def main(path: str) -> None:
    groups: dict[str, list[dict[str, Any]]] = {}
    for line in open(path):
        d = json.loads(line)
        msg = d["message"].split("--- reproducer ---")
        d["head"] = msg[0].strip()
        d["reproducer"] = msg[1].strip() if len(msg) > 1 else ""
        groups.setdefault(_key(d["category"], d["head"]), []).append(d)
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        best = min(items, key=lambda d: len(d["reproducer"]))
        sys.stdout.write(f"=== {len(items)} x {key}\n{best['head'][:600]}\n")
        sys.stdout.write(minimize(best["reproducer"], best["category"]) + "\n\n")


if __name__ == "__main__":
    main(sys.argv[1])
