"""A built IRModule: its functions, called by name (``rt["qkv"](x, w, y)``); and how a built
function binds arrays passed by parameter name (``mod(A=a, B=b, C=c)``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


def bind_arguments(func_name: str, names: Sequence[str], args: tuple[Any, ...],
                   named: Mapping[str, Any]) -> tuple[Any, ...]:  # fmt: skip
    """The arrays of a call in parameter order: ``args`` by position, then ``named`` by the
    parameters' (buffer) names, as Python binds a call.

    TVM's runtime modules take positional arrays only; loopir also takes them by name.

    Parameters
    ----------
    func_name
        The function's name, for messages.
    names
        The parameter names, in order.
    args, named
        The call's positional and keyword arrays.

    Raises
    ------
    LaunchError
        Naming the function and the parameter: an unknown name, a parameter given both by
        position and by name, a missing one, or a name that several parameters share.
    """
    if not named:
        return args
    listed = ", ".join(names)
    slots: list[Any] = list(args) + [_MISSING] * max(len(names) - len(args), 0)
    for key, value in named.items():
        where = [i for i, n in enumerate(names) if n == key]
        if not where:
            raise LaunchError(f"{func_name}: no parameter named {key!r}; its parameters are {listed}")
        if len(where) > 1:
            raise LaunchError(f"{func_name}: parameters {where} are all named {key!r}; pass them by position")
        i = where[0]
        if i < len(args):
            raise LaunchError(f"{func_name}: parameter {key!r} is given twice (by position {i} and by name)")
        slots[i] = value
    missing = [n for n, v in zip(names, slots) if v is _MISSING]
    if missing:
        which = f"parameter{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        raise LaunchError(f"{func_name}: no array for {which} (parameters: {listed})")
    return tuple(slots)


_MISSING = object()


__all__ = ["RuntimeModule", "bind_arguments"]
