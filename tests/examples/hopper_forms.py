"""``hopper_gemm`` with the defaults it had before the default form changed (issue 32).

Since then a ``hopper_gemm`` call that leaves ``tma``, ``warp_specialized``, ``persistent`` and
``raster`` out gets the fastest form (TMA, a producer warpgroup, a persistent grid, ``raster=8``)
where it fits. The tests of the earlier forms -- the ``cp.async`` pipeline, TMA with a block
barrier per step, the non-persistent warp-specialized kernel, a persistent grid without raster
groups -- call this instead, naming only what they add to the ``cp.async`` form, as they did.
The default form has its own tests (``tests/examples/test_hopper_gemm_default.py``).
"""

from __future__ import annotations

from typing import Any

from loopir.examples import hopper_gemm as _hopper_gemm
from loopir.schedule import Schedule

__all__ = ["EARLIER", "hopper_gemm"]

#: The arguments whose defaults changed, at their earlier values.
EARLIER: dict[str, Any] = {"tma": False, "warp_specialized": False, "persistent": False, "raster": 1}


def hopper_gemm(*args: Any, **kwargs: Any) -> Schedule:
    """``loopir.examples.hopper_gemm`` with ``EARLIER``'s defaults (given arguments win)."""
    return _hopper_gemm(*args, **{**EARLIER, **kwargs})
