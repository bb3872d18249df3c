"""Backends against stand-ins with the exact signatures of vendors' device modules.

Each stand-in mirrors the source it names; the backends must call what those modules take
(the fakes of tests/support/fakes.py take anything).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import pytest
import torch

from accel.backends import cuda
from accel.backends.cuda import CUDAAccelerator
from accel.backends.devices import HPUAccelerator, XPUAccelerator
from accel.mixins.dtype import TorchDTypeMixin
from accel.mixins.graph import TorchGraphMixin, capture_graph_class
from accel.protocols import GraphObjectAPI, StreamAPI
from tests.support.fakes import FakeNVML, fake_device_module

GIB = 1 << 30


def _gaudi() -> types.ModuleType:
    """habana_frameworks.torch.hpu as gaudi-pytorch-bridge 1.19.0 defines it: synchronize()
    takes no device (hpu/__init__.py:151), get_device_properties returns a str
    (HPUDevice.cpp:216), Event takes only enable_timing (events.py:47), HPUGraph() takes
    nothing and capture_begin(dry_run) (graphs.py:42-58), graph(hpu_graph, stream,
    dry_run) no pool (graphs.py:158)."""
    module = fake_device_module("hpu", count=1)
    log: list[str] = []

    class Event:
        def __new__(cls, enable_timing: bool = False) -> Event:
            return object.__new__(cls)

    class HPUGraph:
        def __init__(self) -> None:
            pass

        def capture_begin(self, dry_run: bool = False) -> None:
            log.append("capture_begin")

        def capture_end(self) -> None:
            log.append("capture_end")

    class graph:  # Gaudi's name
        def __init__(self, hpu_graph: HPUGraph, stream: Any = None, dry_run: bool = False):
            self.hpu_graph = hpu_graph

        def __enter__(self) -> None:
            self.hpu_graph.capture_begin()

        def __exit__(self, *exc_info: object) -> None:
            self.hpu_graph.capture_end()

    def synchronize() -> None:
        log.append("synchronize")

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return 95 * GIB, 96 * GIB

    def get_device_properties(device: Any = None) -> str:
        return "(sramBaseAddress=1024, dramSize=103079215104, device_type=GAUDI2)"

    for name, value in {
        "Event": Event, "HPUGraph": HPUGraph, "graph": graph, "synchronize": synchronize,
        "mem_get_info": mem_get_info, "get_device_properties": get_device_properties,
    }.items():  # fmt: skip
        setattr(module, name, value)
    module.log = log  # type: ignore[attr-defined]
    return module


def test_gaudis_module_serves_every_member_it_has(registered: list[str]) -> None:
    module = _gaudi()
    torch._register_device_module("hpu", module)
    registered.append("hpu")
    acc = HPUAccelerator()
    acc.synchronize()
    acc.synchronize(0)
    with pytest.raises(ValueError, match="device_index"):
        acc.synchronize(1)  # one device: checked here, as the module takes no index
    assert acc.total_memory() == 96 * GIB
    assert acc.get_device_properties().total_memory == 96 * GIB
    assert acc.get_compile_backend() == "hpu_backend"
    assert isinstance(acc, StreamAPI)
    acc.Event(enable_timing=True)
    with pytest.raises(ValueError, match=r"blocking=True: torch.hpu.Event takes no 'blocking'"):
        acc.Event(blocking=True)
    with acc.capture_to_graph(acc.create_graph()):
        pass
    assert isinstance(acc, GraphObjectAPI)
    with acc.Graph():
        pass
    with pytest.raises(ValueError, match=r"keep_graph=True: torch.hpu.HPUGraph"):
        acc.Graph(keep_graph=True)
    with pytest.raises(ValueError, match=r"pool=\(0, 1\): torch.hpu.HPUGraph shares no memory"):
        acc.Graph(pool=(0, 1))
    with pytest.raises(ValueError, match=r"pool=.*torch.hpu.graph shares no memory pools"):
        acc.capture_to_graph(acc.create_graph(), pool=(0, 1))
    assert module.log.count("capture_begin") == module.log.count("capture_end") == 2  # type: ignore[attr-defined]


def test_xpus_streams_are_served_by_torch_xpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.xpu (2.13) has Stream, Event, stream, current_stream and set_stream but no
    # default_stream: the default is the current stream, as DeepSpeed's XPU accelerator says.
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 2)
    current = object()
    monkeypatch.setattr(torch.xpu, "current_stream", lambda device=None: current)
    acc = XPUAccelerator()
    assert isinstance(acc, StreamAPI)
    assert acc.is_synchronized_device() is False
    assert acc.default_stream() is current


def _register_graphs(registered: list[str], device_type: str, graph: type) -> list[Any]:
    module = fake_device_module(device_type)
    calls: list[Any] = []
    setattr(module, f"{device_type.upper()}Graph", graph)
    module.graph = lambda g, pool=None, stream=None: contextlib.nullcontext()  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    torch._register_device_module(device_type, module)
    registered.append(device_type)
    return calls


class _Graphs(TorchGraphMixin):
    device_type = "maia"


def test_a_graph_class_without_capture_modes_refuses_one_when_made(registered: list[str]) -> None:
    calls: list[Any] = []

    class XPUGraph:  # torch/xpu/graphs.py:73: capture_begin(self, pool=None)
        def __new__(cls, keep_graph: bool = False) -> XPUGraph:
            return object.__new__(cls)

        def __init__(self, keep_graph: bool = False) -> None:
            pass

        def capture_begin(self, pool: Any = None) -> None:
            calls.append(pool)

        def capture_end(self) -> None:
            pass

    _register_graphs(registered, "maia", XPUGraph)
    acc = _Graphs()
    with pytest.raises(ValueError, match=r"capture_error_mode='relaxed'.*takes no capture_error"):
        acc.Graph(capture_error_mode="relaxed")
    with acc.Graph(pool=(1, 2)):
        pass
    assert calls == [(1, 2)]


def test_a_graph_class_without_keep_graph_is_made_without_it(registered: list[str]) -> None:
    class MAIAGraph:  # torch_npu/npu/graphs.py:597-607: NPUGraph() takes nothing
        def __new__(cls) -> MAIAGraph:
            return object.__new__(cls)

        def __init__(self) -> None:
            pass

        def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
            pass

        def capture_end(self) -> None:
            pass

    _register_graphs(registered, "maia", MAIAGraph)
    graph = _Graphs().Graph(capture_error_mode="relaxed")
    assert isinstance(graph, MAIAGraph)
    with graph:
        pass


def test_torch_cuda_graph_captures_accels_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.cuda.graph.__enter__ passes check_input_liveness (torch/cuda/graphs.py); the
    # CPU build's CUDAGraph base is a dummy, so a stand-in with its signature replaces it.
    calls: list[dict[str, Any]] = []

    class CUDAGraph:
        def __new__(cls, keep_graph: bool = False) -> CUDAGraph:
            return object.__new__(cls)

        def __init__(self, keep_graph: bool = False) -> None:
            pass

        def capture_begin(
            self, pool: Any = None, capture_error_mode: str = "global",
            check_input_liveness: bool = False,
        ) -> None:  # fmt: skip
            calls.append({"mode": capture_error_mode, "liveness": check_input_liveness})

        def capture_end(self) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", CUDAGraph)
    for name in ("synchronize", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda *args: None)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
    monkeypatch.setattr(torch.cuda.graphs.graph, "default_capture_stream", object())
    capture_graph_class.cache_clear()
    try:
        acc = CUDAAccelerator()
        with acc.capture_to_graph(acc.Graph(capture_error_mode="relaxed")):
            pass
    finally:
        capture_graph_class.cache_clear()
    assert calls == [{"mode": "global", "liveness": False}]  # what torch.cuda.graph asked


GPUS = ["GPU-8a1f0000-0000-0000-0000-000000000000", "GPU-8b2e0000-0000-0000-0000-000000000000"]


def test_cudas_free_memory_names_a_bad_index_and_falls_back_where_nvml_cannot_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cuda, "_nvml", lambda: FakeNVML(GPUS))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (777, 999))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    acc = CUDAAccelerator()
    with pytest.raises(ValueError, match="device_index must be below device_count"):
        acc.available_memory(5)
    # The legacy MIG form (drivers before R470) is not mapped to NVML: torch answers.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"MIG-{GPUS[1]}/1/0")
    assert acc.available_memory(0) == 777


class _Dtypes(TorchDTypeMixin):
    device_type = "maia"


@pytest.mark.parametrize("takes_the_flag", [True, False])
def test_bf16_counts_native_support_only_where_the_module_can_say(
    registered: list[str], takes_the_flag: bool
) -> None:
    module = fake_device_module("maia")
    if takes_the_flag:  # torch/xpu/__init__.py: including_emulation defaults to True

        def is_bf16_supported(including_emulation: bool = True) -> bool:
            return including_emulation

    else:

        def is_bf16_supported() -> bool:  # type: ignore[misc]
            return True

    module.is_bf16_supported = is_bf16_supported  # type: ignore[attr-defined]
    torch._register_device_module("maia", module)
    registered.append("maia")
    assert _Dtypes().is_bf16_supported() is not takes_the_flag
