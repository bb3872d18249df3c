"""The README's Python examples run as written, and its commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import accel
from accel.protocols import Accelerator

README = Path(__file__).resolve().parents[1] / "README.md"
# ```python blocks must run as written; ```py blocks are illustrations that need a launcher
# or hardware (tests/comm/test_collectives.py and tests/launch/test_launch.py run those paths
# for real).
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.usefixtures("fresh_selection")
def test_python_examples_run() -> None:
    namespace: dict[str, object] = {}
    for block in PYTHON_BLOCKS:
        exec(compile(block, str(README), "exec"), namespace)
    backend = namespace["MyHostAccelerator"]
    assert isinstance(backend, type)
    instance = backend()
    assert isinstance(instance, Accelerator)
    accel.set_accelerator(instance)
    assert accel.get_accelerator() is instance


def test_ci_runs_the_readme_test_command() -> None:
    text = README.read_text()
    command = re.search(r"<!-- test-command.*?-->\n```\n(.*?)\n```", text, re.S)
    assert command is not None
    assert "pytest" in command.group(1)
    ci = (README.parent / ".ci" / "run").read_text()
    assert "test-command" in ci  # .ci/run extracts the line from the README itself


def test_the_backend_sizes_the_readme_states_are_the_files() -> None:
    # The README's claim of short backends names its measure: the lines of the files.
    text = " ".join(README.read_text().split())
    stated = re.search(r"the CPU backend is (\d+) lines, `wc -l accel/backends/cpu.py`", text)
    assert stated is not None
    cpu = README.parent / "accel" / "backends" / "cpu.py"
    assert int(stated.group(1)) == len(cpu.read_text().splitlines())
    devices = (README.parent / "accel" / "backends" / "devices.py").read_text()
    xpu = re.search(r"\nclass XPUAccelerator\(.*?\n\n\n", devices, re.DOTALL)
    assert xpu is not None
    assert "such as XPU is eight" in text
    assert len(xpu.group(0).strip("\n").splitlines()) == 8
