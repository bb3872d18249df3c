"""The DeepSpeed adapter (accel's accelerator behind DeepSpeed's accelerator interface), in this
process; installing into DeepSpeed is in test_install.py (subprocesses: it is per process)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pathlib
import re
from typing import Any

import pytest
import torch

deepspeed = pytest.importorskip("deepspeed")

from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator  # noqa: E402
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator  # noqa: E402

from accel.backends.cpu import CPUAccelerator  # noqa: E402
from accel.backends.cuda import CUDAAccelerator  # noqa: E402
from accel.integrations.deepspeed import op_builders  # noqa: E402
from accel.integrations.deepspeed.adapter import AccelDeepSpeedAccelerator  # noqa: E402
from accel.ops.catalog import PREBUILT_OPS, PrebuiltOp, prebuilt_op  # noqa: E402


@pytest.fixture
def cpu() -> AccelDeepSpeedAccelerator:
    return AccelDeepSpeedAccelerator(CPUAccelerator())


def test_every_abstract_method_is_implemented_and_documented() -> None:
    adapter_class = AccelDeepSpeedAccelerator
    assert not getattr(adapter_class, "__abstractmethods__", set())
    for name in DeepSpeedAccelerator.__abstractmethods__:
        member = adapter_class.__dict__.get(name)
        assert member is not None, f"{name} is inherited, not implemented"
        target = member.fget if isinstance(member, property) else member
        assert inspect.getdoc(target), f"{name} has no docstring"


def _names_deepspeed_calls() -> set[str]:
    root = pathlib.Path(deepspeed.__file__).parent
    pattern = re.compile(r"get_accelerator\(\)\.([A-Za-z_][A-Za-z0-9_]*)")
    names: set[str] = set()
    for path in root.rglob("*.py"):
        if "accelerator" in path.parts:
            continue  # the backends themselves
        names.update(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
    return names


def test_answers_every_call_deepspeed_makes(cpu: AccelDeepSpeedAccelerator) -> None:
    names = _names_deepspeed_calls()
    assert len(names) > 50  # the scan works
    # Calls DeepSpeed's own CPU backend cannot answer either are CUDA-only and guarded
    # (communication_backend_version); the adapter forwards those to DeepSpeed's backend.
    native = CPU_Accelerator()
    missing = sorted(n for n in names if not hasattr(cpu, n) and hasattr(native, n))
    assert not missing


CPU_ANSWERS = [
    ("device_name", ()),
    ("device_name", (0,)),
    ("device", (0,)),
    ("current_device_name", ()),
    ("is_synchronized_device", ()),
    ("use_host_timers", ()),
    ("resolves_data_dependency", ()),
    ("handles_memory_backpressure", ()),
    ("current_stream", ()),
    ("default_stream", ()),
    ("create_graph", ()),
    ("is_current_stream_capturing", ()),
    ("is_available", ()),
    ("is_fp64_supported", ()),
    ("is_triton_supported", ()),
    ("get_compile_backend", ()),
    ("visible_devices_envs", ()),
    ("op_builder_dir", ()),
    ("random", ()),
]


@pytest.mark.parametrize(("method", "args"), CPU_ANSWERS)
def test_cpu_answers_as_deepspeeds_cpu_backend(
    cpu: AccelDeepSpeedAccelerator, method: str, args: tuple[Any, ...]
) -> None:
    assert getattr(cpu, method)(*args) == getattr(CPU_Accelerator(), method)(*args)


def test_cpu_without_streams_or_graphs_behaves_as_deepspeeds_cpu(
    cpu: AccelDeepSpeedAccelerator,
) -> None:
    native = CPU_Accelerator()
    assert cpu.Stream is None
    assert native.Stream is None
    assert cpu.Event is None
    assert native.Event is None
    with cpu.stream(None), cpu.capture_to_graph(None):
        pass
    cpu.replay_graph(None)
    cpu.range_push("step")
    cpu.range_pop()
    assert cpu.FloatTensor is torch.FloatTensor is native.FloatTensor
    assert cpu.BFloat16Tensor is native.BFloat16Tensor
    assert cpu.device_name("0") == "cpu"  # ZeRO-3 passes os.environ["LOCAL_RANK"]
    assert cpu.on_accelerator(torch.ones(1)) is True
    assert cpu.get_rss() > 0  # DeepSpeed's CPU extra, forwarded to its backend


def test_communication_backend_is_accels_choice(cpu: AccelDeepSpeedAccelerator) -> None:
    # DeepSpeed's CPU backend says gloo; accel's says "accel" (gloo plus shared-memory sums
    # within a node), registered with torch.distributed, so DeepSpeed's init uses it.
    assert cpu.communication_backend_name() == cpu.accel.communication_backend_name()
    assert cpu.communication_backend_name() in ("accel", "ccl", "gloo")


def test_set_visible_devices_on_the_cpu_writes_rank_slots(cpu: AccelDeepSpeedAccelerator) -> None:
    env: dict[str, str] = {}
    cpu.set_visible_devices_envs(env, [0, 1])
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1"}  # not NUMA ids: DeepSpeed's launcher semantics


def test_unknown_attribute_names_the_adapter(cpu: AccelDeepSpeedAccelerator) -> None:
    with pytest.raises(AttributeError, match="no_such_method"):
        cpu.no_such_method()


def test_bad_device_index_is_rejected_by_accel(cpu: AccelDeepSpeedAccelerator) -> None:
    with pytest.raises((TypeError, ValueError), match="device_index"):
        cpu.device_name("zero")


def test_builders_on_the_cpu_are_accels_and_others_fall_back(
    cpu: AccelDeepSpeedAccelerator,
) -> None:
    for name in ("AsyncIOBuilder", "CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder",
                 "FusedAdamBuilder", "FusedLionBuilder", "PinMemoryBuilder",
                 "ShareMemCommBuilder"):  # fmt: skip
        builder = cpu.create_op_builder(name)
        assert isinstance(builder, op_builders.AccelOpBuilder), name
        assert builder.is_compatible()
        assert builder.sources() == []
    fallback = cpu.get_op_builder("CCLCommBuilder")  # DeepSpeed keeps its oneCCL builder
    assert fallback is CPU_Accelerator().get_op_builder("CCLCommBuilder")
    with pytest.raises(RuntimeError, match="prebuilt"):
        op_builders.CPUAdamBuilder().builder()


@pytest.mark.parametrize(
    "op", [op for op in PREBUILT_OPS if op.deepspeed is not None], ids=lambda op: op.builder
)
def test_every_row_with_a_deepspeed_column_is_a_deepspeed_builder(op: PrebuiltOp) -> None:
    assert op.deepspeed is not None
    builder = getattr(op_builders, op.builder)
    assert builder is op_builders.accel_builder("cpu", op.builder)
    assert builder.__name__ == op.builder
    assert builder.__module__ == "accel.integrations.deepspeed.op_builders"
    assert op.deepspeed.name == builder.NAME
    assert op.deepspeed.build_var == builder.BUILD_VAR
    module_name, _, class_name = op.deepspeed.kernels.partition(":")
    loaded = builder().load()
    assert type(loaded) is getattr(importlib.import_module(module_name), class_name)
    assert builder().load() is loaded  # one per process, as a compiled module is
    assert builder().absolute_name() == f"{op.native_module} (accel, prebuilt)"


def test_rows_deepspeed_keeps_and_bad_kernel_references_are_errors() -> None:
    with pytest.raises(LookupError, match="CCLCommBuilder"):
        op_builders.builder_class(prebuilt_op("CCLCommBuilder"))
    with pytest.raises(AttributeError, match="'CCLCommBuilder'"):
        op_builders.CCLCommBuilder  # noqa: B018
    with pytest.raises(TypeError, match=r"DeepSpeedModule subclass, got '[\w.]+:NoSuch'"):
        op_builders._kernels_class("accel.integrations.deepspeed.kernels:NoSuch")


def test_cuda_adapter_uses_cuda_semantics_without_a_gpu() -> None:
    # Unverified on a GPU here: this checks what can be checked without one.
    cuda = AccelDeepSpeedAccelerator(CUDAAccelerator())
    assert cuda.device(1) == torch.device("cuda", 1)
    assert cuda.device_name(1) == "cuda:1"
    factory = cuda.FloatTensor
    assert factory.keywords == {"dtype": torch.float32, "device": "cuda"}
    assert cuda.visible_devices_envs()[0] == "CUDA_VISIBLE_DEVICES"
    assert cuda.Stream is not None
    assert cuda.Event is not None
    assert cuda.get_op_builder("CPUAdamBuilder") is op_builders.CPUAdamBuilder  # host-side
    fused = cuda.get_op_builder("FusedAdamBuilder")
    assert fused is not None
    assert not issubclass(fused, op_builders.AccelOpBuilder)
    assert cuda.get_op_builder("ShareMemCommBuilder") is not op_builders.ShareMemCommBuilder


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []


class StreamingCPU(CPUAccelerator):
    """The CPU plus recording streams, graphs and ranges: the CUDA-shaped path."""

    def __init__(self) -> None:
        super().__init__()
        self.record = _Recorder()

    def _log(self, name: str, *args: Any) -> str:
        self.record.calls.append((name, args))
        return name

    def Stream(self, device_index: int | None = None, priority: int = 0) -> Any:  # type: ignore[override]
        return self._log("Stream", device_index, priority)

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Any:  # type: ignore[override]
        return self._log("Event", enable_timing, blocking, interprocess)

    def stream(self, stream: Any) -> Any:  # type: ignore[override]
        self._log("stream", stream)
        return contextlib.nullcontext()

    def current_stream(self, device_index: int | None = None) -> Any:  # type: ignore[override]
        return self._log("current_stream", device_index)

    def default_stream(self, device_index: int | None = None) -> Any:  # type: ignore[override]
        return self._log("default_stream", device_index)

    def create_graph(self) -> Any:  # type: ignore[override]
        return self._log("create_graph")

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:  # type: ignore[override]
        self._log("capture_to_graph", graph, pool, stream)
        return contextlib.nullcontext()

    def replay_graph(self, graph: Any) -> None:  # type: ignore[override]
        self._log("replay_graph", graph)


def test_capabilities_the_backend_has_are_forwarded() -> None:
    from accel.protocols import GraphAPI, StreamAPI

    acc = StreamingCPU()
    assert isinstance(acc, StreamAPI)
    assert isinstance(acc, GraphAPI)
    adapter = AccelDeepSpeedAccelerator(acc)
    assert adapter.Stream is not None
    assert adapter.Event is not None
    adapter.Stream(priority=-1)
    adapter.Stream(device=torch.device("cpu", 0))
    adapter.Event(enable_timing=True)
    with adapter.stream("s"):
        pass
    assert adapter.current_stream(0) == "current_stream"
    assert adapter.default_stream() == "default_stream"
    graph = adapter.create_graph()
    with adapter.capture_to_graph(graph, "pool", "s"):
        pass
    adapter.replay_graph(graph)
    assert acc.record.calls == [
        ("Stream", (None, -1)),
        ("Stream", (0, 0)),
        ("Event", (True, False, False)),
        ("stream", ("s",)),
        ("current_stream", (0,)),
        ("default_stream", (None,)),
        ("create_graph", ()),
        ("capture_to_graph", ("create_graph", "pool", "s")),
        ("replay_graph", ("create_graph",)),
    ]


def test_torchs_old_memory_names_answer_as_the_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = CPUAccelerator()
    calls: list[tuple[str, int | None]] = []
    for name, answer in (
        ("memory_reserved", 11),
        ("max_memory_reserved", 13),
        ("reset_peak_memory_stats", None),
    ):
        monkeypatch.setattr(
            backend, name, lambda i=None, n=name, a=answer: calls.append((n, i)) or a
        )
    adapter = AccelDeepSpeedAccelerator(backend)
    assert adapter.memory_cached(1) == 11
    assert adapter.max_memory_cached(1) == 13
    adapter.reset_max_memory_allocated(1)
    adapter.reset_max_memory_cached(None)
    assert calls == [
        ("memory_reserved", 1),
        ("max_memory_reserved", 1),
        ("reset_peak_memory_stats", 1),
        ("reset_peak_memory_stats", None),
    ]
