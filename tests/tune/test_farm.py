"""Builders and runners apart: local process pools and a Dask cluster of two worker processes."""

from __future__ import annotations

import attrs
import pytest

import loopir
from loopir.errors import CodegenError, LoopIRError
from loopir.examples.dense import dense_func
from loopir.testing import check_equivalent
from loopir.tune import tune
from loopir.tune.farm import Measure, build_artifact, load_artifact, local_farm
from loopir.tune.spaces import gpu_space
from loopir.tune.workers import DevicePool, worker_identity

FUNC = dense_func(32, 16, 48)


def test_an_artifact_loads_without_compiling_and_runs_correctly() -> None:
    sch = loopir.Schedule(FUNC, seed=3)
    gpu_space(sch)
    art = build_artifact(sch.func, "cpu")
    ms, _ = Measure(reference=FUNC)(art)  # type: ignore[misc]
    assert ms > 0
    assert load_artifact(art).func is sch.func


def test_a_tampered_artifact_is_refused() -> None:
    art = build_artifact(FUNC, "cpu")
    bad = attrs.evolve(art, library=art.library[:-1] + bytes([art.library[-1] ^ 1]))
    with pytest.raises(CodegenError, match="does not match its SHA-256; refusing to load it"):
        load_artifact(bad)


def test_a_local_farm_builds_in_its_builders_and_measures_in_its_runner() -> None:
    with local_farm("cpu", builders=2) as farm:
        res = tune(FUNC, gpu_space, trials=6, population=3, seed=0, farm=farm, show_progress=False)
    assert len(res.measured) == 6 and len(farm.log) == 6
    built_on, measured_on = {b for b, _ in farm.log}, {m for _, m in farm.log}
    assert len(measured_on) == 1 and not built_on & measured_on
    check_equivalent(FUNC, res.func, thread_order="random")


def test_device_pool_submit_goes_round_robin() -> None:
    with DevicePool(["4", "5"]) as pool:
        devs = [pool.submit(worker_identity).result()[0] for _ in range(4)]
    assert devs == ["4", "5", "4", "5"]


def test_a_dask_cluster_of_a_build_and_a_measure_worker(tmp_path) -> None:
    distributed = pytest.importorskip("distributed")
    from loopir.tune.farm import dask_farm

    # scratch space of its own: the shared default in /tmp is locked and purged by every Dask
    # process on the machine (slow under a parallel suite, with a warning)
    workers = {
        name: {"cls": distributed.Nanny, "options": {
            "nthreads": 1, "resources": {res: 1}, "local_directory": str(tmp_path / name)}}
        for name, res in (("build", "BUILD"), ("measure", "MEASURE"))
    }  # fmt: skip
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
    with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, \
            distributed.Client(cluster, timeout=60) as client:  # fmt: skip
        client.wait_for_workers(2, timeout=60)
        pids = client.run(lambda: __import__("os").getpid())
        farm = dask_farm(client, "cpu")
        res = tune(FUNC, gpu_space, trials=4, population=2, seed=1, farm=farm, show_progress=False)
        roles = client.run(lambda dask_worker: dict(dask_worker.state.total_resources))
    assert len(res.measured) == 4
    pid_of = {next(iter(roles[addr])): pid for addr, pid in pids.items()}
    assert {int(b.split(":")[1]) for b, _ in farm.log} == {pid_of["BUILD"]}
    assert {int(m.split(":")[1]) for _, m in farm.log} == {pid_of["MEASURE"]}
    check_equivalent(FUNC, res.func, thread_order="random")


def test_builds_run_under_the_callers_pass_context(monkeypatch) -> None:
    from loopir.tune import farm as farm_mod

    seen = []
    monkeypatch.setattr(farm_mod, "build_artifact",
                        lambda func, target: seen.append(loopir.PassContext.current().config))  # fmt: skip
    with loopir.PassContext(config={"tir.enable_local_pad": True}, disabled_passes=["Simplify"]):
        spec = farm_mod.ContextSpec.current()
    farm_mod._build("cpu", spec, FUNC)  # in a builder process, outside the caller's context
    assert seen == [{"tir.enable_local_pad": True}]
    assert spec.disabled_passes == ("Simplify",)


@attrs.frozen
class NumpyChecked:
    """A runner that checks a build of ``FUNC`` against numpy (not the CPU executor) and gives
    a time that depends on the candidate's schedule: the characters of its printed IR."""

    def measure_module(self, func, mod) -> float:
        import os

        import numpy as np

        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((32, 16), np.float32), rng.standard_normal((16, 48), np.float32)
        c = np.zeros((32, 48), np.float32)
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
        with open(os.environ["LOOPIR_TEST_MEASURED"], "a") as log:  # which process measured
            log.write(f"{os.getpid()}\n")
        return float(len(loopir.script(func)))


def test_a_farm_measures_with_the_runners_measure_module(tmp_path, monkeypatch) -> None:
    log = tmp_path / "measured"
    monkeypatch.setenv("LOOPIR_TEST_MEASURED", str(log))  # inherited by the farm's processes
    with local_farm("cpu", builders=2) as farm:
        res = tune(FUNC, gpu_space, trials=4, population=2, seed=2, farm=farm, runner=NumpyChecked(),
                   show_progress=False)  # fmt: skip
    assert len(res.measured) == 4 and len(farm.log) == 4
    assert res.ms == min(ms for ms, _ in res.measured) == len(loopir.script(res.func))
    pids = log.read_text().split()
    assert len(pids) == 4 and len(set(pids)) == 1 and pids[0] != str(__import__("os").getpid())


def test_a_farm_refuses_a_runner_without_measure_module() -> None:
    with local_farm("cpu", builders=1) as farm, pytest.raises(LoopIRError, match="runner must have a measure_module"):
        tune(FUNC, gpu_space, trials=2, farm=farm, runner=lambda f: 1.0, show_progress=False)
