"""One measuring worker per GPU, assigned by index (issue 19's CPU-side part): fake device
lists on a machine without a GPU."""

from __future__ import annotations

import pytest

from loopir.errors import LoopIRError
from loopir.tune.workers import DevicePool, visible_devices, worker_identity


def test_each_worker_sees_only_its_device() -> None:
    with DevicePool(["3", "7"]) as pool:
        out = pool.map(worker_identity, range(6))
    assert [dev for dev, _ in out] == ["3", "7", "3", "7", "3", "7"]
    pids = {dev: {pid for d, pid in out if d == dev} for dev in ("3", "7")}
    assert all(len(p) == 1 for p in pids.values())  # one process per device
    assert pids["3"] != pids["7"]


def test_visible_devices_reads_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0, 2")
    assert visible_devices() == ["0", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_devices() == []
    with pytest.raises(LoopIRError, match="no GPU device to measure on"):
        DevicePool()
    with pytest.raises(LoopIRError, match="listed twice"):
        DevicePool([1, 1])
