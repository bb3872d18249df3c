"""Griffe extension for the API reference: an implementation names the contract it keeps.

A mixin or backend names its protocols in ``@implements(...)`` and documents only what it
adds (the protocol holds Args/Returns/Raises); at run time ``implements`` shows the
protocol's docstring on each member. mkdocstrings reads the source instead, where such a
member has one line or no docstring at all (and would not be listed), so this adds the
line that says where its contract is written.
"""

from __future__ import annotations

import re
from typing import Any

import griffe
from typing_extensions import get_protocol_members

import accel.protocols

_IMPLEMENTS = re.compile(r"(?:^|\.)implements\((.*)\)$", re.DOTALL)


def _declaring(protocol_names: list[str], member: str) -> str | None:
    for name in protocol_names:
        protocol = getattr(accel.protocols, name, None)
        if protocol is None or member not in get_protocol_members(protocol):
            continue
        declaring = next(base for base in protocol.__mro__ if member in vars(base))
        return f"accel.protocols.{declaring.__name__}.{member}"
    return None


class ContractPointers(griffe.Extension):
    """Append "Contract: ``accel.protocols.P.member``." to each implemented member."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if not obj.is_function or obj.parent is None or not obj.parent.is_class:
            return
        names: list[str] = []
        for decorator in obj.parent.decorators:  # type: ignore[union-attr]
            found = _IMPLEMENTS.search(str(decorator.value))
            if found:
                names += [name.strip().rsplit(".", 1)[-1] for name in found.group(1).split(",")]
        target = _declaring(names, obj.name)
        if target is None:
            return
        pointer = f"Contract: [`{target}`][{target}]."
        if obj.docstring is None:
            obj.docstring = griffe.Docstring(pointer, parent=obj)
        else:
            obj.docstring.value = f"{obj.docstring.value}\n\n{pointer}"
