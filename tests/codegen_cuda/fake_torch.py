"""Just enough of torch for the runtime's torch paths without a GPU (or torch).

Installed as ``sys.modules["torch"]`` around a call of a trace-build module: tensors are fake
device pointers, ``torch.empty`` records each allocation with the stream that was current
(torch's caching allocator ties a block to that stream), and ``torch.cuda`` says whether the
current stream is capturing as the test sets it.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any


class FakeDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class FakeTensor:
    """A contiguous CUDA tensor at a fake device address."""

    is_cuda = True

    def __init__(self, shape: tuple[int, ...], dtype: FakeDtype, ptr: int, device: int = 0) -> None:
        self.shape = shape
        self.dtype = dtype
        self.ptr = ptr
        self.device_index = device

    def is_contiguous(self) -> bool:
        return True

    def get_device(self) -> int:
        return self.device_index

    def data_ptr(self) -> int:
        return self.ptr

    @property
    def device(self) -> str:
        return f"cuda:{self.device_index}"


class FakeStream:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


class FakeTorch(types.ModuleType):
    """``torch`` with the attributes the runtime reads.

    Attributes
    ----------
    stream
        The raw handle of the current stream.
    capturing
        What ``torch.cuda.is_current_stream_capturing()`` answers.
    allocations
        ``(nbytes, dtype name, device, current stream)`` per ``torch.empty``.
    """

    def __init__(self) -> None:
        super().__init__("torch")
        self.Tensor = FakeTensor
        for name in ("float32", "float64", "float16", "uint8", "int32", "int64"):
            setattr(self, name, FakeDtype(name))
        self.stream = 0
        self.capturing = False
        self.allocations: list[tuple[int, str, int, int]] = []
        self._next = 0x5000_0000
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: self.stream)
        self.cuda = types.SimpleNamespace(
            is_initialized=lambda: True,
            is_current_stream_capturing=lambda: self.capturing,
            stream=self._stream_context,
            ExternalStream=lambda handle, device=None: FakeStream(handle),
            default_stream=lambda device=None: FakeStream(0),
            current_stream=lambda device=None: FakeStream(self.stream),
        )

    @contextlib.contextmanager
    def _stream_context(self, s: FakeStream) -> Iterator[None]:
        saved, self.stream = self.stream, s.cuda_stream
        try:
            yield
        finally:
            self.stream = saved

    def empty(self, n: int, dtype: FakeDtype, device: Any) -> FakeTensor:
        self.allocations.append((int(n), dtype.name, int(device), self.stream))
        t = FakeTensor((int(n),), dtype, self._next, int(device))
        self._next += (int(n) + 511) // 256 * 256
        return t

    def tensor(self, shape: tuple[int, ...], ptr: int, dtype: str = "float32") -> FakeTensor:
        """A fake CUDA tensor of ``shape`` at ``ptr``."""
        return FakeTensor(shape, getattr(self, dtype), ptr)
