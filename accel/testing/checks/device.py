"""DeviceAPI: names, selection, counts, properties."""

from __future__ import annotations

import functools

import torch
from hypothesis import strategies as st

from accel import functions
from accel.protocols import (
    Accelerator,
    DeviceAPI,
    DeviceLike,
    DeviceProperties,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, indices, is_int, raises


@check(DeviceAPI, "device_name/device")
def device_name_agrees_with_device(acc: Accelerator) -> None:
    """``device_name(i)`` and ``device(i)`` name the same device, of ``device_name()``'s type,
    for every device (any index where names carry none, as ``"cpu"``)."""

    def body(index: int) -> None:
        name, device = acc.device_name(index), acc.device(index)
        assert torch.device(name) == device, (
            f"device_name({index})={name!r} but device({index})={device}"
        )
        assert device.type == acc.device_name(), (
            f"device({index}).type={device.type!r}, device_name()={acc.device_name()!r}"
        )

    counted = _indexed(acc)
    holds(body, index=st.integers(0, acc.device_count() - 1) if counted else indices)
    assert torch.device(acc.device_name()) == acc.device(), "device_name() and device() disagree"


def _indexed(acc: Accelerator) -> bool:
    """Whether ``acc`` names its devices by index, and so counts them (not ``"cpu"``)."""
    return acc.device_name(0) != acc.device_name()


@check(DeviceAPI, "current_device/set_device")
def current_device_round_trips(acc: Accelerator) -> None:
    """``current_device_name()`` names ``current_device()``, ``set_device(i)`` makes
    ``current_device()`` ``i`` for every device, and the device current before is restored
    after.
    """
    before = acc.current_device()
    assert is_int(before), f"current_device() returned {type(before).__name__}, not int"
    if _indexed(acc):
        assert 0 <= before < acc.device_count(), (
            f"current_device()={before}, outside [0, device_count()={acc.device_count()})"
        )
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
    """An available backend counts at least one device, says it is available, and work on the
    device reads back right after ``synchronize()``.
    """
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
    """``device_name`` and ``set_device`` reject bad indices with an error naming
    ``device_index``, ``accel.set_device`` naming its ``device`` (it takes a negative index
    as torch does: it leaves the current device); on a backend that names its devices by index,
    ``set_device`` rejects ``device_count()`` too.
    """
    for bad, error in ((-1, ValueError), ("0", TypeError), (True, TypeError)):
        raises(error, "device_index", functools.partial(ill_typed(acc).device_name, bad))
    # The protocol's set_device takes an int; a backend may take more, but never a wrong one.
    raises(ValueError, "device_index", functools.partial(acc.set_device, -1))
    if _indexed(acc):  # a backend that counts its devices has none past the count
        before = acc.current_device()
        try:
            raises(ValueError, "device_index",
                   functools.partial(acc.set_device, acc.device_count()))  # fmt: skip
        finally:
            acc.set_device(before)
    for not_an_index in ("0", True, 1.0):
        raises((TypeError, ValueError), "device_index",
               functools.partial(ill_typed(acc).set_device, not_an_index))  # fmt: skip
    # accel.set_device takes every form torch does, for every backend (a negative index is
    # torch's "leave the current device": functions.set_device does not reach the backend).
    wrong: tuple[tuple[object, type[Exception]], ...] = (
        ("0", ValueError), ("meta:0", ValueError), (torch.device("meta"), ValueError),
        (True, TypeError), (1.0, TypeError),
    )  # fmt: skip
    for value, expected in wrong:  # naming its own argument, `device`
        raises(expected, "device ",
               functools.partial(functions.set_device, ill_typed(value), acc))  # fmt: skip


@check(DeviceAPI, "accel.set_device/accel.device_index")
def devices_are_selected_however_torch_names_them(acc: Accelerator) -> None:
    """``accel.set_device`` and ``accel.device_index`` select a device named by an index, a
    string or a ``torch.device``; ``device_index`` restores the previous one after; a
    negative index (and ``device_index(None)``) leaves the current device, as in torch.
    """
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
        with functions.device_index(device, acc):
            inside = acc.current_device()
            expected = index if indexed or form == "int" else start
            assert inside == expected, (
                f"inside device_index({device!r}), current_device() is {inside}, not {expected}"
            )
        assert acc.current_device() == start, f"device_index({device!r}) did not restore {start}"
        # As in torch: a negative index, and device_index(None), leave the current device.
        for nothing in (-1, None):
            with functions.device_index(nothing, acc):
                assert acc.current_device() == start, f"device_index({nothing!r}) changed it"
        functions.set_device(-1, acc)
        assert acc.current_device() == start, "accel.set_device(-1) changed the device"
        functions.set_device(device, acc)
        assert acc.current_device() == expected, f"set_device({device!r}) did not select {expected}"

    try:
        holds(body, index=st.integers(0, acc.device_count() - 1),
              form=st.sampled_from(["int", "str", "torch.device"]))  # fmt: skip
    finally:
        acc.set_device(before)


@check(DeviceAPI, "accel.get_device_properties")
def device_properties_describe_the_device(acc: Accelerator) -> None:
    """Through the backend's own get_device_properties where it has one (DevicePropertiesAPI).

    ``accel.get_device_properties`` gives every device a :class:`DeviceProperties` with a name,
    the backend's ``total_memory``, a processor count >= 1 or ``None`` and an ``(int, int)``
    compute capability or ``None``; ``None`` asks for the current device.
    """

    def body(index: int) -> None:
        props = functions.get_device_properties(index, acc)
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
    current = functions.get_device_properties(None, acc)
    assert current == functions.get_device_properties(acc.current_device(), acc), (
        "get_device_properties() is not the current device's"
    )
