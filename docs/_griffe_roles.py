"""Griffe extension for the API reference: Sphinx-style roles read as code.

The docstrings name other objects the way Sphinx and Python's own docs do
(``:func:`set_accelerator```, ``:class:`~accel.protocols.GraphAPI```). mkdocstrings does not
read those roles and would print them as they are written; this turns each one into inline
code, showing the last component where the target starts with ``~`` (Sphinx's convention).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|mod|data|exc|obj|const):`(~?)\.?([^`]+)`")


def _as_code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite ``:role:`target``` in every docstring to ```target``` before rendering."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_as_code, obj.docstring.value)
