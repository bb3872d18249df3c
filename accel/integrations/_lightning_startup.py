"""What ``accel-lightning.pth`` hands the import of ``lightning`` to: once Lightning's
package has executed, importing :mod:`accel.integrations.lightning` registers
``accelerator="accel"`` and accel's strategies with Fabric and the Trainer.

Lightning reads no entry point for accelerators, so without this a process had to import
the integration before ``Fabric(accelerator="accel")``. The .pth line only puts a finder
on ``sys.meta_path`` that waits for the name ``lightning``: interpreter start imports
nothing of accel, and ``import accel`` nothing of Lightning. This module lives outside
``accel.integrations.lightning`` because that package imports Lightning.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec

    from _typeshed.importlib import MetaPathFinderProtocol

TARGET = "lightning"


def lightning_spec(
    hook: MetaPathFinderProtocol, path: Sequence[str] | None, target: ModuleType | None
) -> ModuleSpec | None:
    """Lightning's own spec, from the finders other than ``hook`` (the .pth's finder), set
    to register accel's names once the package has executed; None where no finder knows
    ``lightning`` (the import then fails as it would without accel).

    ``hook`` stays on ``sys.meta_path`` until a spec it returned is executed: a probe such
    as ``importlib.util.find_spec("lightning")`` gets a spec that is never executed, and
    the ``import lightning`` after it must still find the hook.

    Args:
        hook: The finder ``accel-lightning.pth`` put on ``sys.meta_path``.
        path: The ``path`` the import system passed to the hook's ``find_spec``.
        target: The ``target`` the import system passed to the hook's ``find_spec``.

    Returns:
        Lightning's spec with its loader's ``exec_module`` wrapped, the spec unchanged
        where its loader has no ``exec_module``, or None where no finder knows
        ``lightning``.
    """
    for finder in list(sys.meta_path):
        if finder is hook:
            continue
        find_spec: Any = getattr(finder, "find_spec", None)
        spec: ModuleSpec | None = find_spec(TARGET, path, target) if find_spec else None
        if spec is not None:
            break
    else:
        return None
    loader: Any = spec.loader
    if loader is None or not callable(getattr(loader, "exec_module", None)):
        return spec  # a namespace package or a loader of another kind: left alone
    execute = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        if hook in sys.meta_path:  # Lightning is being imported: the hook's work is done
            sys.meta_path.remove(hook)
        execute(module)
        register()

    # The loader is this spec's own (one per module for path-based finders).
    loader.exec_module = exec_module
    return spec


def register() -> None:
    """Import :mod:`accel.integrations.lightning`, which registers its names on import.

    A failure is a warning, not an exception: ``import lightning`` must keep working in
    every process of an environment where accel is installed, most of which never ask for
    ``accelerator="accel"``.
    """
    try:
        importlib.import_module("accel.integrations.lightning")
    except Exception as error:
        warnings.warn(
            "accel: accelerator='accel' is not registered with Lightning: importing "
            f"accel.integrations.lightning failed ({type(error).__name__}: {error})",
            RuntimeWarning,
            stacklevel=2,
        )
