"""Checks of the core protocols, which every backend must pass."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from accel._validate import parse_id_list
from accel.protocols import (
    RNGAPI,
    Accelerator,
    DeviceAPI,
    DeviceLike,
    DeviceProperties,
    DTypeAPI,
    MemoryAPI,
    RuntimeAPI,
    StreamAPI,
    TensorAPI,
)
from accel.testing._framework import KitConfig, check, property_settings

MiB = 1 << 20
indices = st.integers(min_value=0, max_value=1023)
seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)


def holds(body: Callable[..., None], **strategies: st.SearchStrategy[Any]) -> None:
    """Run ``body`` as a hypothesis property; a failure re-raises with the minimal example."""
    property_settings(KitConfig.max_examples)(given(**strategies)(body))()


def raises(expected: type[Exception], mentions: str, call: Callable[[], object]) -> None:
    """Assert that ``call`` raises ``expected`` with ``mentions`` in its message."""
    try:
        call()
    except expected as error:
        assert mentions in str(error), f"{expected.__name__} does not name {mentions!r}: {error}"
        return
    except Exception as error:
        raise AssertionError(
            f"expected {expected.__name__} naming {mentions!r}, got {error!r}"
        ) from error
    raise AssertionError(f"expected {expected.__name__} naming {mentions!r}; nothing was raised")


# ---------------------------------------------------------------- DeviceAPI


@check(DeviceAPI, "device_name/device")
def device_name_agrees_with_device(acc: Accelerator) -> None:
    def body(index: int) -> None:
        name, device = acc.device_name(index), acc.device(index)
        assert torch.device(name) == device, (
            f"device_name({index})={name!r} but device({index})={device}"
        )
        assert device.type == acc.device_name(), (
            f"device({index}).type={device.type!r}, device_name()={acc.device_name()!r}"
        )

    holds(body, index=indices)
    assert torch.device(acc.device_name()) == acc.device(), "device_name() and device() disagree"


@check(DeviceAPI, "current_device/set_device")
def current_device_round_trips(acc: Accelerator) -> None:
    before = acc.current_device()
    assert isinstance(before, int), f"current_device() returned {type(before).__name__}, not int"
    assert acc.current_device_name() == acc.device_name(before), (
        "current_device_name() names another device"
    )
    try:
        for index in range(acc.device_count()):
            acc.set_device(index)
            assert acc.current_device() == index, (
                f"set_device({index}) then current_device()={acc.current_device()}"
            )
    finally:
        acc.set_device(before)


@check(DeviceAPI, "device_count/is_available/synchronize")
def counts_and_synchronize(acc: Accelerator) -> None:
    count = acc.device_count()
    assert isinstance(count, int) and count >= 1, (
        f"device_count()={count!r} on an available backend"
    )
    assert acc.is_available() is True, f"is_available()={acc.is_available()!r}"
    x = torch.ones(1024, device=acc.current_device_name()) * 2
    acc.synchronize()
    acc.synchronize(acc.current_device())
    assert float(x.sum()) == 2048.0, "work on the device gave a wrong result after synchronize()"


@check(DeviceAPI, "device_name/set_device")
def bad_device_index_is_rejected(acc: Accelerator) -> None:
    for bad, error in ((-1, ValueError), ("0", TypeError), (True, TypeError)):
        raises(error, "device_index", functools.partial(acc.device_name, bad))  # type: ignore[arg-type]
    wrong: tuple[tuple[object, type[Exception]], ...] = (
        (-1, ValueError), ("0", ValueError), ("meta:0", ValueError), (torch.device("meta"), ValueError),
        (True, TypeError), (1.0, TypeError),
    )  # fmt: skip
    for value, expected in wrong:
        raises(expected, "device_index", functools.partial(acc.set_device, value))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


@check(DeviceAPI, "set_device/device_index")
def devices_are_selected_however_torch_names_them(acc: Accelerator) -> None:
    before = acc.current_device()
    indexed = acc.device_name(0) != acc.device_name()

    def body(index: int, form: str) -> None:
        name = acc.device_name(index)
        forms: dict[str, DeviceLike] = {
            "int": index,
            "str": name,
            "torch.device": torch.device(name),
        }
        device = forms[form]
        start = acc.current_device()
        with acc.device_index(device):
            inside = acc.current_device()
            expected = index if indexed or form == "int" else start
            assert inside == expected, (
                f"inside device_index({device!r}), current_device() is {inside}, not {expected}"
            )
        assert acc.current_device() == start, f"device_index({device!r}) did not restore {start}"
        acc.set_device(device)
        assert acc.current_device() == expected, f"set_device({device!r}) did not select {expected}"

    try:
        holds(body, index=st.integers(0, acc.device_count() - 1),
              form=st.sampled_from(["int", "str", "torch.device"]))  # fmt: skip
    finally:
        acc.set_device(before)


@check(DeviceAPI, "get_device_properties")
def device_properties_describe_the_device(acc: Accelerator) -> None:
    def body(index: int) -> None:
        props = acc.get_device_properties(index)
        assert isinstance(props, DeviceProperties), f"got {type(props).__name__}"
        assert isinstance(props.name, str) and props.name, f"name={props.name!r}"
        assert props.total_memory == acc.total_memory(index), (
            f"total_memory={props.total_memory}, total_memory({index})={acc.total_memory(index)}"
        )
        count = props.multi_processor_count
        assert count is None or (isinstance(count, int) and count >= 1), f"processors={count!r}"
        capability = props.compute_capability
        assert capability is None or (
            len(capability) == 2 and all(isinstance(v, int) for v in capability)
        ), f"compute_capability={capability!r}"

    holds(body, index=st.integers(0, acc.device_count() - 1))
    assert acc.get_device_properties() == acc.get_device_properties(acc.current_device()), (
        "get_device_properties() is not the current device's"
    )


# ---------------------------------------------------------------- RNGAPI


def _draw(acc: Accelerator) -> torch.Tensor:
    device = acc.current_device_name()
    return torch.cat([torch.rand(8, device=device), torch.randn(8, device=device)]).cpu()


@check(RNGAPI, "manual_seed/initial_seed")
def seeds_are_deterministic(acc: Accelerator) -> None:
    def body(seed: int) -> None:
        acc.manual_seed(seed)
        first = _draw(acc)
        acc.manual_seed(seed)
        assert torch.equal(first, _draw(acc)), "the same seed gave different random numbers"
        assert acc.initial_seed() == seed % 2**64, (
            f"initial_seed()={acc.initial_seed()} after manual_seed({seed})"
        )

    holds(body, seed=seeds)


@check(RNGAPI, "get_rng_state/set_rng_state")
def rng_state_round_trips(acc: Accelerator) -> None:
    def body(seed: int, skipped: int) -> None:
        acc.manual_seed(seed)
        for _ in range(skipped):
            _draw(acc)
        state = acc.get_rng_state()
        assert state.dtype == torch.uint8 and state.device.type == "cpu", (
            "get_rng_state() is not a uint8 CPU tensor"
        )
        expected = _draw(acc)
        _draw(acc)
        acc.set_rng_state(state)
        assert torch.equal(expected, _draw(acc)), (
            "a restored state did not reproduce the same numbers"
        )

    holds(body, seed=seeds, skipped=st.integers(min_value=0, max_value=3))


@check(RNGAPI, "manual_seed_all/default_generator")
def generators_follow_the_seeds(acc: Accelerator) -> None:
    def body(seed: int) -> None:
        acc.manual_seed_all(seed)
        for index in range(acc.device_count()):
            got = acc.default_generator(index).initial_seed()
            assert got == seed % 2**64, (
                f"default_generator({index}).initial_seed()={got} after manual_seed_all({seed})"
            )

    holds(body, seed=seeds)
    generator = acc.default_generator(acc.current_device())
    assert generator.device.type == acc.device_name(), f"default generator is on {generator.device}"
    generator.manual_seed(1234)
    first = _draw(acc)
    acc.manual_seed(1234)
    assert torch.equal(first, _draw(acc)), "random ops do not use default_generator()"


@check(RNGAPI, "fork_rng")
def fork_rng_restores_every_generator(acc: Accelerator) -> None:
    def body(seed: int, draws: int) -> None:
        acc.manual_seed(seed)
        host = torch.Generator().manual_seed(seed).get_state()
        torch.set_rng_state(host)
        expected, expected_host = _draw(acc), torch.rand(4)
        acc.manual_seed(seed)
        torch.set_rng_state(host)
        with acc.fork_rng():
            for _ in range(draws):
                _draw(acc)
                torch.rand(4)
        assert torch.equal(_draw(acc), expected), "numbers drawn inside fork_rng() leaked out"
        assert torch.equal(torch.rand(4), expected_host), "the host generator was not restored"
        acc.manual_seed(seed)
        with acc.fork_rng(enabled=False):
            _draw(acc)
        assert not torch.equal(_draw(acc), expected), "fork_rng(enabled=False) restored state"

    holds(body, seed=seeds, draws=st.integers(min_value=1, max_value=3))


@check(RNGAPI, "manual_seed/set_rng_state")
def bad_seeds_and_states_are_rejected(acc: Accelerator) -> None:
    raises(ValueError, "seed", lambda: acc.manual_seed(2**64))
    raises(TypeError, "seed", lambda: acc.manual_seed("1"))  # type: ignore[arg-type]
    raises(TypeError, "new_state", lambda: acc.set_rng_state(torch.zeros(16)))
    raises(ValueError, "new_state", lambda: acc.set_rng_state(torch.zeros(3, dtype=torch.uint8)))


# ---------------------------------------------------------------- MemoryAPI


@check(MemoryAPI, "max_memory_allocated/max_memory_reserved")
def peaks_are_never_below_current(acc: Accelerator) -> None:
    def body(sizes: list[int]) -> None:
        tensors = [
            torch.ones(size, dtype=torch.uint8, device=acc.current_device_name()) for size in sizes
        ]
        allocated = acc.memory_allocated()
        peak = acc.max_memory_allocated()
        assert peak >= allocated >= 0, (
            f"max_memory_allocated()={peak} < memory_allocated()={allocated}"
        )
        reserved = acc.memory_reserved()
        peak_reserved = acc.max_memory_reserved()
        assert peak_reserved >= reserved >= 0, (
            f"max_memory_reserved()={peak_reserved} < memory_reserved()={reserved}"
        )
        stats = acc.memory_stats()
        assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"], (
            "memory_stats() peak < current"
        )
        del tensors

    holds(body, sizes=st.lists(st.integers(min_value=0, max_value=8 * MiB), max_size=4))


@check(MemoryAPI, "max_memory_allocated/reset_peak_memory_stats")
def peak_is_real_and_resettable(acc: Accelerator) -> None:
    size = 256 * MiB
    acc.reset_peak_memory_stats()
    baseline = acc.memory_allocated()
    transient = torch.ones(size, dtype=torch.uint8, device=acc.current_device_name())
    del transient
    peak = acc.max_memory_allocated()
    assert peak >= baseline + size * 0.9, (
        f"a {size} B allocation between two calls is missing from the peak ({peak} vs {baseline})"
    )
    acc.reset_peak_memory_stats()
    after = acc.max_memory_allocated()
    assert after < peak, f"reset_peak_memory_stats() left the peak at {after} (was {peak})"


@check(MemoryAPI, "memory_stats/total_memory/available_memory/empty_cache")
def sizes_are_consistent(acc: Accelerator) -> None:
    stats = acc.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak"):
        assert key in stats, f"memory_stats() lacks {key!r}"
    assert all(isinstance(v, int) for v in stats.values()), "memory_stats() has non-int values"
    total, available = acc.total_memory(), acc.available_memory()
    assert isinstance(total, int) and isinstance(available, int), "memory sizes must be int bytes"
    assert total >= available >= 0 and total > 0, (
        f"total_memory()={total}, available_memory()={available}"
    )
    live = torch.arange(1000, device=acc.current_device_name())
    acc.empty_cache()
    assert int(live.sum()) == 499500, "empty_cache() damaged a live tensor"


@check(MemoryAPI, "reset_accumulated_memory_stats")
def accumulated_counters_reset(acc: Accelerator) -> None:
    def accumulated() -> dict[str, int]:
        return {k: v for k, v in acc.memory_stats().items() if k.endswith((".allocated", ".freed"))}

    before = accumulated()
    acc.reset_accumulated_memory_stats()
    after = accumulated()
    grown = [k for k, v in after.items() if v > before.get(k, 0)]
    assert not grown, f"reset_accumulated_memory_stats() left {grown} above their old values"


@check(MemoryAPI, "memory_* (device_index)")
def memory_rejects_bad_device_index(acc: Accelerator) -> None:
    for method in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                   "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
                   "total_memory", "available_memory"):  # fmt: skip
        raises(ValueError, "device_index", functools.partial(getattr(acc, method), -1))


# ---------------------------------------------------------------- DTypeAPI


@check(DTypeAPI, "supported_dtypes/is_*_supported")
def dtype_answers_agree(acc: Accelerator) -> None:
    answers = (acc.is_bf16_supported(), acc.is_fp16_supported(), acc.is_triton_supported())
    assert all(isinstance(a, bool) for a in answers), (
        f"is_*_supported() must return bool, got {answers}"
    )
    dtypes = acc.supported_dtypes()
    assert torch.float32 in dtypes, "supported_dtypes() lacks float32"
    assert (torch.bfloat16 in dtypes) == acc.is_bf16_supported(), (
        "supported_dtypes() disagrees with is_bf16_supported()"
    )
    assert (torch.float16 in dtypes) == acc.is_fp16_supported(), (
        "supported_dtypes() disagrees with is_fp16_supported()"
    )
    for dtype in dtypes:
        a = torch.full((4, 4), 0.5, dtype=dtype, device=acc.current_device_name())
        assert torch.equal((a @ a).float().cpu(), torch.ones(4, 4)), f"a {dtype} matmul is wrong"


# ---------------------------------------------------------------- TensorAPI


@check(TensorAPI, "on_accelerator/pin_memory/is_pinned")
def tensor_placement_and_staging(acc: Accelerator) -> None:
    def body(shape: list[int]) -> None:
        for device in (acc.device_name(), acc.current_device_name()):
            assert acc.on_accelerator(torch.zeros(shape, device=device)), (
                f"a tensor made on {device!r} is not on_accelerator"
            )
        host = torch.arange(float(len(shape)))
        pinned = acc.pin_memory(host)
        assert torch.equal(pinned, host), "pin_memory() changed the values"
        assert acc.is_pinned(pinned), "is_pinned(pin_memory(t)) is False"

    holds(body, shape=st.lists(st.integers(min_value=0, max_value=5), max_size=3))
    assert not acc.on_accelerator(torch.empty(3, device="meta")), "a meta tensor is on_accelerator"
    raises(TypeError, "tensor", lambda: acc.on_accelerator([1.0]))  # type: ignore[arg-type]
    raises(ValueError, "align_bytes", lambda: acc.pin_memory(torch.zeros(2), align_bytes=0))


# ---------------------------------------------------------------- RuntimeAPI


@check(RuntimeAPI, "visible_devices_envs/set_visible_devices_envs")
def visible_devices_env_round_trips(acc: Accelerator) -> None:
    names = acc.visible_devices_envs()
    if not names:
        raises(RuntimeError, "environment variable", lambda: acc.set_visible_devices_envs({}, [0]))
        return

    def body(ids: list[int]) -> None:
        env: dict[str, str] = {"UNRELATED": "kept"}
        acc.set_visible_devices_envs(env, ids)
        for name in names:
            assert parse_id_list(env[name], name) == ids, (
                f"{name}={env[name]!r} does not round-trip {ids}"
            )
        assert env["UNRELATED"] == "kept", (
            "set_visible_devices_envs() changed an unrelated variable"
        )

    holds(body, ids=st.lists(st.integers(min_value=0, max_value=4096), unique=True, max_size=8))
    raises(ValueError, "local_accelerator_ids", lambda: acc.set_visible_devices_envs({}, [0, 0]))
    raises(TypeError, "local_accelerator_ids", lambda: acc.set_visible_devices_envs({}, "0,1"))  # type: ignore[arg-type]
    raises(TypeError, "current_env", lambda: acc.set_visible_devices_envs([], [0]))  # type: ignore[arg-type]


@check(RuntimeAPI, "communication_backend_name/is_synchronized_device/export_envs")
def runtime_answers(acc: Accelerator) -> None:
    name = acc.communication_backend_name()
    assert dist.is_available() and dist.is_backend_available(name), (
        f"torch.distributed has no backend {name!r}"
    )
    synchronized = acc.is_synchronized_device()
    assert synchronized is (not isinstance(acc, StreamAPI)), (
        f"is_synchronized_device()={synchronized} but StreamAPI={isinstance(acc, StreamAPI)}"
    )
    prefixes = acc.export_envs()
    assert prefixes and all(isinstance(p, str) and p for p in prefixes), (
        f"export_envs()={prefixes!r}"
    )


@check(RuntimeAPI, "get_compile_backend/set_compile_backend")
def compile_backend_round_trips(acc: Accelerator) -> None:
    before = acc.get_compile_backend()
    try:
        acc.set_compile_backend("eager")
        assert acc.get_compile_backend() == "eager", "set_compile_backend('eager') did not stick"
        raises(ValueError, "no-such-backend", lambda: acc.set_compile_backend("no-such-backend"))
        raises(TypeError, "backend", lambda: acc.set_compile_backend(None))  # type: ignore[arg-type]
        assert acc.get_compile_backend() == "eager", "a rejected backend name changed the choice"
    finally:
        acc.set_compile_backend(before)


@check(RuntimeAPI, "lazy_call")
def lazy_call_runs_the_callback(acc: Accelerator) -> None:
    calls: list[int] = []
    acc.lazy_call(lambda: calls.append(1))
    acc.synchronize()
    assert calls == [1], f"lazy_call() ran the callback {len(calls)} times"
    raises(TypeError, "callback", lambda: acc.lazy_call(42))  # type: ignore[arg-type]
