"""Shared fixtures: every available backend runs the per-protocol conformance suites."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import accel
from accel import _registry
from accel._registry import available_backends
from accel.protocols import Accelerator
from tests.support import Installer

pytest_plugins = ["pytester"]

# The machine is shared and noisy: no per-example deadline; a moderate example count keeps
# the whole suite within minutes.
settings.register_profile(
    "accel",
    deadline=None,
    max_examples=int(os.environ.get("ACCEL_HYPOTHESIS_EXAMPLES", "40")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("accel")

if "PYTEST_XDIST_WORKER" in os.environ:
    # One xdist worker per core: torch's own threads would double the busy threads, and
    # OpenMP's waiting threads spin (`pytest -m "not slow"`: 73 s of CPU -> 68 s). The
    # processes tests start keep their own settings.
    import torch

    torch.set_num_threads(1)


AVAILABLE_BACKENDS: list[Accelerator] = [backend() for backend in available_backends()]


@pytest.fixture(scope="session", autouse=True)
def launcher_logs_in_pytests_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every torchrun or ``accel run`` a test starts writes its log directory under pytest's
    temporary directory, which pytest prunes: without a ``--log-dir`` torch's launcher makes
    a new ``torchelastic_*`` directory in /tmp on each launch and never removes it.
    ``PET_LOG_DIR`` is the variable form of ``--log-dir`` that both launchers read."""
    os.environ.setdefault("PET_LOG_DIR", str(tmp_path_factory.mktemp("launcher-logs")))


@pytest.fixture(
    scope="session",
    params=AVAILABLE_BACKENDS,
    ids=[getattr(type(b), "name", type(b).__name__) for b in AVAILABLE_BACKENDS],
)
def accelerator(request: pytest.FixtureRequest) -> Accelerator:
    """One instance of each available backend; conformance tests run once per backend."""
    backend: Accelerator = request.param
    return backend


def require(accelerator: object, capability: type) -> None:
    """Skip the calling test when ``accelerator`` lacks the optional ``capability``."""
    if not isinstance(accelerator, capability):
        pytest.skip(f"{type(accelerator).__name__} does not provide {capability.__name__}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the `soak` reruns out unless the ``-m`` expression names them (so ``-m "not
    gpu"`` does not bring them in), and skip the `gpu` group cleanly without a CUDA GPU."""
    import torch

    if "soak" not in str(config.getoption("markexpr", "")):
        soak = [item for item in items if "soak" in item.keywords]
        if soak:
            config.hook.pytest_deselected(items=soak)
            items[:] = [item for item in items if "soak" not in item.keywords]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none is visible to torch)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_selection() -> Iterator[None]:
    """Forget the process's accelerator before and after a selection test."""
    accel.reset_accelerator()
    yield
    accel.reset_accelerator()


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    _registry.reset_registry()
    yield
    _registry.reset_registry()


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    """Install a fake distribution: a dist-info with entry points, plus its modules.

    importlib.metadata finds distributions on sys.path, so this is real entry-point
    discovery, without pip.
    """
    added: list[str] = []

    def _install(
        distribution: str,
        entries: dict[str, str],
        modules: dict[str, str],
        group: str = "accel.backends",
    ) -> None:
        root = tmp_path / distribution
        info = root / f"{distribution}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n"
        )
        lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
        (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")
        for module, source in modules.items():
            (root / f"{module}.py").write_text(source)
            added.append(module)
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()

    yield _install
    for module in added:
        sys.modules.pop(module, None)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA backend unavailable, as on a CPU-only machine (also on a GPU machine)."""
    from accel.backends.base import Availability
    from accel.backends.cuda import CUDAAccelerator

    monkeypatch.setattr(
        CUDAAccelerator, "probe", classmethod(lambda cls: Availability(False, "hidden by test"))
    )


@pytest.fixture
def default_backend_map() -> Iterator[dict[str, str]]:
    """torch's device -> backend map, put back as it was after the test."""
    import torch.distributed as dist

    table = dist.Backend.default_device_backend_map
    saved = dict(table)
    yield table
    table.clear()
    table.update(saved)
