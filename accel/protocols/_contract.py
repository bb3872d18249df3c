"""Contracts written once, in the protocol, and shown on every implementation.

A member's contract (what it does, Args, Returns, Raises) is the docstring of the protocol
member that declares it. Mixins and backends implement members without inheriting the
protocols (a backend never inherits a capability protocol nominally), so ``help()`` and
``inspect.getdoc`` would not find the contract from an implementation by themselves.
:func:`implements` names the protocols a class implements members of; each member the
class itself defines then shows its own docstring (one line on what this implementation
adds or changes, or nothing) followed by the protocol's.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TypeVar

from typing_extensions import get_protocol_members

_ClassT = TypeVar("_ClassT", bound=type)


def implements(*protocols: type) -> Callable[[_ClassT], _ClassT]:
    """Class decorator: the class's own members of ``protocols`` take their contracts from them.

    The class is returned unchanged but for the docstrings of the functions it defines
    whose names ``protocols`` declare: ``help()``, ``inspect.getdoc`` and IDEs that run the
    code then show the implementation's own note, then ``"<Protocol>.<member>: "`` and the
    protocol member's docstring. Capability checks (``isinstance``) are not affected.

    Args:
        protocols: The protocols, first match wins where two declare a name.

    Returns:
        The decorator.

    Raises:
        TypeError: A protocol is not a ``typing.Protocol`` class, or the class defines no
            member of it (the declaration would be stale).
    """
    members: list[tuple[type, frozenset[str]]] = []
    for protocol in protocols:
        if not getattr(protocol, "_is_protocol", False):
            raise TypeError(f"implements() takes protocol classes, got {protocol!r}")
        members.append((protocol, frozenset(get_protocol_members(protocol))))

    def decorate(cls: _ClassT) -> _ClassT:
        used: set[type] = set()
        for name, value in vars(cls).items():
            if not isinstance(value, types.FunctionType):
                continue
            for protocol, names in members:
                if name in names:
                    attach_contract(value, protocol, name)
                    used.add(protocol)
                    break
        if unused := [p.__name__ for p, _ in members if p not in used]:
            raise TypeError(f"{cls.__qualname__} defines no member of {', '.join(unused)}")
        return cls

    return decorate


def attach_contract(function: Callable[..., object], protocol: type, name: str) -> None:
    """Show the contract of ``protocol``'s member ``name`` after ``function``'s own docstring.

    For a function that becomes a member other than by being defined in a class body (a
    class attribute set at run time); :func:`implements` does this for class bodies.

    Args:
        function: The implementation.
        protocol: A protocol that has a member ``name`` (declared there or in a base).
        name: The member's name.
    """
    declaring = next(base for base in protocol.__mro__ if name in vars(base))
    contract = (vars(declaring)[name].__doc__ or "").strip()
    heading = f"{declaring.__name__}.{name}: "
    own = (function.__doc__ or "").rstrip()
    if not contract or heading in own:  # nothing to show, or shown (a second class)
        return
    if not own:
        function.__doc__ = heading + contract
        return
    # Raw text, cleaned by inspect.getdoc when read: nothing to do at import but join. The
    # heading takes the indentation of the contract's own lines so that both dedent alike.
    lines = contract.splitlines()[1:]
    indent = next((line[: len(line) - len(line.lstrip())] for line in lines if line.strip()), "")
    function.__doc__ = f"{own}\n\n{indent}{heading}{contract}"
