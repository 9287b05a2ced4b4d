"""A built IRModule: its functions, called by name (``rt["qkv"](x, w, y)``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from loopir.errors import LaunchError


class RuntimeModule:
    """The functions of a built [`IRModule`][loopir.ir.module.IRModule], by name.

    ``rt["name"]`` is the built function (a [`CPUModule`][loopir.runtime.cpu.CPUModule] or a
    ``CUDAModule``), called like the PrimFunc.
    """

    def __init__(self, functions: Mapping[str, Any], target: str) -> None:
        self._functions = dict(functions)
        self.target = target

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._functions)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._functions[name]
        except KeyError:
            raise LaunchError(
                f"{self.target} module has no function {name!r}; its functions: "
                f"{', '.join(self.names)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.target}: {', '.join(self.names)}>"


__all__ = ["RuntimeModule"]
