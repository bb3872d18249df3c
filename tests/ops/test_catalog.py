"""The catalog is the one home of an op: accel's builders are made from its rows, and each
row's requirements say why the op cannot run where one is missing."""

from __future__ import annotations

import dataclasses

import pytest

from accel.ops import catalog, prebuilt
from accel.ops.requirements import POSIX, Imports, Installed, OSFunctions


@pytest.mark.parametrize("op", catalog.PREBUILT_OPS, ids=lambda op: op.builder)
def test_every_row_is_a_builder_importable_by_its_name(op: catalog.PrebuiltOp) -> None:
    builder = getattr(prebuilt, op.builder)
    assert builder is prebuilt.prebuilt_builder(op.builder) is prebuilt.CPU_OP_BUILDERS[op.builder]
    assert builder.__name__ == builder.__qualname__ == op.builder
    assert builder.__module__ == "accel.ops.prebuilt"
    assert builder.__doc__ == op.summary
    assert builder.spec is op
    assert builder().name() == op.op_name
    assert op.builder in dir(prebuilt)
    assert (op.builder in prebuilt.HOST_OP_BUILDERS) is op.host
    # A row without accel's kernels loads DeepSpeed's CPU build: it cannot serve a device.
    assert op.module is not None or not op.host


def test_unknown_names_are_errors_that_list_the_known_ones() -> None:
    with pytest.raises(AttributeError, match="'NoSuchBuilder'"):
        prebuilt.NoSuchBuilder  # noqa: B018
    with pytest.raises(KeyError, match=r"CPUAdamBuilder.*got 'NoSuchBuilder'"):
        prebuilt.prebuilt_builder("NoSuchBuilder")
    with pytest.raises(KeyError, match=r"CPUAdamBuilder.*got 'NoSuchBuilder'"):
        catalog.prebuilt_op("NoSuchBuilder")


def test_deepspeed_builders_are_the_rows_with_a_deepspeed_column() -> None:
    assert "CCLCommBuilder" not in catalog.deepspeed_builders("cpu")
    assert "FusedAdamBuilder" in catalog.deepspeed_builders("cpu")
    assert "FusedAdamBuilder" not in catalog.deepspeed_builders("cuda")  # its kernels are host's
    assert set(catalog.deepspeed_builders("cuda")) == {
        op.builder for op in catalog.PREBUILT_OPS if op.host and op.deepspeed is not None
    }


def test_requirements_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OSFunctions(("pwrite",), needed_by="accel.io").missing() is None
    assert OSFunctions(("pwrite", "no_such_call"), needed_by="m").missing() == (
        "this platform has no os.pwrite/os.no_such_call (m needs POSIX)"
    )
    assert Imports("os", described_as="the os module").missing() is None
    reason = Imports("accel_no_such_module", described_as="X's bindings").missing()
    assert reason is not None
    assert reason.startswith("X's bindings (accel_no_such_module) do not import: ")
    assert Installed("pytest", why="w").missing() is None
    assert Installed("accel_no_such_module", why="it serves X").missing() == (
        "it serves X; accel_no_such_module is not installed"
    )
    assert POSIX("needs mlock").missing() is None
    monkeypatch.setattr("os.name", "nt")
    assert POSIX("needs mlock").missing() == "needs mlock"


def test_a_builder_checks_its_requirements_in_order_before_its_module() -> None:
    row = dataclasses.replace(
        catalog.prebuilt_op("CPUAdamBuilder"),
        native_module="accel.ops._not_built",
        requires=(
            Installed("pytest", why="first, met"),
            Installed("accel_no_such_module", why="second, missing"),
            Installed("accel_no_such_module_either", why="third, never asked"),
        ),
    )
    builder = prebuilt.builder_class(row)()
    assert builder.incompatibility_reason() == (
        "second, missing; accel_no_such_module is not installed"
    )
    with pytest.raises(RuntimeError, match="cannot load cpu_adam: second, missing"):
        builder.load()
    met = prebuilt.builder_class(dataclasses.replace(row, requires=()))()
    assert "accel.ops._not_built was not built" in (met.incompatibility_reason() or "")
