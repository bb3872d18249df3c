"""RuntimeAPI: visible-devices environment, compile backend, lazy calls."""

from __future__ import annotations

import torch.distributed as dist
from hypothesis import strategies as st

from accel._validate import parse_id_list
from accel.protocols import (
    Accelerator,
    RuntimeAPI,
    StreamAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, raises


@check(RuntimeAPI, "visible_devices_envs/set_visible_devices_envs")
def visible_devices_env_round_trips(acc: Accelerator) -> None:
    """``set_visible_devices_envs`` writes the ids into every variable
    ``visible_devices_envs()`` names, so that they parse back the same, leaves other variables
    alone, and rejects bad arguments.
    """
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
    raises(
        TypeError,
        "local_accelerator_ids",
        lambda: ill_typed(acc).set_visible_devices_envs({}, "0,1"),
    )
    raises(TypeError, "current_env", lambda: ill_typed(acc).set_visible_devices_envs([], [0]))


@check(RuntimeAPI, "communication_backend_name/is_synchronized_device/export_envs")
def runtime_answers(acc: Accelerator) -> None:
    """``communication_backend_name()`` names a backend torch.distributed has,
    ``is_synchronized_device()`` is ``True`` exactly when the backend is not a ``StreamAPI``,
    and ``export_envs()`` lists non-empty prefixes, ``"ACCEL"`` first.
    """
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
    assert prefixes[0] == "ACCEL", (
        f"export_envs()={prefixes!r}: ACCEL comes first (ACCEL_BACKEND must reach every rank)"
    )


@check(RuntimeAPI, "get_compile_backend/set_compile_backend")
def compile_backend_round_trips(acc: Accelerator) -> None:
    """``set_compile_backend("eager")`` sticks, and an unknown or non-``str`` name is rejected
    without changing the choice; the choice before is restored after.
    """
    before = acc.get_compile_backend()
    try:
        acc.set_compile_backend("eager")
        assert acc.get_compile_backend() == "eager", "set_compile_backend('eager') did not stick"
        raises(ValueError, "no-such-backend", lambda: acc.set_compile_backend("no-such-backend"))
        raises(TypeError, "backend", lambda: ill_typed(acc).set_compile_backend(None))
        assert acc.get_compile_backend() == "eager", "a rejected backend name changed the choice"
    finally:
        acc.set_compile_backend(before)


@check(RuntimeAPI, "lazy_call")
def lazy_call_runs_the_callback(acc: Accelerator) -> None:
    """``lazy_call`` has run the callback exactly once when ``synchronize()`` returns, and
    rejects what is not callable.
    """
    calls: list[int] = []
    acc.lazy_call(lambda: calls.append(1))
    acc.synchronize()
    assert calls == [1], f"lazy_call() ran the callback {len(calls)} times"
    raises(TypeError, "callback", lambda: ill_typed(acc).lazy_call(42))
