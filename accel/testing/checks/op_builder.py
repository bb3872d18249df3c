"""OpBuilderAPI: builders load or say why not (only on backends that claim it)."""

from __future__ import annotations

from types import ModuleType

from hypothesis import strategies as st

from accel.protocols import (
    Accelerator,
    OpBuilderAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, raises


@check(OpBuilderAPI, "create_op_builder/get_op_builder/op_builder_names")
def op_builders_load_or_explain(acc: Accelerator) -> None:
    """Every listed builder is created, is of ``get_op_builder``'s class, and loads or says why
    not; unknown names give ``None``; a name that is not a ``str`` is rejected.
    """
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
    raises(TypeError, "class_name", lambda: ill_typed(acc).create_op_builder(3))
