"""The README's and the docs' Python examples run as written, the figures they state are
the code's and the benchmarks', and the README's test command is the one CI runs."""

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

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# ```python blocks must run as written, each page's in order in one namespace; ```py blocks
# are illustrations that need a launcher, a framework or hardware (tests/comm/,
# tests/launch/ and tests/integrations/ run those paths for real).
PAGES = [README, *sorted(DOCS.glob("*.md"))]


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


def _run_examples(page: Path) -> dict[str, object]:
    namespace: dict[str, object] = {}
    for block in _python_blocks(page):
        exec(compile(block, str(page), "exec"), namespace)
    return namespace


def _text(page: Path) -> str:
    """The page with its lines joined, so a phrase may wrap anywhere."""
    return " ".join(page.read_text().split())


@pytest.mark.usefixtures("fresh_selection")
@pytest.mark.parametrize(
    "page", [p for p in PAGES if _python_blocks(p)], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_python_examples_run(page: Path) -> None:
    assert _run_examples(page)


@pytest.mark.usefixtures("fresh_selection")
def test_the_backend_the_docs_write_is_selectable() -> None:
    backend = _run_examples(DOCS / "writing-a-backend.md")["MyHostAccelerator"]
    assert isinstance(backend, type)
    instance = backend()
    assert isinstance(instance, Accelerator)
    accel.set_accelerator(instance)
    assert accel.get_accelerator() is instance
    # It passes the kit the docs tell a backend author to run (its lazy_call did not check
    # its callback).
    from accel.testing import check_backend

    report = check_backend(instance, max_examples=5)
    assert report.ok, str(report)


def test_ci_runs_the_readme_test_command() -> None:
    text = README.read_text()
    command = re.search(r"<!-- test-command.*?-->\n```\n(.*?)\n```", text, re.S)
    assert command is not None
    assert "pytest" in command.group(1)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "test-command" in ci  # .ci/run extracts the line from the README itself


def test_the_backend_sizes_the_readme_states_are_the_files() -> None:
    # The README's claim of short backends names its measure: the lines of the files.
    text = _text(README)
    stated = re.search(r"the CPU backend is (\d+) lines, `wc -l accel/backends/cpu.py`", text)
    assert stated is not None
    cpu = ROOT / "accel" / "backends" / "cpu.py"
    assert int(stated.group(1)) == len(cpu.read_text().splitlines())
    devices = (ROOT / "accel" / "backends" / "devices.py").read_text()
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


def test_the_port_scope_analysis_memory_is_the_docs() -> None:
    # "its tree costs ~150 bytes per source byte": the peak of ast.parse on the modules
    # benchmarks/port_scale.py generates (docs/benchmarks.md, "accel port on large files").
    stated = re.search(r"its tree costs ~(\d+) bytes per source byte", _text(DOCS / "port.md"))
    assert stated is not None
    spec = importlib.util.spec_from_file_location(
        "port_scale", ROOT / "benchmarks" / "port_scale.py"
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


def test_the_all_reduce_table_is_the_benchmark_docs() -> None:
    # The collectives page's fp32 all-reduce rows are docs/benchmarks.md's, where the
    # command and the other dtypes are.
    text = (DOCS / "collectives.md").read_text()
    table = text.split("benchmarks/allreduce.py --dtype float32 --iters 50 --rounds 9", 1)[1]
    rows = re.findall(r"^\| (\d+ [KM]iB) \| ([\d.]+ [um]s) \| ([\d.]+x) \|$", table, re.M)
    assert len(rows) == 5
    docs = (DOCS / "benchmarks.md").read_text()
    for size, time, ratio in rows:
        assert f"| {size} | {time}; {ratio}; " in docs


def test_the_readme_links_every_page_of_the_site() -> None:
    # The README is the front page: each guide is reachable from it.
    linked = set(re.findall(r"\]\(docs/([a-z-]+\.md)", README.read_text()))
    pages = {page.name for page in DOCS.glob("*.md")}
    assert pages <= linked, sorted(pages - linked)
