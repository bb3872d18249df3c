"""torch.distributed's collectives, typed once for accel's calls.

torch's stubs leave these partly untyped (``all_reduce``, ``all_gather``, ``barrier``) or
give them names that changed between releases (torch 2.10 renamed
``all_gather_into_tensor`` to ``all_gather_single`` and deprecated the old name, which
accel's floor, torch 2.4, has). Looking each one up here keeps accel's call sites free of
type suppressions; the tests run every one of them for real against gloo.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store  # pyright: ignore[reportMissingModuleSource]

Collective = Callable[..., Any]
"""A torch.distributed collective: tensors and options in, a ``Work`` or ``None`` out."""


def _first(*names: str) -> Collective:
    """The first of ``names`` that torch.distributed has."""
    for name in names:
        found: Collective | None = getattr(dist, name, None)
        if found is not None:
            return found
    raise AttributeError(f"torch.distributed has none of {names}")


all_reduce = _first("all_reduce")
all_gather = _first("all_gather")
broadcast = _first("broadcast")
barrier = _first("barrier")
all_gather_single = _first("all_gather_single", "all_gather_into_tensor")
reduce_scatter_single = _first("reduce_scatter_single", "reduce_scatter_tensor")
new_group = _first("new_group")
isend = _first("isend")
recv = _first("recv")

# torch's stubs lack PrefixStore's constructor, AllgatherOptions and the registry of
# group stores.
_c10d: Any = importlib.import_module("torch._C._distributed_c10d")
options: Any = _c10d
"""torch's collective options (``AllgatherOptions``, ...), untyped."""
_distributed_c10d: Any = importlib.import_module("torch.distributed.distributed_c10d")


def prefix_store(prefix: str, store: Store) -> Store:
    """``store`` with every key under ``prefix``."""
    prefixed: Store = _c10d.PrefixStore(prefix, store)
    return prefixed


def group_store(group: dist.ProcessGroup | None) -> Store:
    """The store torch made ``group`` on (its keys under the group's name), where accel's
    links meet. torch keeps it in ``_world.pg_map`` (group -> (backend, store)) from 1.x
    to 2.13; the two-level tests fail if that changes."""
    process_group = group if group is not None else dist.group.WORLD
    store: Store = _distributed_c10d._world.pg_map[process_group][1]
    return store


def own_client(store: Store) -> Store:
    """``store`` over a connection of the caller's own (``Store.clone``; torch releases
    without it give ``store`` itself). A TCPStore client serves one call at a time and
    holds its connection through a blocking wait, so two threads waiting on one client
    for keys that peers set from their other thread wait for each other, across ranks,
    until the timeout."""
    clone: Callable[[], Store] | None = getattr(store, "clone", None)
    return clone() if clone is not None else store


def check_group(group: object, call: str) -> None:
    """``TypeError`` for a ``group`` that is not a process group (or None), ``RuntimeError``
    for one that was destroyed: torch's own lookups would raise a bare ``KeyError`` or a
    weak-reference error that names neither."""
    if group is None or group == _distributed_c10d.GroupMember.NON_GROUP_MEMBER:
        return  # the world, or new_group's stand-in for a rank it left out
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(
            f"{call}(): group must be a torch.distributed ProcessGroup or None, got "
            f"{type(group).__name__} {group!r}"
        )
    if group not in _distributed_c10d._world.pg_map:
        raise RuntimeError(
            f"{call}(): the process group was destroyed (destroy_process_group); create a "
            "new process group"
        )


def outside(group: dist.ProcessGroup | None, call: str) -> bool:
    """Whether this rank is not a member of ``group`` (what ``new_group`` gave a rank it
    left out); if so, warn as torch.distributed's own collectives do before they return
    without doing anything. ``group`` is checked first (:func:`check_group`)."""
    check_group(group, call)
    if not not_member(group):
        return False
    _distributed_c10d._warn_not_in_group(call)
    return True


def not_member(group: dist.ProcessGroup | None) -> bool:
    """Whether this rank is not a member of ``group`` (``None``, the world, has them all)."""
    return group is not None and bool(_distributed_c10d._rank_not_in_group(group))
