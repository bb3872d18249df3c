"""Checks of the optional capabilities; each runs only on backends that claim the protocol."""

from __future__ import annotations

import contextlib
import inspect
from types import ModuleType

import torch
from hypothesis import strategies as st
from typing_extensions import get_protocol_members

from accel.protocols import (
    Accelerator,
    GraphAPI,
    OpBuilderAPI,
    ProfilerAPI,
    StreamAPI,
)
from accel.testing._framework import check
from accel.testing.core_checks import holds, raises

# Random-but-representable inputs: float32 values whose "x * 2 + 1" is exact to compare.
float32s = st.floats(
    width=32, allow_nan=False, allow_infinity=False, min_value=-(2.0**100), max_value=2.0**100
)

# ---------------------------------------------------------------- StreamAPI


def _streams(acc: Accelerator) -> StreamAPI:
    assert isinstance(acc, StreamAPI)
    return acc


def _device_indices(acc: Accelerator) -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=acc.device_count() - 1)


@check(StreamAPI, "Stream/Event/current_stream/default_stream")
def stream_factories_return_torch_types(acc: Accelerator) -> None:
    s = _streams(acc)

    def body(index: int, timing: bool) -> None:
        for name, made, kind in (("Stream", s.Stream(index), torch.Stream), ("current_stream", s.current_stream(index), torch.Stream),
                                 ("default_stream", s.default_stream(index), torch.Stream), ("Event", s.Event(enable_timing=timing), torch.Event)):  # fmt: skip
            assert isinstance(made, kind), (
                f"{name}() returned {type(made).__name__}, not {kind.__name__}"
            )

    holds(body, index=_device_indices(acc), timing=st.booleans())


@check(StreamAPI, "stream")
def stream_context_switches_and_restores(acc: Accelerator) -> None:
    s = _streams(acc)

    def body(depth: int) -> None:
        before = s.current_stream()
        sides = [s.Stream() for _ in range(depth)]
        with contextlib.ExitStack() as stack:
            for level, side in enumerate(sides):
                stack.enter_context(s.stream(side))
                assert s.current_stream() == side, (
                    f"inside stream(side) at depth {level + 1}, current_stream() is not side"
                )
        assert s.current_stream() == before, "stream() did not restore the previous stream"

    holds(body, depth=st.integers(min_value=1, max_value=4))
    raises(TypeError, "stream", lambda: s.stream("side"))  # type: ignore[arg-type]


@check(StreamAPI, "Event.elapsed_time")
def event_timing_is_never_negative(acc: Accelerator) -> None:
    s = _streams(acc)

    def body(elements: int) -> None:
        start, end = s.Event(enable_timing=True), s.Event(enable_timing=True)
        start.record()
        torch.ones(elements, device=acc.current_device_name()).mul_(2)
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end)
        assert elapsed >= 0, f"elapsed_time() between two ordered events is {elapsed}"

    holds(body, elements=st.integers(min_value=1, max_value=1 << 20))


@check(StreamAPI, "Event.record/wait_event")
def events_order_streams(acc: Accelerator) -> None:
    s = _streams(acc)

    def body(elements: int) -> None:
        side, done = s.Stream(), s.Event()
        with s.stream(side):
            result = torch.arange(
                elements, device=acc.current_device_name(), dtype=torch.float64
            ).sum()
            done.record()
        s.current_stream().wait_event(done)
        assert float(result) == elements * (elements - 1) / 2, (
            "work ordered by an event gave a wrong result"
        )

    holds(body, elements=st.integers(min_value=1, max_value=1 << 16))


# ---------------------------------------------------------------- GraphAPI


@check(GraphAPI, "capture_to_graph/replay_graph")
def graph_replay_recomputes(acc: Accelerator) -> None:
    assert isinstance(acc, GraphAPI)
    static_in = torch.zeros(1024, device=acc.current_device_name())
    if isinstance(acc, StreamAPI):  # warm up off the default stream, as torch advises
        side = acc.Stream()
        side.wait_stream(acc.current_stream())
        with acc.stream(side):
            _ = static_in * 2 + 1
        acc.current_stream().wait_stream(side)
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        static_out = static_in * 2 + 1

    def body(value: float) -> None:
        static_in.fill_(value)
        acc.replay_graph(graph)
        acc.synchronize()
        got = float(static_out[0])
        expected = float(torch.tensor(value, dtype=torch.float32) * 2 + 1)
        assert got == expected, f"after replay with input {value}, output is {got}, not {expected}"

    holds(body, value=float32s)
    raises(TypeError, "graph", lambda: acc.replay_graph(object()))  # type: ignore[arg-type]


# ---------------------------------------------------------------- ProfilerAPI


@check(ProfilerAPI, "range_push/range_pop")
def profiler_ranges_nest(acc: Accelerator) -> None:
    assert isinstance(acc, ProfilerAPI)

    def body(names: list[str]) -> None:
        for name in names:
            acc.range_push(name)
        for _ in names:
            acc.range_pop()
        raises(RuntimeError, "no open range", acc.range_pop)

    holds(body, names=st.lists(st.text(max_size=40), min_size=1, max_size=8))
    raises(TypeError, "msg", lambda: acc.range_push(3))  # type: ignore[arg-type]


# ---------------------------------------------------------------- OpBuilderAPI


@check(OpBuilderAPI, "create_op_builder/get_op_builder/op_builder_names")
def op_builders_load_or_explain(acc: Accelerator) -> None:
    assert isinstance(acc, OpBuilderAPI)
    names = acc.op_builder_names()
    assert names, "op_builder_names() is empty on a backend that claims OpBuilderAPI"
    for name in names:
        builder = acc.create_op_builder(name)
        assert builder is not None, f"create_op_builder({name!r}) is None but the name is listed"
        assert acc.get_op_builder(name) is type(builder), (
            f"get_op_builder({name!r}) is not the builder's class"
        )
        if builder.is_compatible():
            assert builder.incompatibility_reason() is None, (
                f"{name} is compatible but gives a reason"
            )
            assert isinstance(builder.load(), ModuleType), f"{name}.load() did not return a module"
        else:
            assert builder.incompatibility_reason(), f"{name} is incompatible without a reason"
            raises(RuntimeError, "cannot load", builder.load)

    def body(name: str) -> None:
        assert acc.create_op_builder(name) is None, f"unknown builder {name!r} did not give None"
        assert acc.get_op_builder(name) is None, f"get_op_builder({name!r}) is not None"

    holds(body, name=st.text(max_size=40).filter(lambda n: n not in names))
    raises(TypeError, "class_name", lambda: acc.create_op_builder(3))  # type: ignore[arg-type]


# ---------------------------------------------------------------- every protocol

# Members that may not be called bare: they need a state the check cannot set up.
_PRECONDITIONS = {"range_pop"}


def members_are_real(acc: Accelerator, protocol: type) -> None:
    """Claimed members run without NotImplementedError and return a value where one is typed."""
    for member in sorted(get_protocol_members(protocol)):
        declared = getattr(protocol, member)
        signature = inspect.signature(declared)
        parameters = list(signature.parameters.values())[1:]  # without self
        if member in _PRECONDITIONS or any(
            p.default is inspect.Parameter.empty for p in parameters
        ):
            continue  # needs arguments: the property checks exercise it
        try:
            result = getattr(acc, member)()
        except NotImplementedError as error:
            raise AssertionError(
                f"{member}() raises NotImplementedError on a backend that claims it"
            ) from error
        if signature.return_annotation not in ("None", None):
            assert result is not None, (
                f"{member}() returned None; it is typed {signature.return_annotation}"
            )


def no_partial_capabilities(acc: Accelerator, protocol: type) -> None:
    """An unclaimed capability has no callable members (they could only be silent no-ops)."""
    callables = [
        member
        for member in sorted(get_protocol_members(protocol))
        if callable(inspect.getattr_static(acc, member, None))
    ]
    assert not callables, (
        f"{', '.join(callables)} callable, but the backend is not a {protocol.__name__}"
    )
