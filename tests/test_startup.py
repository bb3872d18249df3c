"""accel's start-up hook (accel-startup.pth, _accel_startup): the .pth is one import line,
start-up imports nothing else, and the finder runs each watched module's hook once, right
after the module has executed, with a warning instead of a failure when the hook cannot be
imported. The frameworks' own hooks are tested with them (tests/integrations/)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import site
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import _accel_startup
from _accel_startup import Hooks
from accel.integrations.deepspeed import _install, _support
from tests.support import ROOT

PTH = ROOT / "accel-startup.pth"


def test_the_pth_file_is_one_import_of_the_startup_module() -> None:
    assert PTH.read_text() == "import _accel_startup\n"
    # ... and that is what the test environment's install put in site-packages.
    installed = [
        Path(directory) / PTH.name
        for directory in site.getsitepackages()
        if (Path(directory) / PTH.name).exists()
    ]
    assert installed, f"{PTH.name} is not installed here: pip install -e ."
    assert all(path.read_text() == PTH.read_text() for path in installed)


def _fresh(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={k: v for k, v in os.environ.items() if k != _accel_startup.DEEPSPEED_ENV} | env,
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("deepspeed", [None, "1"])
def test_start_up_imports_the_hook_module_and_nothing_else(deepspeed: str | None) -> None:
    # python -X importtime lists what each import imported, nested under it: the start-up
    # module imports nothing (not even accel) with ACCEL_DEEPSPEED set or not.
    env = {} if deepspeed is None else {_accel_startup.DEEPSPEED_ENV: deepspeed}
    result = _fresh(
        """
        import json, sys
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("accel", "_accel")))))
        """,
        **env,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["_accel_startup"]
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], env=os.environ | env,
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stderr.splitlines()  # fmt: skip
    names = [line.rpartition("|")[2] for line in timed if line.startswith("import time:")]
    at = next(i for i, name in enumerate(names) if name.strip() == "_accel_startup")

    def depth(name: str) -> int:
        return len(name) - len(name.lstrip())

    nested = []
    for name in reversed(names[:at]):  # what an import imported is printed before it
        if depth(name) <= depth(names[at]):
            break
        nested.append(name.strip())
    assert nested == []


@pytest.mark.slow
def test_a_bad_deepspeed_variable_is_one_warning_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = _fresh("print('ran')", **{_accel_startup.DEEPSPEED_ENV: "yes"})
    assert result.returncode == 0
    assert result.stdout == "ran\n"
    # The sentence accel's own check raises when deepspeed is imported.
    monkeypatch.setenv(_support.ENV, "yes")
    with pytest.raises(ValueError, match="must be 0 or 1") as raised:
        _support.requested()
    assert result.stderr.count(f"RuntimeWarning: accel: {raised.value}; importing deepspeed") == 1


@pytest.mark.slow
def test_pytest_says_nothing_about_the_start_up_module(tmp_path: Path) -> None:
    # accel's distribution has a pytest plugin, so pytest marks the top-level modules it
    # installs for assertion rewriting, and warned in every run (from a regular install,
    # or from the repository's root with an editable one) that it could not rewrite the
    # one the start-up hook had already imported.
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(tmp_path),
         "--collect-only", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_nothing.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "_accel_startup" not in result.stdout + result.stderr


def test_the_deepspeed_table_names_the_integrations_hooks() -> None:
    assert _accel_startup.DEEPSPEED_ENV == _support.ENV
    assert set(_accel_startup.DEEPSPEED) == {
        _install.TARGET,
        _install.REPORT,
        _install.COMM,
        _install.ZERO,
    }
    for hook in _accel_startup.DEEPSPEED.values():
        module, _, function = hook.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), hook
    assert importlib.util.find_spec(_accel_startup.LIGHTNING["lightning"]) is not None


# The finder itself, in this process: a fresh Hooks on sys.meta_path and modules written
# for each test.

Write = Callable[[str, str], None]


@pytest.fixture
def hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hooks]:
    finder = Hooks()
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.meta_path.insert(0, finder)
    before = set(sys.modules)
    yield finder
    sys.meta_path.remove(finder)
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture
def write(tmp_path: Path) -> Write:
    def _write(module: str, source: str) -> None:
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()

    return _write


HOOK_MODULE = """
    seen = []

    def after(module):
        # The watched module has executed: its names are there.
        seen.append((module.__name__, module.VALUE))
"""


def test_a_hook_runs_once_right_after_its_module_has_executed(hooks: Hooks, write: Write) -> None:
    write("startup_watched", "VALUE = 42\n")
    write("startup_hooks", HOOK_MODULE)
    hooks.watch({"startup_watched": "startup_hooks:after"}, "nothing")
    assert hooks.watches("startup_watched")
    watched = importlib.import_module("startup_watched")
    seen = importlib.import_module("startup_hooks").seen
    assert seen == [("startup_watched", 42)]
    assert not hooks.watches("startup_watched")
    del sys.modules["startup_watched"]
    assert importlib.import_module("startup_watched") is not watched
    assert seen == [("startup_watched", 42)]  # once


def test_a_hook_without_a_function_is_the_import_of_its_module(hooks: Hooks, write: Write) -> None:
    write("startup_watched", "VALUE = 1\n")
    write("startup_hooks", "import startup_watched\nSEEN = startup_watched.VALUE\n")
    hooks.watch({"startup_watched": "startup_hooks"}, "nothing")
    importlib.import_module("startup_watched")
    assert importlib.import_module("startup_hooks").SEEN == 1


def test_a_probe_that_executes_nothing_leaves_the_watch(hooks: Hooks, write: Write) -> None:
    # importlib.util.find_spec("x") (an "is x installed?" check) gets a spec nobody
    # executes: the import after it must still run the hook.
    write("startup_watched", "VALUE = 7\n")
    write("startup_hooks", HOOK_MODULE)
    hooks.watch({"startup_watched": "startup_hooks:after"}, "nothing")
    assert importlib.util.find_spec("startup_watched") is not None
    assert hooks.watches("startup_watched")
    importlib.import_module("startup_watched")
    assert importlib.import_module("startup_hooks").seen == [("startup_watched", 7)]


def test_other_modules_and_unknown_ones_are_left_to_the_other_finders(hooks: Hooks) -> None:
    hooks.watch({"startup_nowhere": "startup_hooks:after"}, "nothing")
    assert hooks.find_spec("json") is None
    with pytest.raises(ModuleNotFoundError, match="startup_nowhere"):
        importlib.import_module("startup_nowhere")
    assert hooks.watches("startup_nowhere")


def test_a_hook_module_that_cannot_be_imported_is_one_warning(hooks: Hooks, write: Write) -> None:
    write("startup_watched", "VALUE = 1\n")
    write("startup_other", "VALUE = 2\n")
    write("startup_hooks", "raise ImportError('half-installed')\n")
    hooks.watch(
        {"startup_watched": "startup_hooks:after", "startup_other": "startup_hooks:other"},
        "accel: the test's feature is off",
    )
    message = (
        r"accel: the test's feature is off: importing startup_hooks failed "
        r"\(ImportError: half-installed\)"
    )
    with pytest.warns(RuntimeWarning, match=message) as said:
        import startup_watched  # type: ignore[import-not-found]  # pyright: ignore[reportMissingImports]
    assert startup_watched.VALUE == 1
    assert [w.filename for w in said] == [__file__]  # the line that imported the module
    # Everything else the broken module would have served is dropped with it.
    assert not hooks.watches("startup_other")
    assert importlib.import_module("startup_other").VALUE == 2


def test_a_hook_that_raises_fails_the_import_and_meets_the_next_one(
    hooks: Hooks, write: Write
) -> None:
    write("startup_watched", "VALUE = 1\n")
    write(
        "startup_hooks",
        """
        calls = []

        def refuse(module):
            calls.append(module.__name__)
            raise ValueError("refused on purpose")
        """,
    )
    hooks.watch({"startup_watched": "startup_hooks:refuse"}, "nothing")
    for _ in range(2):
        with pytest.raises(ValueError, match="refused on purpose"):
            importlib.import_module("startup_watched")
        assert "startup_watched" not in sys.modules
    assert importlib.import_module("startup_hooks").calls == ["startup_watched"] * 2
