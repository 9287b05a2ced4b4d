"""Progress of long work (nvcc builds, CUTLASS compiles): a tqdm bar on a terminal, log lines always.

The bar only appears when stderr is a terminal and tqdm is installed; otherwise (CI, pipes,
notebooks without tqdm) the steps are logged at INFO level and nothing is printed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

logger = logging.getLogger("loopir.progress")


def progress(total: int, desc: str, enabled: bool = True) -> Callable[[str], None]:
    """A callback to call once per finished step (with a label); closes the bar at ``total``."""
    bar = None
    if enabled and total > 1 and sys.stderr.isatty():
        try:
            from tqdm import tqdm

            bar = tqdm(total=total, desc=desc, unit="step", leave=False)
        except ImportError:
            bar = None
    done = [0]

    def step(label: str) -> None:
        done[0] += 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(label[-40:])
            if done[0] == total:
                bar.close()
        logger.info("%s [%d/%d] %s", desc, done[0], total, label)

    return step


__all__ = ["progress"]
