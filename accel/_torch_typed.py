"""torch calls whose stubs are missing, untyped or private, typed once for accel's use.

Each is looked up by name and given the signature accel calls it with, so the call sites
need no type suppressions; the tests run every one of them for real.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch


def _function(module: object, name: str) -> Callable[..., Any]:
    found: Callable[..., Any] = getattr(module, name)
    return found


def nvtx_range_push(msg: str) -> None:
    """``torch.cuda.nvtx.range_push`` (untyped in torch's stubs)."""
    _function(torch.cuda.nvtx, "range_push")(msg)


def nvtx_range_pop() -> None:
    """``torch.cuda.nvtx.range_pop`` (untyped in torch's stubs)."""
    _function(torch.cuda.nvtx, "range_pop")()


def compile_backends() -> list[str]:
    """``torch._dynamo.list_backends(exclude_tags=())``: imports torch._dynamo (about a
    second), so call it only when a backend is chosen."""
    dynamo = importlib.import_module("torch._dynamo")
    return [str(name) for name in _function(dynamo, "list_backends")(exclude_tags=())]


def privateuse1_backend_name() -> str:
    """The name an out-of-tree device gave torch's PrivateUse1 slot (private in torch)."""
    return str(_function(importlib.import_module("torch._C"), "_get_privateuse1_backend_name")())


def foreach_add_(tensors: list[torch.Tensor], scalar: float) -> None:
    """``torch._foreach_add_``: one call for the whole list, as torch's optimizers count
    their steps (private in torch's stubs)."""
    _function(torch, "_foreach_add_")(tensors, scalar)
