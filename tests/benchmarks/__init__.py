"""Tests of the scripts in benchmarks/ (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(stem: str) -> Any:
    """``benchmarks/<stem>.py`` as a module, registered in ``sys.modules`` once (dataclasses
    look their module up there)."""
    name = f"loopir_benchmarks_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
