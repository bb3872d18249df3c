"""What an op needs besides its native module, each able to say why it is missing here.

A row of :data:`accel.ops.catalog.PREBUILT_OPS` lists these in ``requires``; the op's
builder checks them in order, before it imports the native module. Checking one imports
nothing but what it checks, so the catalog stays free to import.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class OSFunctions:
    """Functions of :mod:`os` the op calls, which POSIX systems have and others may not."""

    names: tuple[str, ...]
    """The functions, without ``os.`` (``("pwrite", "preadv")``)."""
    needed_by: str
    """The module that calls them, named in the reason (``"accel.io"``)."""

    def missing(self) -> str | None:
        """Why the op cannot run here, or ``None`` when every function exists."""
        if all(hasattr(os, name) for name in self.names):
            return None
        listed = "/".join(f"os.{name}" for name in self.names)
        return f"this platform has no {listed} ({self.needed_by} needs POSIX)"


@dataclass(frozen=True)
class POSIX:
    """A POSIX system (``os.name == "posix"``), for an op that calls libc directly."""

    why: str
    """The reason given elsewhere (``"page-locking needs POSIX mlock(2)"``)."""

    def missing(self) -> str | None:
        """``why`` off POSIX, else ``None``."""
        return None if os.name == "posix" else self.why


@dataclass(frozen=True)
class Imports:
    """A module of another project that must import; accel neither builds nor ships it."""

    module: str
    """The module (``"oneccl_bindings_for_pytorch"``)."""
    described_as: str
    """What it is, in the reason (``"oneCCL's torch bindings"``)."""

    def missing(self) -> str | None:
        """Why the module does not import, or ``None`` when it does."""
        try:
            importlib.import_module(self.module)
        except ImportError as error:
            return f"{self.described_as} ({self.module}) do not import: {error}"
        return None


@dataclass(frozen=True)
class Installed:
    """A package that must be installed. It is found, not imported: importing deepspeed
    takes seconds, and the check runs for every builder ``accel report`` lists."""

    module: str
    """The package's top-level module (``"deepspeed"``)."""
    why: str
    """Why the op needs it, in the reason."""

    def missing(self) -> str | None:
        """Why the op cannot run without the package, or ``None`` when it is installed."""
        if importlib.util.find_spec(self.module) is not None:
            return None
        return f"{self.why}; {self.module} is not installed"


Requirement = OSFunctions | POSIX | Imports | Installed
"""Anything a row's ``requires`` may list."""
