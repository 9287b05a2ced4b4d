"""Data types: canonical strings such as ``"float32"`` or, for vectors, ``"float32x4"``.

Strings keep the IR printable and JSON-friendly; this module validates and queries them.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

SCALAR_BITS: dict[str, int] = {
    "bool": 1,
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
    "uint8": 8,
    "uint16": 16,
    "uint32": 32,
    "uint64": 64,
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
}

_ALIASES = {"float": "float32", "int": "int32", "half": "float16", "double": "float64"}


# canonical() of the strings seen so far: every IntImm, Var and Cast converts its dtype, and
# parsing the string each time was a visible share of building IR.
_CANONICAL: dict[str, str] = {}


def canonical(dtype: Any) -> str:
    """Return the canonical dtype string for ``dtype`` (str, numpy dtype or type).

    Raises
    ------
    ValueError
        If ``dtype`` names no supported type.
    """
    if type(dtype) is str:
        hit = _CANONICAL.get(dtype)
        if hit is None:
            hit = _CANONICAL[dtype] = _canonical(dtype)
        return hit
    return _canonical(dtype)


def _canonical(dtype: Any) -> str:
    if dtype is None:
        # numpy reads None as float64: a missing dtype would silently become float64
        raise ValueError("unsupported dtype None; expected a dtype such as 'float32'")
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError as exc:
            raise ValueError(f"unsupported dtype {dtype!r}") from exc
    elem, sep, lanes = name.partition("x")
    if elem not in SCALAR_BITS or (sep and (not lanes.isdigit() or int(lanes) < 1)):
        raise ValueError(
            f"unsupported dtype {dtype!r}; expected one of {sorted(SCALAR_BITS)} "
            "optionally with lanes, e.g. 'float32x4'"
        )
    if lanes and int(lanes) == 1:
        return elem
    return name


def element(dtype: str) -> str:
    """The scalar element type of ``dtype`` (``"float32x4"`` -> ``"float32"``)."""
    return dtype.partition("x")[0]


@functools.cache
def lanes(dtype: str) -> int:
    """Number of vector lanes (1 for scalars)."""
    _, _, n = dtype.partition("x")
    return int(n) if n else 1


def with_lanes(dtype: str, n: int) -> str:
    """``dtype``'s element type with ``n`` lanes."""
    elem = element(dtype)
    return elem if n == 1 else f"{elem}x{n}"


def bits(dtype: str) -> int:
    """Bits of one element."""
    return SCALAR_BITS[element(dtype)]


@functools.cache
def is_float(dtype: str) -> bool:
    return element(dtype) in ("float16", "bfloat16", "float32", "float64")


@functools.cache
def is_int(dtype: str) -> bool:
    """Signed or unsigned integer (not bool)."""
    e = element(dtype)
    return e.startswith("int") or e.startswith("uint")


@functools.cache
def is_uint(dtype: str) -> bool:
    return element(dtype).startswith("uint")


@functools.cache
def is_bool(dtype: str) -> bool:
    return element(dtype) == "bool"


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype holding one element; bfloat16 is stored as ``uint16`` bits."""
    e = element(dtype)
    if e == "bfloat16":
        return np.dtype(np.uint16)
    return np.dtype(e)


def max_value(dtype: str) -> float | int | bool:
    """Largest finite... or +inf for floats: the identity of ``min`` reductions."""
    e = element(dtype)
    if e == "bool":
        return True
    if is_float(e):
        return float("inf")
    return int(np.iinfo(np.dtype(e)).max)


def min_value(dtype: str) -> float | int | bool:
    """-inf for floats, the lowest value for ints: the identity of ``max`` reductions."""
    e = element(dtype)
    if e == "bool":
        return False
    if is_float(e):
        return float("-inf")
    return int(np.iinfo(np.dtype(e)).min)


def promote(a: str, b: str) -> str:
    """The common type of a binary operation on ``a`` and ``b`` (TVM's BinaryOpMatchTypes).

    A float beats an int or bool (``int64`` with ``float16`` is ``float16``, as in TVM, not
    numpy's ``float64``); otherwise the wider type wins; a signed and an unsigned int of one
    width give the unsigned one, as in C. ``float16`` and ``bfloat16`` have no common 16-bit
    type: both are exact in ``float32``. The result does not depend on the operand order.

    Raises
    ------
    TypeError
        If ``a`` and ``b`` have different numbers of lanes.
    """
    if a == b:
        return a
    if lanes(a) != lanes(b):
        raise TypeError(f"cannot combine vector types {a} and {b}")
    ea, eb = element(a), element(b)
    if is_float(ea) != is_float(eb):
        res = ea if is_float(ea) else eb
    elif is_bool(ea) or is_bool(eb):
        res = eb if is_bool(ea) else ea
    elif bits(ea) != bits(eb):
        res = ea if bits(ea) > bits(eb) else eb
    elif is_float(ea):
        res = "float32"  # float16 with bfloat16 (the only two distinct floats of one width)
    else:
        res = ea if is_uint(ea) else eb  # int with uint of one width (else ea == eb)
    return with_lanes(res, lanes(a))
