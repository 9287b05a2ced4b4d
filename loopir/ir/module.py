"""``loopir.IRModule``: named PrimFuncs built together.

>>> import loopir
>>> from loopir import te
>>> A = te.placeholder((8,), "float32", name="A")
>>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
>>> f = te.create_prim_func([A, B])
>>> mod = loopir.IRModule({"double": f, "twice": f})
>>> mod.names
('double', 'twice')
>>> mod["double"].name
'double'

Each function takes its key as its name (what its kernels and entry points are called), so
one function may appear under several keys. ``str(mod)`` prints every function;
``loopir.structural_equal`` compares modules by their keys and functions; ``loopir.build``
builds a whole module into one runtime module whose functions are called by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import attrs

from loopir.errors import IRValidationError
from loopir.ir.stmt import PrimFunc

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _functions(value: Mapping[str, PrimFunc]) -> tuple[tuple[str, PrimFunc], ...]:
    if not isinstance(value, Mapping):
        raise IRValidationError(
            f"IRModule: expected a mapping of names to PrimFuncs, got {type(value).__name__}"
        )
    out = []
    for name, func in value.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise IRValidationError(
                f"IRModule: function name {name!r} is not an identifier (letters, digits, "
                "underscores; not starting with a digit)"
            )
        if not isinstance(func, PrimFunc):
            raise IRValidationError(
                f"IRModule: {name!r} maps to a {type(func).__name__}, expected a PrimFunc"
            )
        out.append((name, func if func.name == name else attrs.evolve(func, name=name)))
    if not out:
        raise IRValidationError("IRModule: a module needs at least one function")
    return tuple(sorted(out))


@attrs.frozen(eq=False, init=False)
class IRModule:
    """A module of named PrimFuncs (sorted by name).

    Parameters
    ----------
    functions
        ``{name: PrimFunc}``; each function is renamed to its key.

    Raises
    ------
    IRValidationError
        For a name that is not an identifier, a value that is not a PrimFunc, or no function.
    """

    items: tuple[tuple[str, PrimFunc], ...]

    def __init__(self, functions: Mapping[str, PrimFunc]) -> None:
        self.__attrs_init__(_functions(functions))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.items)

    @property
    def functions(self) -> dict[str, PrimFunc]:
        return dict(self.items)

    def __getitem__(self, name: str) -> PrimFunc:
        for n, f in self.items:
            if n == name:
                return f
        raise KeyError(f"IRModule has no function {name!r}; its functions: {', '.join(self.names)}")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.items)

    def with_function(self, name: str, func: PrimFunc) -> IRModule:
        """A copy with ``name`` added or replaced (e.g. by ``sch.func`` after scheduling)."""
        return IRModule({**self.functions, name: func})

    def __str__(self) -> str:
        from loopir.ir.printer import script

        head = f"# IRModule: {', '.join(self.names)}"
        return "\n\n".join([head, *(script(f) for _, f in self.items)]) + "\n"

    def __repr__(self) -> str:
        return f"IRModule({', '.join(self.names)})"


__all__ = ["IRModule"]
