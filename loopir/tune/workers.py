"""Measuring workers, one per GPU: each process sees only its device.

A [`DevicePool`][loopir.tune.workers.DevicePool] starts one worker process per device index with
``CUDA_VISIBLE_DEVICES`` set to that index before anything CUDA is loaded, so that each worker
measures on its own GPU as device 0 and two measurements never share a GPU. Work is handed out round
robin and results come back in order. [`visible_devices`][loopir.tune.workers.visible_devices] lists
what there is: the indices in ``CUDA_VISIBLE_DEVICES`` when it is set, else one per GPU
``nvidia-smi -L`` lists, else none.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from loopir.errors import LoopIRError


def visible_devices() -> list[str]:
    """The GPU indices a pool would use (see the module docstring)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    out = subprocess.run([smi, "-L"], capture_output=True, text=True)
    if out.returncode != 0:
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def _pin(device: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = device


def worker_identity(_: Any = None) -> tuple[str | None, int]:
    """``(CUDA_VISIBLE_DEVICES, pid)`` of the worker running it (for tests and logs)."""
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


class DevicePool:
    """One worker process per device (``CUDA_VISIBLE_DEVICES`` pinned per worker).

    Parameters
    ----------
    devices
        Device indices (strings or ints); default
        [`visible_devices`][loopir.tune.workers.visible_devices].

    Raises
    ------
    LoopIRError
        When there is no device.
    """

    def __init__(self, devices: Sequence[str | int] | None = None) -> None:
        devs = [str(d) for d in (visible_devices() if devices is None else devices)]
        if not devs:
            raise LoopIRError("DevicePool: no GPU device to measure on (CUDA_VISIBLE_DEVICES / nvidia-smi)")
        if len(set(devs)) != len(devs):
            raise LoopIRError(f"DevicePool: devices listed twice: {devs}")
        ctx = mp.get_context("spawn")  # a fresh interpreter: nothing CUDA inherited
        self.devices = devs
        self._next = 0
        self._workers = [
            ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_pin, initargs=(d,))
            for d in devs
        ]

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on the next device, round robin (an Executor's ``submit``)."""
        worker = self._workers[self._next % len(self._workers)]
        self._next += 1
        return worker.submit(fn, *args)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, item ``i`` on device ``i % len(devices)``, in order."""
        futures: list[Future[Any]] = [
            self._workers[i % len(self._workers)].submit(fn, x) for i, x in enumerate(items)
        ]
        return [f.result() for f in futures]

    def close(self) -> None:
        for w in self._workers:
            w.shutdown(wait=True)

    def __enter__(self) -> DevicePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DevicePool", "visible_devices", "worker_identity"]
