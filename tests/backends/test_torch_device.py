"""The generic torch-device backend, driven by fake device modules registered with torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import ClassVar

import pytest
import torch

from accel.backends.devices import PrivateUse1Accelerator
from accel.backends.torch_device import DiscoveredTorchDevice
from accel.protocols import Accelerator, GraphAPI, StreamAPI
from tests.support.fakes import fake_device_module


def _register(names: list[str], device_type: str, **options: object) -> object:
    module = fake_device_module(device_type, **options)  # type: ignore[arg-type]
    torch._register_device_module(device_type, module)
    names.append(device_type)
    return module


def _backend(device_type: str) -> type[DiscoveredTorchDevice]:
    class Fake(DiscoveredTorchDevice):
        name: ClassVar[str] = f"fake{device_type}"
        priority: ClassVar[int] = 1
        visible_devices_env_names: ClassVar[tuple[str, ...]] = ("FAKE_VISIBLE_DEVICES",)

    Fake.device_type = device_type
    return Fake


def test_streams_are_present_exactly_when_the_module_has_them(registered: list[str]) -> None:
    _register(registered, "hpu", streams=True)
    _register(registered, "ipu", streams=False)
    with_streams = _backend("hpu")()
    without = _backend("ipu")()
    assert isinstance(with_streams, Accelerator)
    assert isinstance(with_streams, StreamAPI)
    assert with_streams.is_synchronized_device() is False
    assert isinstance(without, Accelerator)
    assert not isinstance(without, StreamAPI)
    assert without.is_synchronized_device() is True
    for acc in (with_streams, without):  # no HPUGraph/IPUGraph class in the modules
        assert not isinstance(acc, GraphAPI)


def test_calls_reach_the_device_module(registered: list[str]) -> None:
    module = _register(registered, "hpu")
    backend = _backend("hpu")
    assert backend.probe().available
    assert backend.probe().reason == "2 device(s)"
    acc = backend()
    assert isinstance(acc, backend)
    assert acc.device_name(1) == "hpu:1"
    assert acc.device(1) == torch.device("hpu", 1)
    acc.set_device(1)
    assert acc.current_device() == 1
    assert acc.current_device_name() == "hpu:1"
    with pytest.raises(ValueError, match="device_index must be below device_count"):
        acc.set_device(2)
    # What torch accepts: "<type>:<i>" and torch.device, and the same errors.
    acc.set_device("hpu:0")
    assert acc.current_device() == 0
    acc.set_device(torch.device("hpu", 1))
    assert acc.current_device() == 1
    with acc.device_index("hpu:0"):
        assert acc.current_device() == 0
    assert acc.current_device() == 1
    with pytest.raises(ValueError, match="device_index must be a hpu device, got 'cuda:0'"):
        acc.set_device("cuda:0")
    with pytest.raises(ValueError, match="device_index 'hpu' names no device index"):
        acc.set_device("hpu")
    properties = acc.get_device_properties(0)
    assert (properties.total_memory, properties.multi_processor_count) == (1000, None)
    assert properties.compute_capability is None
    acc.reset_accumulated_memory_stats(1)
    assert ("reset_accumulated_memory_stats", (1,), {}) in module.calls
    assert acc.memory_allocated(0) == 100
    assert acc.max_memory_reserved() == 401
    assert acc.memory_stats(0) == {"allocated_bytes.all.current": 100}  # non-int stats dropped
    assert acc.available_memory(0) == 500
    assert acc.total_memory(0) == 1000
    acc.manual_seed_all(7)
    assert acc.default_generator(0).initial_seed() == 7
    assert acc.communication_backend_name() == "hccl"  # torch registers no default for hpu
    assert isinstance(acc, StreamAPI)
    acc.Stream(0, priority=-1)
    acc.lazy_call(lambda: None)
    names = [call[0] for call in module.calls]  # type: ignore[attr-defined]
    assert "Stream" in names
    assert "_lazy_call" in names
    stream_call = next(call for call in module.calls if call[0] == "Stream")  # type: ignore[attr-defined]
    assert stream_call[2] == {"device": torch.device("hpu", 0), "priority": -1}


def test_probe_names_missing_module_functions(registered: list[str]) -> None:
    _register(registered, "hpu", without=("mem_get_info", "memory_reserved"))
    availability = _backend("hpu").probe()
    assert not availability.available
    assert availability.reason == "torch.hpu lacks memory_reserved, mem_get_info"


def test_missing_device_gives_a_clear_error() -> None:
    class Missing(DiscoveredTorchDevice):
        name: ClassVar[str] = "missing"
        device_type: ClassVar[str] = "ve"

    with pytest.raises(
        RuntimeError, match="cannot create the missing backend here: torch has no ve"
    ):
        Missing()


def test_visible_devices_env_without_a_known_variable_is_an_error(registered: list[str]) -> None:
    _register(registered, "hpu")
    backend = _backend("hpu")
    backend.visible_devices_env_names = ()
    with pytest.raises(RuntimeError, match="knows no environment variable"):
        backend().set_visible_devices_envs({}, [0])


@pytest.mark.slow  # starts an interpreter
def test_privateuse1_device_is_found_through_torch_registration() -> None:
    # Renaming PrivateUse1 is once per process, so this runs in a fresh interpreter.
    script = textwrap.dedent(
        """
        import torch
        from accel.backends.devices import PrivateUse1Accelerator
        from accel.protocols import Accelerator, StreamAPI
        from tests.support.fakes import fake_device_module

        assert not PrivateUse1Accelerator.probe().available
        torch.utils.rename_privateuse1_backend("accelfake")
        torch._register_device_module("accelfake", fake_device_module("accelfake", count=3))
        probe = PrivateUse1Accelerator.probe()
        assert probe.available, probe
        acc = PrivateUse1Accelerator()
        assert isinstance(acc, Accelerator) and isinstance(acc, StreamAPI)
        assert acc.device_count() == 3
        assert acc.device_name(2) == "accelfake:2"
        assert acc.device(2) == torch.device("accelfake:2")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert not PrivateUse1Accelerator.probe().available  # this process is untouched


def test_communication_backend_lookup_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    from accel.mixins.runtime import default_communication_backend

    monkeypatch.setattr(dist, "get_default_backend_for_device", lambda device: "vendorccl")
    assert default_communication_backend("hpu") == "hccl"  # the vendor table wins
    assert default_communication_backend("accelfake") == "vendorccl"  # torch's registry next

    def unregistered(device: str) -> str:
        raise ValueError(f"Default backend not registered for device : {device}")

    monkeypatch.setattr(dist, "get_default_backend_for_device", unregistered)
    assert default_communication_backend("accelfake") == "gloo"


class _AcceleratorGraph:
    """Stands in for torch.accelerator.Graph (capture needs real hardware)."""

    calls: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self.graph_pool: tuple[int, int] | None = None

    def capture_begin(self) -> None:
        self.calls.append(f"begin pool={self.graph_pool}")

    def capture_end(self) -> None:
        self.calls.append("end")

    def replay(self) -> None:
        self.calls.append("replay")


def test_a_device_without_its_own_graphs_uses_torch_accelerator_graph(
    registered: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch 2.13's torch.accelerator.Graph serves any accelerator that implements capture;
    # here the current accelerator is the fake "hpu", whose module has no HPUGraph.
    from accel.mixins import graph

    _register(registered, "hpu", streams=True)
    monkeypatch.setattr(torch.accelerator, "Graph", _AcceleratorGraph)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("hpu"))
    graph.accelerator_graph_class.cache_clear()
    _AcceleratorGraph.calls.clear()
    try:
        acc = _backend("hpu")()
        assert isinstance(acc, GraphAPI)
        made = acc.create_graph()
        assert isinstance(made, _AcceleratorGraph)
        with acc.capture_to_graph(made, pool=(1, 2)):
            _AcceleratorGraph.calls.append("work")
        acc.replay_graph(made)
        assert _AcceleratorGraph.calls == ["begin pool=(1, 2)", "work", "end", "replay"]
        with pytest.raises(TypeError, match="graph must be a graph from create_graph"):
            acc.replay_graph(object())  # type: ignore[arg-type]
    finally:
        graph.accelerator_graph_class.cache_clear()


def test_no_graph_capability_when_torch_accelerator_cannot_make_one(
    registered: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel.mixins import graph

    def refuse() -> None:
        raise RuntimeError("graphs are not implemented for this device")

    _register(registered, "ipu", streams=True)
    monkeypatch.setattr(
        torch.accelerator, "Graph", type("Refusing", (), {"__init__": lambda self: refuse()})
    )
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("ipu"))
    graph.accelerator_graph_class.cache_clear()
    try:
        assert not isinstance(_backend("ipu")(), GraphAPI)
    finally:
        graph.accelerator_graph_class.cache_clear()
