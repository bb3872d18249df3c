"""OpBuilderAPI over a table of builder classes keyed by their DeepSpeed class names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from accel._validate import check_str
from accel.protocols._contract import implements
from accel.protocols.op_builder import OpBuilder, OpBuilderAPI


@implements(OpBuilderAPI)
class OpBuilderTableMixin:
    """``create_op_builder``/``get_op_builder``/``op_builder_names`` from ``op_builders``."""

    op_builders: ClassVar[Mapping[str, type[OpBuilder]]]

    def get_op_builder(self, class_name: str) -> type[OpBuilder] | None:
        """``op_builders[class_name]``, or ``None`` when the table has no such key."""
        return self.op_builders.get(check_str(class_name, "class_name"))

    def create_op_builder(self, class_name: str) -> OpBuilder | None:
        builder = self.get_op_builder(class_name)
        return builder() if builder is not None else None

    def op_builder_names(self) -> list[str]:
        return sorted(self.op_builders)
