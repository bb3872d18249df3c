"""The pytest plugin, run the way a backend author runs it: pytest in a subprocess (the
option, fixture and marker end to end); its usage errors in a pytest session of this
process (pytester's in-process run; the selection is reset around each)."""

from __future__ import annotations

import os

import pytest

# Imported before pytester's in-process runs, which drop from sys.modules what they import:
# a selection module imported there would not be the one these tests select through.
import accel._selection  # noqa: F401
from tests.support import Installer

TESTS = """
import os
import pytest
from accel.protocols import GraphAPI, ProfilerAPI, StreamAPI
from accel.pytest_plugin import requires

def test_fixture_is_the_selected_backend(accelerator):
    assert type(accelerator).__name__ == "CPUAccelerator"

def test_processes_the_tests_start_select_it_too():
    assert os.environ["ACCEL_BACKEND"] == "cpu"

@requires(GraphAPI)
def test_needs_graphs(accelerator):
    accelerator.create_graph()

@pytest.mark.requires("StreamAPI")
def test_needs_streams(accelerator):
    accelerator.Stream()

@requires(ProfilerAPI)
def test_needs_ranges(accelerator):
    accelerator.range_push("x")
    accelerator.range_pop()
"""


@pytest.mark.slow  # pytest in a subprocess
def test_accel_option_fixture_and_requires_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("--accel=cpu", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, skipped=2)
    # Each skip where its test is (they were all reported at one line of the plugin).
    result.stdout.fnmatch_lines(
        ["*test_accel_option_fixture_and_requires_marker.py:12: CPUAccelerator lacks GraphAPI",
         "*test_accel_option_fixture_and_requires_marker.py:16: CPUAccelerator lacks StreamAPI"]
    )  # fmt: skip
    assert "pytest_plugin.py" not in result.stdout.str()


def test_the_option_sets_accel_backend_for_the_session_only(
    pytester: pytest.Pytester, fresh_selection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    pytester.makepyfile(
        """
        import os
        def test_x():
            assert os.environ["ACCEL_BACKEND"] == "cpu"
        """
    )
    result = pytester.runpytest_inprocess("--accel= cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "ACCEL_BACKEND" not in os.environ


def test_an_accel_backend_naming_another_backend_is_a_usage_error(
    pytester: pytest.Pytester, fresh_selection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was ignored, and the processes the tests started ran on what it named.
    monkeypatch.setenv("ACCEL_BACKEND", "cdua")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("--accel=cpu", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--accel 'cpu' and ACCEL_BACKEND='cdua' name different backends*unset it*"]
    )
    assert os.environ["ACCEL_BACKEND"] == "cdua"


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester, fresh_selection: None) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("--accel=tpu", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--accel 'tpu' names no backend; expected one of:*cpu*"])


def test_unavailable_backend_is_a_usage_error_with_the_reason(
    pytester: pytest.Pytester, fresh_selection: None
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("--accel=cuda", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--accel 'cuda' selects a backend that is not available:*"])


def test_requires_rejects_non_protocols(pytester: pytest.Pytester, fresh_selection: None) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.requires("Graph")
        def test_x(accelerator):
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        ["*requires takes capability protocols of accel.protocols or their names*'Graph'*"
         "accel's pytest plugin; -p no:accel turns the plugin off*"]
    )  # fmt: skip
    assert "Traceback" not in result.stdout.str()  # said, not a trace through the plugin
    assert result.ret != 0


GRAPHS_BY_FIXTURE = """
import pytest
from accel.backends.cpu import CPUAccelerator
from accel.pytest_plugin import requires
from accel.protocols import GraphAPI

class WithGraphs(CPUAccelerator):
    def supports_graphs(self): return True
    def create_graph(self): return object()
    def capture_to_graph(self, graph, pool=None, stream=None): ...
    def replay_graph(self, graph): ...

@pytest.fixture(params=["plain", "graphs"])
def accelerator(request):
    return WithGraphs() if request.param == "graphs" else CPUAccelerator()

@requires(GraphAPI)
def test_graphs(accelerator):
    assert isinstance(accelerator, WithGraphs)
"""


def test_requires_asks_the_accelerator_the_test_gets(
    pytester: pytest.Pytester, fresh_selection: None
) -> None:
    # A conftest's own `accelerator` fixture: the session's (the CPU) was asked, so the
    # variant with graphs was skipped too.
    pytester.makepyfile(GRAPHS_BY_FIXTURE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)


def test_an_in_process_session_leaves_the_selection_as_it_was(
    pytester: pytest.Pytester, fresh_selection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import accel
    from accel.backends.cpu import CPUAccelerator

    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    mine = CPUAccelerator()
    accel.set_accelerator(mine)
    pytester.makepyfile("def test_x(accelerator):\n    pass\n")
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--accel=cpu").assert_outcomes(passed=1)
    assert accel.get_accelerator() is mine


@pytest.mark.parametrize(
    ("mark", "said"),
    [("pytest.mark.requires(cap='GraphAPI')", "got requires(cap='GraphAPI')"),
     ("pytest.mark.requires()", "got requires()"),
     ("pytest.mark.requires", "got requires()"),
     ("requires(typing.SupportsInt)", "got <class 'typing.SupportsInt'>"),
     ("requires(accel.protocols.Accelerator)", "got <class 'accel.protocols")],
)  # fmt: skip
def test_requires_refuses_what_it_would_ignore(
    pytester: pytest.Pytester, fresh_selection: None, mark: str, said: str
) -> None:
    # Keyword arguments and an empty mark were ignored (the test ran), and any protocol
    # was taken for a capability.
    pytester.makepyfile(
        f"""
        import typing, pytest, accel.protocols
        from accel.pytest_plugin import requires
        @{mark}
        def test_x(accelerator):
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"*{said}*"])
    assert result.ret != 0


def test_a_backend_that_fails_to_start_is_a_usage_error(
    pytester: pytest.Pytester, fresh_selection: None, fresh_registry: None, install: Installer
) -> None:
    # Its constructor's error came through as pytest's INTERNALERROR traceback.
    source = (
        "from accel.backends.base import Availability\n"
        "from accel.backends.cpu import CPUAccelerator\n"
        "class Broken(CPUAccelerator):\n"
        "    name = 'broken'\n"
        "    priority = 1\n"
        "    @classmethod\n"
        "    def probe(cls):\n"
        "        return Availability(True, 'yes')\n"
        "    def __init__(self):\n"
        "        raise OSError('driver missing')\n"
    )
    install("brokendist", {"broken": "broken_plugin:Broken"}, {"broken_plugin": source})
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("--accel= broken", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--accel ' broken': backend 'broken' failed to start: OSError: driver missing*"]
    )


def test_a_conftest_that_asks_at_import_gets_the_options_backend(
    pytester: pytest.Pytester,
    fresh_selection: None,
    fresh_registry: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --accel was applied after the conftest files were imported: one that asked then (or
    # imported a transformers device spec, which does) got the auto-selected backend.
    monkeypatch.setenv("ACCEL_TEST_PLUGIN_AVAILABLE", "1")  # auto-selection would take it
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    pytester.makeconftest("import accel\nSELECTED = type(accel.get_accelerator()).__name__\n")
    pytester.makepyfile(
        "import conftest\ndef test_x():\n    assert conftest.SELECTED == 'CPUAccelerator'\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--accel=cpu")
    result.assert_outcomes(passed=1)
