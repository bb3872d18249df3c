"""OpBuilderAPI: every listed builder exists and either loads or says why it cannot."""

from __future__ import annotations

from types import ModuleType

import pytest

from accel.protocols import Accelerator, OpBuilderAPI
from tests.conftest import require


@pytest.fixture
def builders(accelerator: Accelerator) -> OpBuilderAPI:
    require(accelerator, OpBuilderAPI)
    assert isinstance(accelerator, OpBuilderAPI)
    return accelerator


def test_every_listed_builder_loads_or_explains(builders: OpBuilderAPI) -> None:
    names = builders.op_builder_names()
    assert names
    for name in names:
        builder = builders.create_op_builder(name)
        assert builder is not None, name
        assert isinstance(builder, builders.get_op_builder(name) or type(None))
        assert builder.name()
        if builder.is_compatible():
            assert builder.incompatibility_reason() is None
            assert isinstance(builder.load(), ModuleType)
        else:
            reason = builder.incompatibility_reason()
            assert reason
            with pytest.raises(RuntimeError, match="cannot load"):
                builder.load()


def test_unknown_builders_are_none(builders: OpBuilderAPI) -> None:
    assert builders.create_op_builder("NoSuchBuilder") is None
    assert builders.get_op_builder("NoSuchBuilder") is None
    with pytest.raises(TypeError, match="class_name"):
        builders.create_op_builder(None)  # type: ignore[arg-type]
