"""accel's start-up hook for Lightning (accel-startup.pth, _accel_startup.LIGHTNING):
``accelerator="accel"`` works in a fresh interpreter with no import of
accel.integrations.lightning, and start-up imports nothing for it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.support import ROOT

# Every test here starts another interpreter.
pytestmark = pytest.mark.slow


def _fresh(code: str, cwd: pathlib.Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter of this environment, whose site-packages has accel's
    start-up hook (the editable install puts it there as a regular install does)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **env},
        cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_fabric_and_the_trainer_accept_accel_with_no_import() -> None:
    result = _fresh(
        """
        import json, sys
        import _accel_startup
        watched = _accel_startup.HOOKS.watches("lightning")
        before = sorted(m for m in sys.modules if m.startswith(("accel", "lightning", "torch")))
        import lightning
        fabric = lightning.Fabric(accelerator="accel", devices=1)
        trainer = lightning.Trainer(accelerator="accel", devices=1, logger=False)
        print(json.dumps({
            "watched": watched, "before": before,
            "fabric": type(fabric.accelerator).__name__,
            "trainer": type(trainer.accelerator).__name__,
            "after": _accel_startup.HOOKS.watches("lightning"),
        }))
        """
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "watched": True,
        "before": [],  # the hook imports nothing until lightning is imported
        "fabric": "AccelAccelerator",
        "trainer": "AccelAccelerator",
        "after": False,  # its work is done
    }


def test_a_probe_for_lightning_before_its_import_leaves_the_hook_in_place() -> None:
    # find_spec without an import (what "is lightning installed?" checks do) returns a
    # spec nobody executes: the hook must still be there for the import that follows.
    result = _fresh(
        """
        import importlib.util, json
        import _accel_startup
        found = importlib.util.find_spec("lightning") is not None
        after_probe = _accel_startup.HOOKS.watches("lightning")
        import lightning
        fabric = lightning.Fabric(accelerator="accel", devices=1)
        print(json.dumps({
            "found": found, "after_probe": after_probe,
            "fabric": type(fabric.accelerator).__name__,
        }))
        """
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "found": True,
        "after_probe": True,
        "fabric": "AccelAccelerator",
    }


def test_an_accel_that_cannot_be_imported_leaves_lightning_working(
    tmp_path: pathlib.Path,
) -> None:
    broken = tmp_path / "broken" / "accel"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('half-installed')\n")
    # Run from elsewhere than the repository, whose accel would come first on sys.path.
    result = _fresh("import lightning\nprint('ran')", cwd=tmp_path, PYTHONPATH=str(broken.parent))
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "ran"
    said = [line for line in result.stderr.splitlines() if "accel:" in line]
    # One warning, at the line that imported Lightning, naming the cause.
    assert said == [
        "<string>:1: RuntimeWarning: accel: accelerator='accel' is not registered with "
        "Lightning: importing accel.integrations.lightning failed (ImportError: half-installed)"
    ]
    assert "Traceback" not in result.stderr
