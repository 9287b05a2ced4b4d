"""Shared pytest configuration: golden files, GPU/nvcc markers, hypothesis profiles."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

GOLDEN_DIR = Path(__file__).parent / "golden"

# CI draws fresh examples every run (no derandomize: a fixed sequence hid a wrong result for
# weeks); the run's seed is printed in the header (``--hypothesis-seed`` replays it) and a
# failure prints its reproduction blob. Found failures are kept in the example database
# (.hypothesis/) locally; one found in CI is to be pinned with @example in its test. 10 examples
# a property in CI (50 until session 22, 20 until session 24; `dev` keeps 20): CI must finish in
# 15 minutes on 2 cores, and as every run draws fresh examples, they add up over the runs
# (`thorough` is there for long surveys). Properties that set their own count keep it.
settings.register_profile(
    "ci",
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


_SEED_KEY = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    # A seed for the whole run, chosen here (unless --hypothesis-seed gave one) so that it can
    # be printed and replayed; it still differs from run to run. Under pytest-xdist the
    # controller chooses it and hands it to every worker (pytest_configure_node), so the
    # printed seed is the one each test ran with.
    from hypothesis import core

    seed = config.getoption("--hypothesis-seed", default=None)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        seed = workerinput["loopir_hypothesis_seed"]
        core.global_force_seed = seed
    elif seed is None:
        seed = random.SystemRandom().randrange(2**32)
        core.global_force_seed = seed
    config.stash[_SEED_KEY] = seed


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # pytest-xdist: a worker is starting
    node.workerinput["loopir_hypothesis_seed"] = node.config.stash[_SEED_KEY]


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.stash.get(_SEED_KEY, None)
    return f"hypothesis seed: {seed} (replay with --hypothesis-seed={seed})"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    # Also under -q, where the header is not shown: a failure must be replayable.
    seed = config.stash.get(_SEED_KEY, None)
    terminalreporter.write_line(f"hypothesis seed: {seed} (replay with --hypothesis-seed={seed})")
    order = getattr(config.option, "randomly_seed", None)
    if order is not None:  # pytest-randomly's test order
        terminalreporter.write_line(f"test order: replay with --randomly-seed={order}")


@pytest.fixture(scope="session", autouse=True)
def _session_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Every build of the session caches into one temporary root, not the user's cache.

    Set through the cache module's override, and in ``LOOPIR_CACHE_DIR`` for the processes
    that tests start. A test about the default location clears both (monkeypatch). Under
    pytest-xdist the workers of one run share the root (the run's base directory, above each
    worker's): a CUTLASS unit two workers need is compiled once (the cache's per-key file lock
    makes the second wait for the first, then hit), which saves minutes of nvcc in CI.
    """
    from loopir import _cache_dir

    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.getbasetemp().parent / "loopir-cache"
        root.mkdir(exist_ok=True)
    else:
        root = tmp_path_factory.mktemp("loopir-cache")
    old_env = os.environ.get("LOOPIR_CACHE_DIR")
    _cache_dir.set_cache_root(root)
    os.environ["LOOPIR_CACHE_DIR"] = str(root)
    yield root
    _cache_dir.set_cache_root(None)
    if old_env is None:
        os.environ.pop("LOOPIR_CACHE_DIR", None)
    else:
        os.environ["LOOPIR_CACHE_DIR"] = old_env


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden IR files under tests/golden/ instead of comparing",
    )


def _has_gpu() -> bool:
    try:
        import pycuda.driver as drv

        drv.init()
        return drv.Device.count() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = None
    has_nvcc = shutil.which("nvcc") is not None
    for item in items:
        if "gpu" in item.keywords:
            if gpu is None:
                gpu = _has_gpu()
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="no CUDA GPU with pycuda on this machine"))
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(pytest.mark.skip(reason="nvcc is not on PATH"))


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """``golden(name, text)``: compare ``text`` with tests/golden/<name>.txt (or rewrite it)."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / f"{name}.txt"
        text = text.rstrip("\n") + "\n"
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        if not path.exists():
            # Writing it would make the test pass without checking anything.
            pytest.fail(
                f"golden file {path} is missing; write it with pytest --update-golden and "
                "review it before committing"
            )
        expected = path.read_text()
        if expected != text:
            import difflib

            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(True), text.splitlines(True), "golden", "actual"
                )
            )
            pytest.fail(f"golden mismatch for {name} (rerun with --update-golden if intended):\n{diff}")

    return check
