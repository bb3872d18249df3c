"""A backend's op builders, made from the catalog when first read.

Backends name their builders in a class attribute (``op_builders``). Building that table
means importing the catalog and generating a class per op, which selecting a backend does
not need: :class:`PrebuiltOpBuilders` defers it to the first lookup, so
``get_accelerator()`` stays free of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from typing_extensions import override

from accel.protocols.op_builder import OpBuilder


class PrebuiltOpBuilders(Mapping[str, type[OpBuilder]]):
    """accel's prebuilt op builders for a device type, by DeepSpeed class name.

    A read-only mapping; the builder classes are those of
    :func:`accel.ops.prebuilt.op_builders_for`, made on the first lookup.
    """

    def __init__(self, device_type: str) -> None:
        """Name the builders of ``device_type`` without making them.

        Args:
            device_type: A torch device type (``"cpu"`` gets every op; any other type the
                ops whose kernels run on the host).
        """
        self._device_type = device_type
        self._builders: Mapping[str, type[OpBuilder]] | None = None

    def _table(self) -> Mapping[str, type[OpBuilder]]:
        if self._builders is None:
            from accel.ops.prebuilt import op_builders_for

            self._builders = op_builders_for(self._device_type)
        return self._builders

    @override
    def __getitem__(self, name: str) -> type[OpBuilder]:
        return self._table()[name]

    @override
    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    @override
    def __len__(self) -> int:
        return len(self._table())

    @override
    def __repr__(self) -> str:
        return f"PrebuiltOpBuilders({self._device_type!r})"
