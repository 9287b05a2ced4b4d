"""A function built once per shape bucket, dispatching each call on the runtime sizes (DietCode).

``loopir.build(func, target, database=db)`` on a function with symbolic sizes, when the database
holds schedules tuned per shape bucket (``loopir.tune.tune_buckets``), builds one module per bucket
and returns a [`ShapeDispatch`][loopir.runtime.dispatch.ShapeDispatch]: each call reads the symbolic
sizes off the arguments' shapes and runs the module of the bucket that holds them; sizes outside
every bucket run the ``fallback`` module (the function as given, e.g. with the default GPU
schedule).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from loopir.errors import LaunchError, LoopIRError
from loopir.ir.expr import Var
from loopir.ir.functor import collect_vars
from loopir.ir.stmt import PrimFunc
from loopir.runtime.module import bind_arguments

__all__ = ["ShapeDispatch", "size_locations"]

logger = logging.getLogger(__name__)


def size_locations(func: PrimFunc) -> dict[str, tuple[int, int]]:
    """``{size name: (parameter index, axis)}``: where each symbolic size of ``func`` can be
    read off an argument's shape (its first occurrence as a whole dimension).

    Raises
    ------
    LoopIRError
        When a symbolic size occurs only inside larger shape expressions (``2 * n``).
    """
    found: dict[str, tuple[int, int]] = {}
    names: set[str] = set()
    for i, p in enumerate(func.params):
        for d, dim in enumerate(p.shape):
            if isinstance(dim, Var):
                found.setdefault(dim.name, (i, d))
            names |= {v.name for v in collect_vars(dim)}
    missing = sorted(names - set(found))
    if missing:
        raise LoopIRError(f"shape dispatch of {func.name!r}: sizes {missing} are not a whole "
                          "dimension of any parameter, so a call cannot tell them")  # fmt: skip
    return found


class ShapeDispatch:
    """Call the module of the bucket holding the call's sizes (see the module docstring).

    Parameters
    ----------
    func
        The function with symbolic sizes.
    buckets
        ``[(ranges, module)]``, ``ranges`` ``{size: (lo, hi)}`` with both ends included; the
        first bucket holding the sizes wins.
    fallback
        The module for sizes outside every bucket.
    """

    def __init__(self, func: PrimFunc, buckets: Sequence[tuple[Mapping[str, tuple[int, int]], Any]],
                 fallback: Any) -> None:  # fmt: skip
        self.func = func
        self._where = size_locations(func)
        self.buckets = [(dict(r), m) for r, m in buckets]
        for ranges, _ in self.buckets:
            unknown = sorted(set(ranges) - set(self._where))
            if unknown:
                raise LoopIRError(f"shape dispatch of {func.name!r}: bucket sizes {unknown} are not "
                                  f"sizes of the function ({sorted(self._where)})")  # fmt: skip
        self.fallback = fallback

    def sizes(self, args: Sequence[Any]) -> dict[str, int]:
        """The symbolic sizes of a call."""
        try:
            return {n: int(args[i].shape[d]) for n, (i, d) in self._where.items()}
        except (IndexError, AttributeError) as exc:
            raise LaunchError(f"{self.func.name}: cannot read the sizes {sorted(self._where)} off the "
                              f"arguments ({type(exc).__name__}: {exc})") from None  # fmt: skip

    def module_for(self, sizes: Mapping[str, int]) -> Any:
        """The module that runs a call with ``sizes``."""
        for ranges, mod in self.buckets:
            if all(lo <= sizes[n] <= hi for n, (lo, hi) in ranges.items()):
                return mod
        logger.debug("%s: sizes %s are outside every tuned bucket; running the fallback", self.func.name, sizes)
        return self.fallback

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the bucket's module; arrays by position or by parameter name, other keywords
        (``stream=``) passed on."""
        names = [b.name for b in self.func.params]
        named = {k: v for k, v in kwargs.items() if k in names}
        if named:
            args = bind_arguments(self.func.name, names, args, named)
            kwargs = {k: v for k, v in kwargs.items() if k not in named}
        return self.module_for(self.sizes(args))(*args, **kwargs)

    def __repr__(self) -> str:
        labels = ", ".join(",".join(f"{n}={lo}..{hi}" for n, (lo, hi) in sorted(r.items())) for r, _ in self.buckets)
        return f"<ShapeDispatch {self.func.name}: {labels}; fallback>"
