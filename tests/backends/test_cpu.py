"""What is specific to the CPU backend: NUMA devices, launcher variables, probes, profiler."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch
from typing_extensions import get_protocol_members

from accel import _host
from accel._validate import format_id_list, parse_id_list
from accel.backends import cpu
from accel.backends.cpu import CPUAccelerator
from accel.ops import cpu_optim
from accel.protocols import GraphAPI, ProfilerAPI, StreamAPI, missing_members


@pytest.fixture
def acc() -> CPUAccelerator:
    return CPUAccelerator()


def _fake_nodes(root: Path, cpulists: dict[int, str]) -> Path:
    for node, cpulist in cpulists.items():
        (root / f"node{node}").mkdir(parents=True)
        (root / f"node{node}" / "cpulist").write_text(cpulist + "\n")
    (root / "possible").write_text("0-3\n")  # sysfs has such files; they are not nodes
    return root


def test_every_index_names_the_cpu(acc: CPUAccelerator) -> None:
    assert acc.device_name() == acc.device_name(0) == acc.device_name(7) == "cpu"
    assert acc.device(3) == torch.device("cpu")


def test_numa_nodes_without_cpus_or_outside_affinity_are_not_devices(tmp_path: Path) -> None:
    root = _fake_nodes(tmp_path, {0: "0-3", 1: "4-7", 2: "", 3: "8-9"})
    assert _host.numa_nodes_with_cpus(root, allowed=set(range(10))) == [0, 1, 3]
    assert _host.numa_nodes_with_cpus(root, allowed={5}) == [1]
    assert _host.numa_nodes_with_cpus(tmp_path / "missing", allowed={0}) == [0]


def test_one_id_list_parser_reads_kernel_lists_and_names_the_source() -> None:
    assert parse_id_list("0-3,8,10-11\n", "cpulist") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_id_list("\n", "cpulist") == []
    with pytest.raises(ValueError, match=r"cpulist: range '3-1'"):
        parse_id_list("3-1", "cpulist")
    with pytest.raises(ValueError, match=r"cpulist must be .*bad item 'a-b'"):
        parse_id_list("a-b", "cpulist")
    assert format_id_list([5, 0, 2, 1]) == "0-2,5"


def test_device_count_is_numa_nodes_unless_local_size_is_set(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = _fake_nodes(tmp_path, {0: "0", 1: "1"})
    monkeypatch.setattr(_host, "NODE_ROOT", root)
    monkeypatch.setattr(_host.numa_nodes_with_cpus, "__defaults__", (root, {0, 1}))
    monkeypatch.delenv("LOCAL_SIZE", raising=False)
    assert acc.device_count() == 2
    monkeypatch.setenv("LOCAL_SIZE", "6")
    assert acc.device_count() == 6


@pytest.mark.parametrize(
    "value", ["two", "-1", "0", "1.5", "", "3_000", "+3", "\uff13", "\u00b2", "1" + "0" * 23]
)
def test_bad_local_size_names_the_variable(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LOCAL_SIZE", value)
    with pytest.raises(ValueError, match=f"LOCAL_SIZE.*{re.escape(repr(value))}"):
        acc.device_count()


def test_set_device_takes_what_torch_takes(acc: CPUAccelerator) -> None:
    acc.set_device("cpu:3")
    assert acc.current_device() == 3
    acc.set_device(torch.device("cpu", 1))
    assert acc.current_device() == 1
    # "cpu" is device_name(i) for every slot i, as ported code passes it: the slot stays.
    acc.set_device("cpu")
    assert acc.current_device() == 1
    with acc.device_index(0):
        assert acc.current_device() == 0
    assert acc.current_device() == 1
    with pytest.raises(ValueError, match="device_index must be a cpu device, got 'cuda:0'"):
        acc.set_device("cuda:0")
    with pytest.raises(ValueError, match="device_index must name a cpu device"):
        acc.set_device("not a device")


def test_device_properties_name_the_processor_and_its_cores(acc: CPUAccelerator) -> None:
    properties = acc.get_device_properties()
    assert properties.name == _host.cpu_model_name()
    assert properties.total_memory == acc.total_memory()
    assert properties.multi_processor_count == len(_host.allowed_cpus() & set(
        _host.numa_topology().get(acc.numa_nodes()[0], frozenset(_host.allowed_cpus()))
    ))  # fmt: skip
    assert properties.compute_capability is None


def test_current_device_follows_local_rank_then_set_device(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert acc.current_device() == 0
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert acc.current_device() == 3
    assert isinstance(acc.current_device(), int)
    acc.set_device(1)
    assert acc.current_device() == 1


@pytest.mark.parametrize("value", ["rank0", "-2", " ", "1_0", "\u0663"])
def test_bad_local_rank_names_the_variable(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LOCAL_RANK", value)
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        acc.current_device()


def test_visible_numa_nodes_restrict_the_devices(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = _fake_nodes(tmp_path, {0: "0", 1: "1", 2: "2"})
    monkeypatch.setattr(_host.numa_nodes_with_cpus, "__defaults__", (root, {0, 1, 2}))
    monkeypatch.delenv("LOCAL_SIZE", raising=False)
    env: dict[str, str] = {}
    acc.set_visible_devices_envs(env, [2, 0])
    monkeypatch.setenv(cpu.VISIBLE_NODES_ENV, env[cpu.VISIBLE_NODES_ENV])
    assert acc.numa_nodes() == [2, 0]
    assert acc.device_count() == 2
    for bad in ("5", "", "0,x", "1,1", "\u00b2", "0-1_0"):
        monkeypatch.setenv(cpu.VISIBLE_NODES_ENV, bad)
        with pytest.raises(ValueError, match=cpu.VISIBLE_NODES_ENV):
            acc.numa_nodes()


def test_communication_backend_is_ccl_only_when_bindings_import(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu._communication_backend.cache_clear()
    monkeypatch.setitem(sys.modules, "oneccl_bindings_for_pytorch", None)  # import fails
    assert acc.communication_backend_name() == "accel"  # registered, gloo underneath
    assert "ACCEL" in torch.distributed.Backend._plugins  # pyright: ignore[reportPrivateUsage]
    cpu._communication_backend.cache_clear()
    monkeypatch.setitem(sys.modules, "accel.ops._shm_comm", None)  # no native segment code
    assert acc.communication_backend_name() == "gloo"
    monkeypatch.delitem(sys.modules, "accel.ops._shm_comm")
    cpu._communication_backend.cache_clear()
    fake = types.ModuleType("oneccl_bindings_for_pytorch")
    monkeypatch.setitem(sys.modules, "oneccl_bindings_for_pytorch", fake)
    assert acc.communication_backend_name() == "ccl"
    cpu._communication_backend.cache_clear()


def test_fp16_answer_follows_onednn(acc: CPUAccelerator) -> None:
    assert acc.is_fp16_supported() is bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    assert acc.is_bf16_supported() is True


def test_synchronous_device_has_no_streams_or_graphs(acc: CPUAccelerator) -> None:
    assert not isinstance(acc, StreamAPI)
    assert not isinstance(acc, GraphAPI)
    assert acc.is_synchronized_device() is True
    assert getattr(acc, "Stream", None) is None
    assert getattr(acc, "create_graph", None) is None


def test_a_backend_that_answers_is_synchronized_device_itself_keeps_its_answer() -> None:
    # The mixin's derived answer replaced a subclass's own method when the class was made.
    class OneAsyncQueue(CPUAccelerator):
        def is_synchronized_device(self) -> bool:
            return False

    class Derived(OneAsyncQueue):
        pass

    class Plain(CPUAccelerator):
        pass

    assert OneAsyncQueue().is_synchronized_device() is False
    assert Derived().is_synchronized_device() is False  # inherits its parent's own answer
    assert Plain().is_synchronized_device() is True  # derived from having no streams


@pytest.mark.parametrize(
    ("protocol", "check"), [(StreamAPI, "supports_streams"), (GraphAPI, "supports_graphs")]
)
def test_a_missing_capability_says_which_backend_lacks_what(
    acc: CPUAccelerator, protocol: type, check: str
) -> None:
    # Calling a None marker said only "'NoneType' object is not callable".
    name = protocol.__name__
    for member in sorted(get_protocol_members(protocol)):
        expected = (
            rf"^CPUAccelerator has no {member}: it is not a {name} \(.+\); check "
            rf"isinstance\(acc, {name}\) or accel\.protocols\.{check}\(acc\) first$"
        )
        with pytest.raises(AttributeError, match=expected):
            getattr(acc, member)()
        assert getattr(acc, member, None) is None
        assert missing_members(acc, protocol) == sorted(get_protocol_members(protocol))
    assert not isinstance(acc, protocol)
    assert not issubclass(CPUAccelerator, protocol)


def test_profiler_ranges_appear_in_torch_profiler_traces(acc: CPUAccelerator) -> None:
    assert isinstance(acc, ProfilerAPI)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        acc.range_push("accel-outer-range")
        torch.ones(8).add_(1)
        acc.range_pop()
    assert "accel-outer-range" in {event.name for event in prof.events()}


def test_pin_memory_returns_the_same_host_tensor(acc: CPUAccelerator) -> None:
    host = torch.arange(4.0)
    assert acc.pin_memory(host) is host
    assert acc.is_pinned(host)
    with pytest.raises(ValueError, match="CPU tensor"):
        acc.pin_memory(torch.empty(2, device="meta"))


def test_cgroup_limits_v1_and_v2(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("1073741824\n")
    (v2 / "job" / "memory.current").write_text("1000\n")
    proc = tmp_path / "cgroup2"
    proc.write_text("0::/job\n")
    assert _host.cgroup_memory(v2, proc) == (1073741824, 1000)
    (v2 / "job" / "memory.max").write_text("max\n")
    assert _host.cgroup_memory(v2, proc) is None
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("2048\n")
    (v1 / "memory" / "memory.usage_in_bytes").write_text("512\n")
    proc1 = tmp_path / "cgroup1"
    proc1.write_text("5:cpuset:/\n4:memory:/not/mounted/here\n")
    assert _host.cgroup_memory(v1, proc1) == (2048, 512)
    assert _host.cgroup_memory(v1, tmp_path / "absent") is None


def test_total_memory_honours_a_cgroup_limit(
    acc: CPUAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_host, "cgroup_memory", lambda: (1 << 30, 1 << 29))
    assert acc.total_memory() == 1 << 30
    assert acc.available_memory() <= 1 << 29


def test_cpu_ships_the_deepspeed_cpu_op_builders(acc: CPUAccelerator) -> None:
    # The seed's CPU list (CCLCommBuilder, ShareMemCommBuilder, FusedAdamBuilder,
    # CPUAdamBuilder, AsyncIOBuilder) plus Adagrad, Lion, the FusedLion DeepSpeed lacks and
    # DeepSpeed 0.19's PinMemoryBuilder.
    assert acc.op_builder_names() == [
        "AsyncIOBuilder", "CCLCommBuilder", "CPUAdagradBuilder", "CPUAdamBuilder",
        "CPULionBuilder", "FusedAdamBuilder", "FusedLionBuilder", "PinMemoryBuilder",
        "ShareMemCommBuilder",
    ]  # fmt: skip
    module = acc.create_op_builder("CPUAdamBuilder")
    assert module is not None
    assert module.name() == "cpu_adam"
    assert module.load() is cpu_optim  # the validating module, never the raw extension


def test_builder_modules_take_tensors_and_reject_what_is_not_one(acc: CPUAccelerator) -> None:
    # The extension takes addresses, and lion_step([0x1000], ...) on it crashed the
    # interpreter; what a builder hands out validates first.
    builder = acc.create_op_builder("CPULionBuilder")
    assert builder is not None
    with pytest.raises(TypeError, match=r"params\[0\] must be a torch.Tensor, got int"):
        builder.load().lion_step([0x1000], [0x2000], [0x3000], lr=0.1, betas=(0.9, 0.99),
                                 weight_decay=0.0)  # fmt: skip


def test_a_missing_native_module_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from accel.ops.prebuilt import CPUAdamBuilder

    monkeypatch.setattr(CPUAdamBuilder, "native_module", "accel.ops._not_built")
    builder = CPUAdamBuilder()
    assert builder.is_compatible() is False
    assert "accel.ops._not_built was not built" in (builder.incompatibility_reason() or "")
    with pytest.raises(RuntimeError, match="cannot load cpu_adam"):
        builder.load()
