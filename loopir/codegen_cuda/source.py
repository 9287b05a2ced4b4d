"""What the CUDA emitters produce and print through: each kernel's description for the runtime
(``KernelSource``), a function's emitted parts (``EmitResult``), unique C identifiers
(``NameTable``) and indented C++ lines (``CodeWriter``, which the kernel and host emitters
share).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import attrs

from loopir.codegen_cuda.ctypes import RESERVED
from loopir.codegen_cuda.split import HostNode, KernelSpec
from loopir.codegen_cuda.tma import TensorMapParam
from loopir.ir.buffer import Buffer

__all__ = ["CodeWriter", "EmitResult", "KernelSource", "NameTable"]


@attrs.frozen(eq=False)
class KernelSource:
    """What the runtime needs to know about one emitted kernel.

    Attributes
    ----------
    spec
        The split result (body, buffers, scalars, launch extents).
    params
        C parameter names, in order: one per buffer of ``spec.buffers``, then one per scalar.
    alignment
        Byte alignment each global buffer's pointer must have (vector accesses).
    shared_bytes
        Static shared memory the kernel declares.
    dynamic_shared_bytes
        Dynamic shared memory it takes at launch (0: none; see
        [`loopir.codegen_cuda.shared_memory`][loopir.codegen_cuda.shared_memory]).
    tensor_maps
        The TMA tensor maps it takes after the scalars, which the host encodes
        ([`loopir.codegen_cuda.tma`][loopir.codegen_cuda.tma]).
    """

    spec: KernelSpec
    params: tuple[str, ...]
    alignment: Mapping[Buffer, int]
    shared_bytes: int
    dynamic_shared_bytes: int = 0
    tensor_maps: tuple[TensorMapParam, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name


@attrs.frozen(eq=False)
class EmitResult:
    """The kernels of one function and its host program.

    ``source`` is the kernels' translation unit on its own; ``preamble`` (includes, helpers)
    and ``kernel_texts`` are its parts, for units that hold several functions.
    """

    source: str
    host: HostNode
    kernels: tuple[KernelSource, ...]
    host_temps: tuple[Buffer, ...]
    extern_calls: tuple[str, ...] = ()
    preamble: tuple[str, ...] = ()
    kernel_texts: tuple[str, ...] = ()


class NameTable:
    """Unique, valid C identifiers for IR variables and buffers."""

    def __init__(self) -> None:
        self.used: set[str] = set(RESERVED)
        self.names: dict[object, str] = {}

    def get(self, key: object, hint: str) -> str:
        if key in self.names:
            return self.names[key]
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "v_" + base
        if base.startswith("__"):
            base = "u" + base  # double underscores are reserved for the implementation
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        self.names[key] = name
        return name


class CodeWriter:
    """Indented lines of C++ (the kernel and host-code emitters print through it)."""

    lines: list[str]
    indent: int

    def line(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    @contextmanager
    def block(self, head: str) -> Iterator[None]:
        """``head {`` ... ``}`` around the lines printed inside (``head`` may be empty)."""
        self.line(f"{head} {{".lstrip())
        self.indent += 1
        try:
            yield
        finally:
            self.indent -= 1
            self.line("}")
