"""Tensor intrinsics: a registry of (description, implementation) PrimFunc pairs.

As in TVM's ``tir/tensor_intrin``, an intrinsic is data, not a special case in a pass:

- the **description** is an ordinary PrimFunc computing what the intrinsic computes, over
  buffers with the shapes, dtypes and scopes of one intrinsic call (for ``mma.sync`` m16n8k16: a
  16x8 tile of C += a 16x16 tile of A times a 16x8 tile of B). ``Schedule.tensorize`` matches a
  subtree of the scheduled function against it structurally;
- the **implementation** is a PrimFunc over the same parameters (same shapes, dtypes and scopes)
  whose body replaces the matched subtree: calls of hardware intrinsics (``ldmatrix``,
  ``mma.sync``), or any other loop nest that computes the same thing.

Users register their own with [`register`][loopir.tensor_intrin.register]; the built-in CUDA
intrinsics ([`loopir.tensor_intrin.cuda`][loopir.tensor_intrin.cuda]: ``ldmatrix``, ``mma.sync``,
fragment fill and store, under TVM's names) are registered when this package is imported.

Examples
--------
>>> from loopir import tensor_intrin
>>> intrin = tensor_intrin.get("my_dot4")                # doctest: +SKIP
>>> tensor_intrin.register("my_dot4", desc, impl)        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from loopir.errors import LoopIRError
from loopir.ir.stmt import PrimFunc

__all__ = ["TensorIntrin", "TensorIntrinError", "get", "names", "register"]


class TensorIntrinError(LoopIRError):
    """A tensor intrinsic that is unknown, registered twice, or whose description and
    implementation disagree on their parameters."""


@attrs.frozen
class TensorIntrin:
    """A registered tensor intrinsic.

    Attributes
    ----------
    name
        The name ``Schedule.tensorize`` looks it up by.
    desc
        What one call computes, as a PrimFunc (the pattern tensorize matches).
    impl
        The PrimFunc whose body replaces a matched subtree; its parameters correspond one to one
        (same position, shape, dtype and scope) to the description's.
    """

    name: str
    desc: PrimFunc
    impl: PrimFunc


_REGISTRY: dict[str, TensorIntrin] = {}
# Built-ins not built yet: name -> a function making (desc, impl). Building them is deferred to
# the first lookup, so that importing loopir (whose passes import this package) stays cheap.
_PENDING: dict[str, Callable[[], tuple[PrimFunc, PrimFunc]]] = {}


def _register_builtin(name: str, make: Callable[[], tuple[PrimFunc, PrimFunc]]) -> None:
    """Register ``name`` to be built by ``make`` on its first lookup (built-in intrinsics)."""
    if name in _REGISTRY or name in _PENDING:
        raise TensorIntrinError(f"tensor_intrin: built-in {name!r} is registered twice")
    _PENDING[name] = make


def _materialize(name: str) -> None:
    make = _PENDING.pop(name, None)
    if make is not None:
        desc, impl = make()
        _check_params(name, desc, impl)
        _REGISTRY[name] = TensorIntrin(name, desc, impl)


def _check_params(name: str, desc: PrimFunc, impl: PrimFunc) -> None:
    if len(desc.params) != len(impl.params):
        raise TensorIntrinError(
            f"tensor_intrin.register({name!r}): the description has {len(desc.params)} "
            f"parameters and the implementation {len(impl.params)}"
        )
    for k, (d, i) in enumerate(zip(desc.params, impl.params)):
        if (d.dtype, d.scope, len(d.shape)) != (i.dtype, i.scope, len(i.shape)):
            raise TensorIntrinError(
                f"tensor_intrin.register({name!r}): parameter {k} differs: description "
                f"{d!r}, implementation {i!r}"
            )


def register(name: str, desc: PrimFunc, impl: PrimFunc, *, override: bool = False) -> TensorIntrin:
    """Register the tensor intrinsic ``name``.

    Parameters
    ----------
    name
        A new name (``override=True`` replaces an existing one).
    desc, impl
        The description and the implementation PrimFuncs, with corresponding parameters.

    Raises
    ------
    TensorIntrinError
        When ``name`` is taken and ``override`` is false, or the parameters disagree.
    """
    if not isinstance(name, str) or not name:
        raise TensorIntrinError(f"tensor_intrin.register: the name must be a non-empty str, got {name!r}")
    if (name in _REGISTRY or name in _PENDING) and not override:
        raise TensorIntrinError(
            f"tensor_intrin.register: {name!r} is already registered (pass override=True to replace it)"
        )
    _check_params(name, desc, impl)
    intrin = TensorIntrin(name, desc, impl)
    _PENDING.pop(name, None)
    _REGISTRY[name] = intrin
    return intrin


def get(name: str) -> TensorIntrin:
    """The tensor intrinsic registered as ``name``.

    Raises
    ------
    TensorIntrinError
        Naming ``name`` and the registered intrinsics, when ``name`` is unknown.
    """
    _materialize(name)
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(names()) or "none"
        raise TensorIntrinError(f"tensor_intrin.get: no tensor intrinsic named {name!r} (registered: {known})") from None


def names() -> tuple[str, ...]:
    """The registered intrinsics' names, sorted."""
    return tuple(sorted({*_REGISTRY, *_PENDING}))


# The built-in CUDA tensor-core intrinsics (last: the module registers through this one).
from loopir.tensor_intrin import cuda as cuda  # noqa: E402
from loopir.tensor_intrin import fragment as fragment  # noqa: E402
