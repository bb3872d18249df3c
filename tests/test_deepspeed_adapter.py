"""The DeepSpeed adapter and DeepSpeed-API kernels, in this process (no install needed).

Install orders, the startup hook, DeepSpeed's own optimizers and ZeRO runs are in
tests/test_deepspeed_integration.py (subprocesses, since installing is per process).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import pathlib
import re
import types
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

deepspeed = pytest.importorskip("deepspeed")

from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator  # noqa: E402
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator  # noqa: E402

from accel.backends.cpu import CPUAccelerator  # noqa: E402
from accel.backends.cuda import CUDAAccelerator  # noqa: E402
from accel.integrations.deepspeed import comm_ops, kernels, op_builders  # noqa: E402
from accel.integrations.deepspeed.adapter import AccelDeepSpeedAccelerator  # noqa: E402


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
                 "FusedAdamBuilder", "FusedLionBuilder", "ShareMemCommBuilder"):  # fmt: skip
        builder = cpu.create_op_builder(name)
        assert isinstance(builder, op_builders.AccelOpBuilder), name
        assert builder.is_compatible()
        assert builder.sources() == []
    fallback = cpu.get_op_builder("PinMemoryBuilder")
    assert fallback is CPU_Accelerator().get_op_builder("PinMemoryBuilder")
    with pytest.raises(RuntimeError, match="prebuilt"):
        op_builders.CPUAdamBuilder().builder()


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


# DeepSpeed's kernels, written out from its C++ scalar paths (csrc/includes/cpu_*.h), as
# the reference the DeepSpeed-API kernels are held to.
def ds_adam(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int,
            lr: float, b1: float, b2: float, eps: float, wd: float, adamw: bool) -> None:  # fmt: skip
    bc1 = 1 - b1**step
    bc2 = 1 / math.sqrt(1 - b2**step)
    if wd > 0 and not adamw:
        g = g + p * wd
    m.mul_(b1).add_(g * (1 - b1))
    v.mul_(b2).add_(g * g * (1 - b2))
    denom = v.sqrt() * bc2 + eps
    if wd > 0 and adamw:
        p.add_(p * (-lr * wd))
    p.add_((m / denom) * (-lr / bc1))


def ds_lion(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, lr: float, b1: float, b2: float,
            wd: float) -> None:  # fmt: skip
    direction = torch.sign(m * b1 + g * (1 - b1))
    if wd > 0:
        p.mul_(1 - lr * wd)
    p.add_(direction * -lr)
    m.mul_(b2).add_(g * (1 - b2))


def ds_adagrad(p: torch.Tensor, g: torch.Tensor, v: torch.Tensor, lr: float, eps: float,
               wd: float) -> None:  # fmt: skip
    if wd > 0:
        g = g + p * wd
    v.add_(g * g)
    p.add_(g / (v.sqrt() + eps) * -lr)


def _tensors(n: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    p, g = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    m, v = torch.randn(n, generator=gen) * 0.1, torch.rand(n, generator=gen) * 0.1
    return p, g, m, v


hyper = st.fixed_dictionaries({
    "n": st.integers(1, 3000), "step": st.integers(1, 50), "lr": st.floats(1e-4, 1e-1),
    "b1": st.floats(0.5, 0.99), "b2": st.floats(0.9, 0.9999), "wd": st.sampled_from([0.0, 0.01, 0.1]),
    "seed": st.integers(0, 2**16),
})  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(h=hyper, adamw=st.booleans())
def test_adam_update_matches_deepspeeds_formula(h: dict[str, Any], adamw: bool) -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(7, h["lr"], h["b1"], h["b2"], 1e-8, h["wd"], adamw, False)
    p, g, m, v = _tensors(h["n"], h["seed"])
    expected = [t.clone() for t in (p, g, m, v)]
    ops.adam_update(7, h["step"], h["lr"], h["b1"], h["b2"], 1e-8, h["wd"], True, p, g, m, v)
    ds_adam(*expected, h["step"], h["lr"], h["b1"], h["b2"], 1e-8, h["wd"], adamw)
    for got, want in zip((p, m, v), (expected[0], expected[2], expected[3]), strict=True):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6)


@settings(max_examples=30, deadline=None)
@given(h=hyper)
def test_lion_update_matches_deepspeeds_formula(h: dict[str, Any]) -> None:
    ops = kernels.CPULionKernels()
    ops.create_lion(3, h["lr"], h["b1"], h["b2"], h["wd"], False)
    p, g, m, _ = _tensors(h["n"], h["seed"])
    expected = [t.clone() for t in (p, g, m)]
    ops.lion_update(3, h["step"], h["lr"], h["b1"], h["b2"], h["wd"], p, g, m)
    ds_lion(*expected, h["lr"], h["b1"], h["b2"], h["wd"])
    torch.testing.assert_close(p, expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m, expected[2], rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(h=hyper)
def test_adagrad_update_matches_deepspeeds_formula(h: dict[str, Any]) -> None:
    ops = kernels.CPUAdagradKernels()
    ops.create_adagrad(5, h["lr"], 1e-8, h["wd"], False)
    p, g, _, v = _tensors(h["n"], h["seed"])
    expected = [t.clone() for t in (p, g, v)]
    ops.adagrad_update(5, h["step"], h["lr"], 1e-8, h["wd"], p, g, v)
    ds_adagrad(*expected, h["lr"], 1e-8, h["wd"])
    torch.testing.assert_close(p, expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v, expected[2], rtol=1e-5, atol=1e-6)


def test_adam_rollback_undoes_an_adamw_step() -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    p, g, m, v = _tensors(1000, 0)
    before = [t.clone() for t in (p, m, v)]
    ops.adam_update(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    assert not torch.equal(p, before[0])
    ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    for got, want in zip((p, m, v), before, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(
        TypeError, match=r"params must be float32, bfloat16 or float16, got torch\.float64"
    ):
        ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p.double(), g, m, v)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_adam_rollback_undoes_a_half_precision_step_up_to_its_rounding(dtype: torch.dtype) -> None:
    # DeepSpeed's kernel leaves half-precision tensors untouched and returns -1 (while
    # DeepSpeedCPUAdam counts the step as undone); accel undoes it through float32 copies.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    p, g, m, v = (t.to(dtype) for t in _tensors(1000, 1))
    before = [t.clone() for t in (p, m, v)]
    ops.adam_update(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    moved = (p.float() - before[0].float()).abs().max()
    assert moved > 0
    assert ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v) == 0
    assert all(t.dtype == dtype for t in (p, m, v))
    # Back to within a few rounding steps of where it was, far closer than the step moved it.
    assert (p.float() - before[0].float()).abs().max() < moved / 4
    for got, want in zip((m, v), before[1:], strict=True):
        torch.testing.assert_close(got.float(), want.float(), rtol=0.05, atol=1e-3)


def test_fused_adam_equals_one_tensor_at_a_time() -> None:
    tensors = [_tensors(n, n) for n in (5, 300, 4097)]
    fused = [[t.clone() for t in group] for group in tensors]
    single = kernels.CPUAdamKernels()
    single.create_adam(2, 1e-3, 0.9, 0.999, 1e-8, 0.1, True, False)
    for p, g, m, v in tensors:
        single.adam_update(2, 4, 1e-3, 0.9, 0.999, 1e-8, 0.1, True, p, g, m, v)
    lists = [[group[i] for group in fused] for i in (1, 0, 2, 3)]  # grads, params, m, v
    kernels.FusedAdamKernels().multi_tensor_adam(
        2048, torch.zeros(1), lists, 1e-3, 0.9, 0.999, 1e-8, 4, 1, 1, 0.1
    )
    for want, got in zip(tensors, fused, strict=True):
        for a, b in zip(want, got, strict=True):
            assert torch.equal(a, b)


def test_fused_lion_steps_every_tensor() -> None:
    p, g, m, _ = _tensors(100, 1)
    expected = [t.clone() for t in (p, g, m)]
    kernels.FusedLionKernels().multi_tensor_lion(
        2048, torch.zeros(1), [[g], [p], [m]], 1e-3, 0.9, 0.99, 1, 0.0
    )
    ds_lion(*expected, 1e-3, 0.9, 0.99, 0.0)
    torch.testing.assert_close(p, expected[0])
    with pytest.raises(ValueError, match="tensor_lists must hold 3"):
        kernels.FusedLionKernels().multi_tensor_lion(
            2048, torch.zeros(1), [[g], [p]], 1e-3, 0.9, 0.99, 1, 0.0
        )
    with pytest.raises(ValueError, match="mode must be 0"):
        kernels.FusedAdamKernels().multi_tensor_adam(
            2048, torch.zeros(1), [[g], [p], [m], [m]], 1e-3, 0.9, 0.999, 1e-8, 1, 2, 1, 0.0
        )


def test_non_contiguous_and_bf16_state_tensors_are_updated_in_place() -> None:
    # DeepSpeed's C++ updates .contiguous() copies of such tensors and loses the update.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(4, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    base = torch.randn(8, 6)
    p = base.t()  # non-contiguous view
    g, m, v = torch.randn(6, 8), torch.zeros(6, 8, dtype=torch.bfloat16), torch.zeros(6, 8)
    before = p.clone()
    ops.adam_update(4, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)
    assert not torch.equal(base.t(), before)
    assert m.abs().sum() > 0


def test_unknown_optimizer_id_and_bad_hyperparameters_raise() -> None:
    ops = kernels.CPUAdamKernels()
    p, g, m, v = _tensors(4, 0)
    with pytest.raises(KeyError, match="no adam optimizer with id 99"):
        ops.adam_update(99, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)
    with pytest.raises(ValueError, match="betas"):
        ops.create_adam(1, 1e-3, 1.5, 0.999, 1e-8, 0.0, True, False)
    ops.create_adam(1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False)
    ops.destroy_adam(1)
    with pytest.raises(KeyError):
        ops.adam_update(1, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
        kernels.CPULionKernels().create_lion(1, -1.0, 0.9, 0.99, 0.0, False)


def test_shm_comm_module_checks_its_arguments() -> None:
    shm = op_builders.ShareMemCommBuilder().load()
    assert shm.vector_kernel_level() == 2
    shm.initialize(2, 1)
    with pytest.raises(ValueError, match="rank must be an integer in \\[0, 2\\)"):
        shm.initialize(2, 2)
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        shm.initialize(0, 0)
    assert comm_ops.register_ops() in ("accel", "deepspeed")
    assert hasattr(torch.ops.deepspeed, "inference_all_reduce_")


def test_functions_accel_lacks_come_from_deepspeeds_own_module() -> None:
    loads: list[int] = []

    def native() -> Any:
        loads.append(1)
        return types.SimpleNamespace(zenflow_adam_create=lambda *args: ("native", args))

    ops = kernels.CPUAdamKernels(native)
    assert ops.zenflow_adam_create(1, 2) == ("native", (1, 2))
    assert ops.zenflow_adam_create(3) == ("native", (3,))
    assert loads == [1]  # loaded once, on first need
    with pytest.raises(AttributeError, match="zenflow_adam_create"):
        kernels.CPUAdamKernels().zenflow_adam_create  # noqa: B018


def test_aio_handle_has_deepspeeds_methods_and_counts(tmp_path: pathlib.Path) -> None:
    from accel.integrations.deepspeed.aio import aio_handle

    handle = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 2)
    assert isinstance(handle, aio_handle)
    assert (handle.get_block_size(), handle.get_queue_depth(), handle.get_single_submit(),
            handle.get_overlap_events(), handle.get_intra_op_parallelism(),
            handle.get_alignment()) == (1 << 16, 4, False, True, 2, 8192)  # fmt: skip
    buffers = [
        handle.new_cpu_locked_tensor(50_000 + i, torch.empty(0, dtype=torch.bfloat16))
        for i in range(3)
    ]
    assert all(b.data_ptr() % 4096 == 0 and b.dtype == torch.bfloat16 for b in buffers)
    for i, b in enumerate(buffers):
        b.copy_(torch.randn(b.numel()))
        assert handle.async_pwrite(b, str(tmp_path / f"{i}.swp")) == 0
    assert handle.wait() == 3  # DeepSpeed's swapper asserts this count
    assert handle.wait() == 0
    back = [torch.empty_like(b) for b in buffers]
    for i, b in enumerate(back):
        assert handle.async_pread(b, str(tmp_path / f"{i}.swp")) == 0
    assert handle.wait() == 3
    assert all(torch.equal(a, b) for a, b in zip(buffers, back, strict=True))
    assert handle.sync_pwrite(buffers[0], str(tmp_path / "s.swp")) == 1
    assert handle.pread(back[0], str(tmp_path / "s.swp"), True, False) == 1  # validated
    assert handle.write(buffers[1], str(tmp_path / "w.swp"), True) == 0
    assert handle.read(back[1], str(tmp_path / "w.swp"), True) == 0
    assert handle.free_cpu_locked_tensor(buffers[2]) is True
    with pytest.raises(FileNotFoundError, match="nowhere"):
        handle.sync_pwrite(buffers[0], str(tmp_path / "nowhere" / "x.swp"))
