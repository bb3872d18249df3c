"""transformers' own model tests (``ModelTesterMixin``, ``MemoryCleanupMixin``) with the spec
``accel spec transformers`` writes, on a tiny BERT.

transformers publishes its test mixins in its sdist (``tests/*.py``) but not its model
test files, so the run takes the mixins from the sdist of the installed version (fetched
with ``pip download``; the test skips, saying why, where that fails) and a tiny BERT
tester written here (transformers_suite/accel_bert.py). Two mixins from directories the
sdist lacks (exporters, generation) are replaced by empty classes: their tests do not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support import ROOT, TESTS

transformers = pytest.importorskip("transformers")
pytest.importorskip("parameterized")  # transformers' test_modeling_common imports it

pytestmark = pytest.mark.slow  # fetches the sdist and runs pytest in a subprocess

SUITE = TESTS / "integrations" / "transformers_suite"
# transformers' ModelTesterMixin tests taken (~20 s; the whole mixin takes ~2 min).
SELECTED = (
    "save_load or training or attention_outputs or hidden_states_output or forward_signature"
    " or model_common_attributes or resize_tokens or retain_grad or determinism"
    " or feed_forward_chunking or problem_types or main_input_name or model_runs_on"
)
STAND_INS = {
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
}


@pytest.fixture(scope="module")
def transformers_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding transformers' ``tests/`` mixins and the tiny BERT test."""
    root = tmp_path_factory.mktemp("transformers_suite")
    version = transformers.__version__
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         f"transformers=={version}", "--dest", str(root)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    archives = list(root.glob("transformers-*.tar.gz"))
    if fetched.returncode != 0 or not archives:
        pytest.skip(f"transformers {version}'s sdist could not be fetched: {fetched.stderr[-500:]}")
    with tarfile.open(archives[0]) as archive:
        members = [
            m for m in archive.getmembers() if re.fullmatch(r"[^/]+/tests/[^/]+\.py", m.name)
        ]
        archive.extractall(root, members=members, filter="data")
    tests = root / f"transformers-{version}" / "tests"
    (tests / "__init__.py").touch()
    for relative, text in STAND_INS.items():
        path = tests / relative
        path.parent.mkdir(exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    bert = tests / "models" / "bert"
    bert.mkdir(parents=True)
    for package in (tests / "models", bert):
        (package / "__init__.py").touch()
    shutil.copy(SUITE / "accel_bert.py", bert / "test_accel_bert.py")
    shutil.copy(SUITE / "counting_spec.py", tests.parent / "counting_spec.py")
    return tests.parent


def test_transformers_model_tests_pass_with_accels_spec(transformers_tests: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    subprocess.run(
        [sys.executable, "-m", "accel", "spec", "transformers", "-o", "accel_spec.py"],
        cwd=transformers_tests, env=env, check=True, timeout=120,
    )  # fmt: skip
    # The leak check makes MemoryCleanupMixin ask for the device's memory too.
    env.update(TRANSFORMERS_TEST_DEVICE_SPEC="counting_spec.py",
               TRANSFORMERS_TEST_MEMORY_LEAK_MIB="1024")  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-k", SELECTED, "tests/models/bert/test_accel_bert.py"],
        cwd=transformers_tests, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= 15, summary
    assert "failed" not in summary, summary
    calls = json.loads((transformers_tests / "calls.json").read_text())
    # transformers 5.23 takes MANUAL_SEED_FN, EMPTY_CACHE_FN and DEVICE_COUNT_FN from a
    # spec (testing_utils.update_mapping_from_spec); the tests called EMPTY_CACHE_FN. The
    # CPU spec leaves DEVICE_COUNT_FN out: transformers counts its own 0 CPU accelerators.
    assert calls.get("EMPTY_CACHE_FN", 0) > 0, calls
    assert "DEVICE_COUNT_FN" not in calls, calls
