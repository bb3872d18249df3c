"""RuntimeAPI: environment round-trips, compile backend validation, execution model."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from accel._checks import parse_id_list
from accel.protocols import Accelerator, StreamAPI

id_lists = st.lists(st.integers(min_value=0, max_value=4096), unique=True, max_size=8)


@given(ids=id_lists)
def test_visible_devices_env_round_trips(accelerator: Accelerator, ids: list[int]) -> None:
    env: dict[str, str] = {"UNRELATED": "kept"}
    accelerator.set_visible_devices_envs(env, ids)
    names = accelerator.visible_devices_envs()
    assert names
    for name in names:
        assert parse_id_list(env[name], name) == ids
    assert env["UNRELATED"] == "kept"


def test_bad_visible_device_ids_are_rejected(accelerator: Accelerator) -> None:
    env: dict[str, str] = {}
    with pytest.raises(ValueError, match="local_accelerator_ids"):
        accelerator.set_visible_devices_envs(env, [0, 0])
    with pytest.raises(ValueError, match=r"local_accelerator_ids\[1\]"):
        accelerator.set_visible_devices_envs(env, [0, -1])
    with pytest.raises(TypeError, match="local_accelerator_ids"):
        accelerator.set_visible_devices_envs(env, "0,1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="current_env"):
        accelerator.set_visible_devices_envs([], [0])  # type: ignore[arg-type]
    assert env == {}


def test_export_envs_are_prefix_strings(accelerator: Accelerator) -> None:
    prefixes = accelerator.export_envs()
    assert prefixes
    assert all(isinstance(prefix, str) and prefix for prefix in prefixes)


def test_communication_backend_is_available_in_torch(accelerator: Accelerator) -> None:
    name = accelerator.communication_backend_name()
    assert dist.is_available()
    assert dist.is_backend_available(name)


def test_synchronized_exactly_when_there_are_no_streams(accelerator: Accelerator) -> None:
    assert accelerator.is_synchronized_device() is (not isinstance(accelerator, StreamAPI))


def test_compile_backend_round_trips_and_rejects_unknown_names(accelerator: Accelerator) -> None:
    before = accelerator.get_compile_backend()
    try:
        accelerator.set_compile_backend("eager")
        assert accelerator.get_compile_backend() == "eager"
        with pytest.raises(ValueError, match=r"'no-such-backend'.*inductor"):
            accelerator.set_compile_backend("no-such-backend")
        with pytest.raises(TypeError, match="backend"):
            accelerator.set_compile_backend(None)  # type: ignore[arg-type]
        assert accelerator.get_compile_backend() == "eager"
    finally:
        accelerator.set_compile_backend(before)


def test_lazy_call_runs_the_callback(accelerator: Accelerator) -> None:
    calls: list[int] = []
    accelerator.lazy_call(lambda: calls.append(1))
    accelerator.synchronize()
    assert calls == [1]
    with pytest.raises(TypeError, match="callback"):
        accelerator.lazy_call(42)  # type: ignore[arg-type]
