"""accel's start-up hook: ``accel-startup.pth``, installed at the top of site-packages,
imports this module in every interpreter of an environment where accel is installed.

Lightning and DeepSpeed read no registration that could bring accel in, so accel's code
for them runs when a process imports them. Importing this module puts one finder,
:data:`HOOKS`, at the front of ``sys.meta_path``; once a module it watches has executed,
it runs accel's hook for it:

- ``lightning``, in every process (:data:`LIGHTNING`): importing
  :mod:`accel.integrations.lightning` registers ``accelerator="accel"`` and accel's
  strategies with Fabric and the Trainer;
- DeepSpeed's accelerator, report and communication modules, where ``ACCEL_DEEPSPEED`` is
  set (:data:`DEEPSPEED`): :mod:`accel.integrations.deepspeed._install` puts accel under
  DeepSpeed (``accel.integrations.deepspeed.install()`` before ``import deepspeed`` watches
  the same modules).

What it keeps to, running in every interpreter (pip's and every tool's included):

- cheap: it imports nothing but ``os`` and ``sys`` (site.py has imported both), and
  nothing of accel until a watched module is imported; a lookup of any other module name
  costs the finder one dict lookup;
- never in the way: an accel that cannot be imported, or a bad ``ACCEL_DEEPSPEED``, is a
  ``RuntimeWarning`` naming the cause, and the interpreter and the framework carry on
  without accel. Only a hook raises, and only on purpose: DeepSpeed's refuses a release
  it does not support, a ``DS_ACCELERATOR`` that disagrees with accel and a bad
  ``ACCEL_DEEPSPEED``, when deepspeed is imported, where the error belongs.

The module is outside the ``accel`` package so that a start-up imports no ``accel``, and
so that a broken ``accel`` cannot break a start-up. (PYTEST_DONT_REWRITE: pytest would
warn, in every test run of an environment with accel installed, that it cannot rewrite
the asserts of a module imported before it started; this one has none.)
"""

import os
import sys

# Not typing.TYPE_CHECKING: this module runs in every interpreter, and importing typing
# costs 2-3 ms (and __future__ 0.2 ms: the annotations that name these are strings). mypy
# and pyright read a module-level TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

LIGHTNING = {"lightning": "accel.integrations.lightning"}
"""Lightning's hook: importing the integration registers accel's names."""

DEEPSPEED = {
    "deepspeed.accelerator.real_accelerator": (
        "accel.integrations.deepspeed._install:accelerator_imported"
    ),
    "deepspeed.env_report": "accel.integrations.deepspeed._install:report_imported",
    "deepspeed.comm.torch": "accel.integrations.deepspeed._install:comm_imported",
    "deepspeed.runtime.zero.stage_1_and_2": "accel.integrations.deepspeed._install:zero_imported",
}
"""DeepSpeed's hooks: the module that picks its accelerator, ``ds_report``'s tables, its
torch communication backend, and ZeRO-1/2's optimizer."""

DEEPSPEED_ENV = "ACCEL_DEEPSPEED"
"""``1`` watches :data:`DEEPSPEED` in every process; unset or ``0`` does not."""


class Hooks:
    """A ``sys.meta_path`` finder that runs accel's hook for a watched module right after
    the module has executed (duck-typed: importing ``importlib.abc`` costs ~7 ms).

    A hook is ``"package.module"`` (importing it is the hook) or
    ``"package.module:function"`` (then called with the watched module). It runs once:
    the first time the module executes after :meth:`watch`. A hook that raises leaves the
    watch in place, so that the next attempt to import the module meets it again.
    """

    def __init__(self) -> None:
        # watched module -> (its hook, what the process goes without if the hook's module
        # cannot be imported)
        self._watched: dict[str, tuple[str, str]] = {}

    def watch(self, hooks: "Mapping[str, str]", unavailable: str) -> None:
        """Run ``hooks[name]`` once the module ``name`` has next executed.

        Args:
            hooks: Watched module -> hook.
            unavailable: What the process goes without when a hook's module cannot be
                imported; the warning starts with it and names the error.
        """
        for name, hook in hooks.items():
            self._watched[name] = (hook, unavailable)

    def watches(self, name: str) -> bool:
        """Whether a hook waits for the module ``name``."""
        return name in self._watched

    def find_spec(
        self,
        fullname: str,
        path: "Sequence[str] | None" = None,
        target: "ModuleType | None" = None,
    ) -> "ModuleSpec | None":
        """The spec the other finders give a watched module, its loader's ``exec_module``
        wrapped to run the hook afterwards; ``None`` for any other module (or a watched one
        no finder knows: the import fails as it would without accel).

        The spec may never be executed (``importlib.util.find_spec`` probes): the watch
        stays until one is.
        """
        if fullname not in self._watched:
            return None
        spec = self._spec_elsewhere(fullname, path, target)
        loader: Any = spec.loader if spec is not None else None
        execute = getattr(loader, "exec_module", None)
        if execute is None:
            return spec  # not found, a namespace package, or a loader of another kind

        def exec_module(module: "ModuleType") -> None:
            execute(module)
            self._run(fullname, module)

        # The loader is this spec's own: path-based finders make one per spec.
        loader.exec_module = exec_module
        return spec

    def _spec_elsewhere(
        self, fullname: str, path: "Sequence[str] | None", target: "ModuleType | None"
    ) -> "ModuleSpec | None":
        for finder in list(sys.meta_path):
            find_spec: Any = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec: ModuleSpec | None = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _run(self, name: str, module: "ModuleType") -> None:
        watched = self._watched.get(name)
        if watched is None:
            return
        hook, unavailable = watched
        module_name, _, function = hook.partition(":")
        import importlib  # here: start-up never needs it

        try:
            hooks = importlib.import_module(module_name)
        except Exception as error:
            # Whatever else that module would have served goes too: one warning, not one
            # per watched module.
            for other, (other_hook, _) in list(self._watched.items()):
                if other_hook.partition(":")[0] == module_name:
                    del self._watched[other]
            cause = f"{type(error).__name__}: {error}"
            # stacklevel: past _run and exec_module (importlib's frames are skipped), to
            # the line that imported the watched module.
            _warn(f"{unavailable}: importing {module_name} failed ({cause})", stacklevel=3)
            return
        if function:
            getattr(hooks, function)(module)
        self._watched.pop(name, None)


def _warn(message: str, stacklevel: int = 1) -> None:
    import warnings  # here: start-up never needs it unless something is wrong

    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


def deepspeed_asked(value: str | None) -> bool | None:
    """``ACCEL_DEEPSPEED``'s ``value`` read as ``accel._validate.env_switch`` reads it (this
    module cannot import accel): ``"1"`` or ``"0"`` around spaces, unset is off; ``None``
    for anything else, which env_switch raises on."""
    if value is None:
        return False
    return {"1": True, "0": False}.get(value.strip())


def _start() -> None:
    """What every interpreter start does: watch Lightning, and DeepSpeed if asked."""
    HOOKS.watch(LIGHTNING, "accel: accelerator='accel' is not registered with Lightning")
    value = os.environ.get(DEEPSPEED_ENV)
    asked = deepspeed_asked(value)
    if asked is False:
        return
    # A bad value is watched too: importing deepspeed then raises (the hook reads the
    # variable again), instead of running native DeepSpeed without a word.
    HOOKS.watch(
        DEEPSPEED,
        f"accel: {DEEPSPEED_ENV} is set, but DeepSpeed runs without accel in this process",
    )
    if asked is None:
        _warn(
            f"accel: environment variable {DEEPSPEED_ENV} must be 0 or 1, got {value!r}; "
            "importing deepspeed will fail until it is fixed"
        )


HOOKS = Hooks()
"""The process's finder (one per process: the module is imported once)."""
sys.meta_path.insert(0, HOOKS)
_start()
