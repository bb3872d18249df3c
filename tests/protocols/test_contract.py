"""The backend contract is stable: a backend written against the first release keeps working.

The backend under test is tests/typing/pass/first_release_backend.py, frozen as its vendor
wrote it (own ``set_device(int)``, no member added since); the type checkers check it as
``Accelerator`` through tests/protocols/test_typing.py. Here: selection, set_accelerator,
isinstance, the kit, ``accel report`` and accel's functions accept it, and every place
that rejects a backend names it and each missing member.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from typing_extensions import get_protocol_members

import accel
from accel import _registry
from accel.protocols import (
    API_VERSION,
    Accelerator,
    AccumulatedStatsAPI,
    CapabilityError,
    DevicePropertiesAPI,
    ForkRNGAPI,
)
from accel.testing import check_backend
from tests.support import Installer
from tests.support.first_release import FROZEN, first_release_module

pytestmark = pytest.mark.usefixtures("fresh_selection", "fresh_registry", "no_gpu")


# What accel.Accelerator required at API_VERSION 1, written down once. Adding a name here
# breaks every backend written before it: add a capability protocol instead (see
# "Protocol evolution" in docs/architecture.md).
FIRST_RELEASE_MEMBERS = frozenset({
    # DeviceAPI
    "device_name", "device", "set_device", "current_device", "current_device_name",
    "device_count", "synchronize", "is_available",
    # RNGAPI
    "manual_seed", "manual_seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "default_generator",
    # MemoryAPI
    "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "memory_stats", "reset_peak_memory_stats", "total_memory",
    "available_memory",
    # DTypeAPI
    "is_bf16_supported", "is_fp16_supported", "supported_dtypes", "is_triton_supported",
    # TensorAPI
    "on_accelerator", "pin_memory", "is_pinned",
    # RuntimeAPI
    "is_synchronized_device", "communication_backend_name", "get_compile_backend",
    "set_compile_backend", "visible_devices_envs", "set_visible_devices_envs", "export_envs",
    "lazy_call",
})  # fmt: skip


@pytest.fixture
def board_class(monkeypatch: pytest.MonkeyPatch) -> type:
    monkeypatch.setenv("FIRST_RELEASE_BOARD", "1")
    board: type = first_release_module().BoardAccelerator
    return board


@pytest.fixture
def installed_board(install: Installer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The frozen backend as a plugin distribution, found through its entry point."""
    monkeypatch.setenv("FIRST_RELEASE_BOARD", "1")
    install("board-vendor", {"board": "board_backend:BoardAccelerator"},
            {"board_backend": FROZEN.read_text()})  # fmt: skip


def test_the_core_contract_has_not_grown_since_the_first_release() -> None:
    assert API_VERSION >= 2
    assert get_protocol_members(Accelerator) == FIRST_RELEASE_MEMBERS
    parameters = Accelerator.set_device.__annotations__
    assert parameters["device_index"] == "int", "set_device must take what backends took: int"


def test_a_first_release_backend_is_an_accelerator_and_set_accelerator_takes_it(
    board_class: type,
) -> None:
    board = board_class()
    assert isinstance(board, Accelerator)
    accel.set_accelerator(board)
    assert accel.get_accelerator() is board


@pytest.mark.parametrize("how", ["env", "auto"])
def test_a_first_release_backend_is_selected_from_its_entry_point(
    installed_board: None, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    entry = _registry.registry()["board"]
    assert entry.error is None
    assert entry.availability().available
    if how == "env":
        monkeypatch.setenv("ACCEL_BACKEND", "board")
    else:
        monkeypatch.delenv("ACCEL_BACKEND", raising=False)  # priority 5 beats the CPU's 0
    assert type(accel.get_accelerator()).__name__ == "BoardAccelerator"
    assert accel.current_selection().how == how


def test_a_first_release_backend_passes_the_kit(board_class: type) -> None:
    report = check_backend(board_class, max_examples=10)
    assert report.ok, report
    assert "DeviceAPI" in report.protocols


def test_accel_report_lists_a_first_release_backend_as_available(installed_board: None) -> None:
    from accel.report import collect

    report = collect()
    row = {row.name: row for row in report.backends}["board"]
    assert row.available, row
    assert report.selected.startswith("board")


def test_accels_functions_serve_a_first_release_backend(board_class: type) -> None:
    class Older(board_class):
        """Without the members the mixins have gained since: the capabilities say so."""

        fork_rng = None
        reset_accumulated_memory_stats = None

    board = Older()
    assert not isinstance(board, ForkRNGAPI | AccumulatedStatsAPI | DevicePropertiesAPI)
    accel.set_device("cpu:1", board)  # a form its own set_device never took
    assert board.current_device() == 1
    with accel.device_index(torch.device("cpu", 0), board):
        assert board.current_device() == 0
    assert board.current_device() == 1
    # The errors name the functions' own argument.
    with pytest.raises(ValueError, match="device must be a cpu device, got 'cuda:1'"):
        accel.set_device("cuda:1", board)
    with pytest.raises(ValueError, match="device must name a cpu device"):
        accel.device_index("cpu:x", board).__enter__()
    properties = accel.get_device_properties(accelerator=board)
    assert (properties.name, properties.total_memory) == ("cpu", board.total_memory(1))
    # A device as torch's get_device_properties takes it (what `accel port` passes on).
    assert accel.get_device_properties(torch.device("cpu", 0), board) == properties
    assert accel.get_device_properties("cpu:1", board) == properties
    with pytest.raises(ValueError, match="device_index must be a cpu device, got 'cuda:0'"):
        accel.get_device_properties("cuda:0", board)
    assert properties.multi_processor_count is None
    assert properties.compute_capability is None
    board.manual_seed(7)
    expected = torch.rand(3)
    board.manual_seed(7)
    with accel.fork_rng(accelerator=board):
        torch.rand(3)
    assert torch.equal(torch.rand(3), expected)
    with pytest.raises(CapabilityError, match=r"Older has no reset_accumulated_memory_stats"):
        accel.reset_accumulated_memory_stats(accelerator=board)


HALF_BACKEND = """
from typing import ClassVar
from accel.backends.base import Availability

class Half:
    name: ClassVar[str] = "half"
    priority: ClassVar[int] = 1

    @classmethod
    def probe(cls) -> Availability:
        return Availability(True, "always")

    def device_name(self, device_index=None):
        return "cpu"

    set_device = "not a method"
"""


def test_every_place_that_rejects_a_backend_names_it_and_each_missing_member(
    install: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("half-vendor", {"half": "half_backend:Half"}, {"half_backend": HALF_BACKEND})
    missing = ", ".join(sorted(FIRST_RELEASE_MEMBERS - {"device_name"}))
    expected = f"class Half does not satisfy accel.Accelerator; missing or not callable: {missing}"
    assert _registry.registry()["half"].error == expected
    from accel.report import collect

    row = {row.name: row for row in collect().backends}["half"]
    assert not row.available
    assert row.reason == f"failed to load: {expected}"
    monkeypatch.setenv("ACCEL_BACKEND", "half")
    accel.reset_accelerator()
    with pytest.raises(RuntimeError, match=r"'half' from half-vendor failed to load: class Half"):
        accel.get_accelerator()
    half = importlib.import_module("half_backend").Half()
    with pytest.raises(TypeError, match=f"got Half, which does not satisfy.*: {missing}$"):
        accel.set_accelerator(half)
    report = check_backend(half)
    assert not report.ok
    assert f"missing or not callable: {missing}" in str(report)
