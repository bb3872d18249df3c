"""The README's Python examples run as written, and its commands are the ones CI runs."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import tracemalloc
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


def test_the_deepspeed_abstract_method_count_is_deepspeeds() -> None:
    # "one abstract class with ~65 abstract methods": counted in DeepSpeed's source, unimported.
    stated = re.search(r"one abstract class with ~(\d+) abstract methods", README.read_text())
    assert stated is not None
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or spec.origin is None:
        pytest.skip("deepspeed is not installed")
    if importlib.metadata.version("deepspeed") != "0.19.8":
        pytest.skip("the count is DeepSpeed 0.19.8's")
    source = Path(spec.origin).parent / "accelerator" / "abstract_accelerator.py"
    tree = ast.parse(source.read_text())
    (abstract_class,) = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "DeepSpeedAccelerator"
    ]
    abstract = [
        node
        for node in abstract_class.body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d).endswith("abstractmethod") for d in node.decorator_list)
    ]
    assert len(abstract) == int(stated.group(1))


def test_the_port_scope_analysis_memory_is_the_readmes() -> None:
    # "its tree costs ~150 bytes per source byte": the peak of ast.parse on the modules
    # benchmarks/port_scale.py generates (docs/benchmarks.md, "accel port on large files").
    text = " ".join(README.read_text().split())
    stated = re.search(r"its tree costs ~(\d+) bytes per source byte", text)
    assert stated is not None
    spec = importlib.util.spec_from_file_location(
        "port_scale", README.parent / "benchmarks" / "port_scale.py"
    )
    assert spec is not None
    assert spec.loader is not None
    port_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(port_scale)
    source = port_scale.generate("mixed", 0.2)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        ast.parse(source)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
    assert 0.67 * int(stated.group(1)) <= peak / len(source) <= 1.5 * int(stated.group(1))


def test_the_readme_all_reduce_table_is_the_benchmark_docs() -> None:
    # The README's fp32 all-reduce rows are docs/benchmarks.md's, where the command and the
    # other dtypes are.
    text = README.read_text()
    table = text.split("benchmarks/allreduce.py --dtype float32 --iters 50 --rounds 9", 1)[1]
    rows = re.findall(r"^\| (\d+ [KM]iB) \| ([\d.]+ [um]s) \| ([\d.]+x) \|$", table, re.M)
    assert len(rows) == 5
    docs = (README.parent / "docs" / "benchmarks.md").read_text()
    for size, time, ratio in rows:
        assert f"| {size} | {time}; {ratio}; " in docs
