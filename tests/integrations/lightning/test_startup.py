"""``accel-lightning.pth``: ``accelerator="accel"`` works in a fresh interpreter with no
import of accel.integrations.lightning, and start-up imports nothing for it."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

from accel.integrations import _lightning_startup
from tests.support import ROOT

# Every test here starts another interpreter.
pytestmark = pytest.mark.slow

PTH = ROOT / "accel" / "integrations" / "lightning" / "accel-lightning.pth"


def _fresh(
    code: str, site_dir: pathlib.Path, cwd: pathlib.Path = ROOT, **env: str
) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter after site.py's own processing of ``site_dir`` (the
    .pth is copied there; installed, it sits in site-packages and runs the same way)."""
    prelude = f"import site; site.addsitedir({str(site_dir)!r})\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **env},
        cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def site_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    directory = tmp_path / "site"
    directory.mkdir()
    shutil.copy(PTH, directory)
    return directory


def test_fabric_and_the_trainer_accept_accel_with_no_import(site_dir: pathlib.Path) -> None:
    result = _fresh(
        f"""
        import json, sys
        site.addsitedir({str(site_dir)!r})  # site.py may process one directory twice
        hooks = [type(f).__name__ for f in sys.meta_path if "Lightning" in type(f).__name__]
        before = sorted(m for m in sys.modules if m.startswith(("accel", "lightning", "torch")))
        import lightning
        fabric = lightning.Fabric(accelerator="accel", devices=1)
        trainer = lightning.Trainer(accelerator="accel", devices=1, logger=False)
        print(json.dumps({{
            "hooks": hooks, "before": before,
            "fabric": type(fabric.accelerator).__name__,
            "trainer": type(trainer.accelerator).__name__,
        }}))
        """,
        site_dir,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "hooks": ["AccelLightningHook"],
        "before": [],  # the hook imports nothing until lightning is imported
        "fabric": "AccelAccelerator",
        "trainer": "AccelAccelerator",
    }


def test_a_probe_for_lightning_before_its_import_leaves_the_hook_in_place(
    site_dir: pathlib.Path,
) -> None:
    # find_spec without an import (what "is lightning installed?" checks do) returns a
    # spec nobody executes: the hook must still be there for the import that follows.
    result = _fresh(
        f"""
        import importlib.util, json, sys
        site.addsitedir({str(site_dir)!r})
        def hooks():
            return [type(f).__name__ for f in sys.meta_path if "Lightning" in type(f).__name__]
        found = importlib.util.find_spec("lightning") is not None
        after_probe = hooks()
        import lightning
        fabric = lightning.Fabric(accelerator="accel", devices=1)
        print(json.dumps({{
            "found": found, "after_probe": after_probe, "after_import": hooks(),
            "fabric": type(fabric.accelerator).__name__,
        }}))
        """,
        site_dir,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "found": True,
        "after_probe": ["AccelLightningHook"],
        "after_import": [],  # gone once Lightning has been imported
        "fabric": "AccelAccelerator",
    }


def test_an_accel_that_cannot_be_imported_leaves_lightning_working(
    site_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    broken = tmp_path / "broken" / "accel"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('half-installed')\n")
    # Run from elsewhere than the repository, whose accel would come first on sys.path.
    result = _fresh(
        "import lightning; print('ran')", site_dir, cwd=tmp_path, PYTHONPATH=str(broken.parent)
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "ran"
    said = [line for line in result.stderr.splitlines() if line.startswith("accel:")]
    assert said == [
        "accel: accelerator='accel' is not registered with Lightning: accel cannot be "
        "imported (ImportError: half-installed)"
    ]


def test_an_integration_that_fails_to_import_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(name: str) -> None:
        raise ImportError(f"no {name} here")

    monkeypatch.setattr(_lightning_startup.importlib, "import_module", fail)
    expected = r"importing accel\.integrations\.lightning failed \(ImportError: no accel"
    with pytest.warns(RuntimeWarning, match=expected):
        _lightning_startup.register()
