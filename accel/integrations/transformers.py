"""Hugging Face transformers' device-agnostic tests on any accel backend.

transformers' test suite runs on a device it does not know when
``TRANSFORMERS_TEST_DEVICE_SPEC`` names a Python file with ``DEVICE_NAME`` and hooks
(``MANUAL_SEED_FN``, ``EMPTY_CACHE_FN``, ``DEVICE_COUNT_FN``, ...);
``transformers.testing_utils.backend_*`` then call the hooks for that device.
:func:`render_spec` writes that file for the selected backend (``accel spec
transformers``), with every hook calling accel, and a hook left out where the backend
does not have the member behind it. Nothing here imports transformers.

transformers reads the hooks it knows and ignores the rest: 5.23 reads
``MANUAL_SEED_FN``, ``EMPTY_CACHE_FN`` and ``DEVICE_COUNT_FN``; the memory and
synchronize hooks are written too, for the versions that read them
(docs/frameworks.md has the details).

:class:`TransformersIntegration` adds ``accel spec transformers`` to the command line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from typing_extensions import override

import accel
from accel.extensions import Integration, Subcommands

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from accel.protocols import Accelerator


@dataclass(frozen=True)
class Hook:
    """One spec entry: transformers' name, the accel member it calls, what it means."""

    name: str
    member: str
    meaning: str


HOOKS = (
    Hook("MANUAL_SEED_FN", "manual_seed", "seed the current device's generator"),
    Hook("EMPTY_CACHE_FN", "empty_cache", "release cached, unused device memory"),
    Hook("DEVICE_COUNT_FN", "device_count", "number of devices"),
    Hook("MEMORY_ALLOCATED_FN", "memory_allocated", "bytes held by tensors now"),
    Hook("MAX_MEMORY_ALLOCATED_FN", "max_memory_allocated", "peak bytes held by tensors"),
    Hook("RESET_PEAK_MEMORY_STATS_FN", "reset_peak_memory_stats", "restart the peaks"),
    Hook("RESET_MAX_MEMORY_ALLOCATED_FN", "reset_peak_memory_stats", "restart the peaks"),
    Hook("SYNCHRONIZE_FN", "synchronize", "wait for the device's queued work"),
)

_TEMPLATE = '''\
"""transformers' device spec for accel's {backend} backend ({device} devices).

Written by `accel spec transformers`. Use it as
    TRANSFORMERS_TEST_DEVICE_SPEC={{this file}} python -m pytest tests/...
Every hook calls accel.get_accelerator(); a hook the backend cannot back is left out
(transformers then uses its default for it).
"""

from accel.integrations.transformers import spec_accelerator as _spec_accelerator

# Raises if this process selects a backend for another device type than the one the
# spec was written for.
_accelerator = _spec_accelerator({device})

DEVICE_NAME = {device}
{hooks}'''


def render_spec(accelerator: Accelerator | None = None) -> str:
    """The text of a ``TRANSFORMERS_TEST_DEVICE_SPEC`` file for ``accelerator``.

    ``accelerator`` defaults to :func:`accel.get_accelerator`; the file selects it again
    when transformers imports it (so the process that runs the tests needs the same
    backend: the same ``ACCEL_BACKEND``, or the same auto-detected device).

    Args:
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        The file's Python source: ``DEVICE_NAME`` and a line for each hook of
        :data:`HOOKS`, a comment instead where the backend lacks the member behind it.

    Raises:
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    acc = accel.get_accelerator() if accelerator is None else accelerator
    lines: list[str] = []
    for hook in HOOKS:
        if hook.name == "DEVICE_COUNT_FN" and acc.device().type == "cpu":
            # transformers counts no accelerators on the CPU (its multi-accelerator tests
            # skip there); accel's CPU count is NUMA nodes or LOCAL_SIZE, which would run
            # them on a two-socket host.
            lines.append(f"# {hook.name}: left out, transformers counts 0 for the CPU")
        elif callable(getattr(acc, hook.member, None)):
            lines.append(f"{hook.name} = _accelerator.{hook.member}  # {hook.meaning}")
        else:
            lines.append(f"# {hook.name}: left out, the backend has no {hook.member}()")
    return _TEMPLATE.format(
        backend=type(acc).__name__, device=json.dumps(acc.device().type),
        hooks="\n".join(lines) + "\n",
    )  # fmt: skip


def spec_accelerator(device_type: str) -> Accelerator:
    """The selected accelerator, checked to run on ``device_type`` (called by spec files).

    Args:
        device_type: The device type the spec file was written for, e.g. ``"cuda"``.

    Returns:
        :func:`~accel.get_accelerator`'s accelerator.

    Raises:
        ValueError: The selected backend runs on another device type.
        RuntimeError: No backend can be selected (see :func:`~accel.get_accelerator` for
            this and its other errors).
    """
    acc = accel.get_accelerator()
    actual = acc.device().type
    if actual != device_type:
        raise ValueError(
            f"transformers device spec: written for {device_type!r} devices, but accel "
            f"selected {type(acc).__name__} ({actual!r}) in this process; set ACCEL_BACKEND "
            "or regenerate the spec with `accel spec transformers`"
        )
    return acc


def _write_spec(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.output is not None:
        path = Path(args.output)
        # transformers imports the file by its name from the working directory.
        if path.suffix != ".py" or not path.stem.isidentifier():
            raise ValueError(
                f"accel spec: --output {args.output!r}: expected a file name like "
                "accel_spec.py (transformers imports it as a module: a Python identifier "
                "ending in .py)"
            )
        _refuse_shadowing(path)
        _refuse_overwriting(path)
    text = render_spec()
    if args.output is None:
        print(text, end="")
    else:
        try:
            Path(args.output).write_text(text)
        except OSError as error:
            raise OSError(
                f"accel spec: --output {args.output!r}: cannot write it: "
                f"{error.strerror or error}; expected a writable file in an existing directory"
            ) from None
    return 0


def _refuse_shadowing(path: Path) -> None:
    """Refuse a spec file named as a module Python finds elsewhere (``json.py``,
    ``torch.py``): imported from the working directory, it would be found first there, in
    place of that module, by transformers and anything else run from that directory."""
    import importlib.util
    from pathlib import Path

    try:  # find_spec imports nothing of a top-level name
        found = importlib.util.find_spec(path.stem)
    except (ImportError, ValueError):
        return
    if found is None:
        return
    origin = found.origin
    if origin is not None and Path(origin).resolve() == path.resolve():
        return  # the file itself: _refuse_overwriting decides
    raise ValueError(
        f"accel spec: --output {str(path)!r}: {path.stem!r} is a module Python already finds "
        f"({origin or 'a namespace package'}); the spec would shadow it where it is "
        "imported from the working directory: choose another name, such as accel_spec.py"
    )


_WRITTEN_BY = "Written by `accel spec transformers`."


def _refuse_overwriting(path: Path) -> None:
    """Refuse to replace a file that is not a spec written before (a user's own
    ``train.py`` named by mistake)."""
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:1000]
    except FileNotFoundError:
        return
    except OSError as error:
        raise ValueError(f"accel spec: --output {str(path)!r}: cannot read it: {error}") from None
    if _WRITTEN_BY not in head:
        raise ValueError(
            f"accel spec: --output {str(path)!r} exists and is not a spec `accel spec "
            "transformers` wrote; remove it or choose another name, such as accel_spec.py"
        )


class TransformersIntegration(Integration):
    """``accel spec transformers [-o FILE]``: write :func:`render_spec`'s file."""

    @override
    def add_subcommands(self, commands: Subcommands) -> None:
        """Add ``accel spec``."""
        spec = commands.add_parser(
            "spec", help="write a framework's device spec for the selected backend"
        )
        spec.add_argument(
            "framework",
            choices=["transformers"],
            help="transformers: a TRANSFORMERS_TEST_DEVICE_SPEC file for its device-agnostic tests",
        )
        spec.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of stdout")
        spec.set_defaults(handler=_write_spec)
