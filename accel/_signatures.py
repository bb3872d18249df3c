"""What a device module's function or class takes, read from its signature.

Vendors' modules mirror ``torch.cuda`` loosely: ``torch.xpu.Event`` takes only
``enable_timing``, Gaudi's ``torch.hpu.synchronize()`` no device, torch_npu's ``NPUGraph``
no ``keep_graph``. Backends read the signature (once: the answers are cached) and pass
what the function takes. A signature that cannot be read (a C function without text
signature) counts as taking everything: the call then says itself what it refuses.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


def _parameters(function: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None


@functools.cache
def takes_keyword(function: Any, name: str) -> bool:
    """Whether ``function`` takes a keyword argument ``name`` (or ``**kwargs``).

    Args:
        function: A function or class.
        name: The keyword.

    Returns:
        ``True`` when it does, or when its signature cannot be read.
    """
    parameters = _parameters(function)
    if parameters is None:
        return True
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY)
        for p in parameters
    )


@functools.cache
def keywords(function: Any) -> frozenset[str] | None:
    """The keyword arguments ``function`` takes.

    Args:
        function: A function or class.

    Returns:
        Their names; ``None`` when it takes ``**kwargs`` or its signature cannot be read.
    """
    parameters = _parameters(function)
    if parameters is None or any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind is not p.POSITIONAL_ONLY)


@functools.cache
def takes_positional(function: Any, *, bound: bool = False) -> bool:
    """Whether ``function`` takes a positional argument.

    Args:
        function: A function or class.
        bound: ``function`` is a method read from its class: its first parameter
            (``self``/``cls``) does not count.

    Returns:
        ``True`` when it does, or when its signature cannot be read.
    """
    parameters = _parameters(function)
    if parameters is None:
        return True
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    return any(p.kind in positional for p in parameters[1 if bound else 0 :])
