"""The pytest plugin, run the way a backend author runs it: pytest in a subprocess (the
option, fixture and marker end to end); its usage errors in a pytest session of this
process (pytester's in-process run; the selection is reset around each)."""

from __future__ import annotations

import pytest

TESTS = """
import pytest
from accel.protocols import GraphAPI, ProfilerAPI, StreamAPI
from accel.pytest_plugin import requires

def test_fixture_is_the_selected_backend(accelerator):
    assert type(accelerator).__name__ == "CPUAccelerator"

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
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(
        ["*CPUAccelerator lacks GraphAPI*", "*CPUAccelerator lacks StreamAPI*"]
    )


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester, fresh_selection: None) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("--accel=tpu", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--accel=tpu names no backend; expected one of:*cpu*"])


def test_unavailable_backend_is_a_usage_error_with_the_reason(
    pytester: pytest.Pytester, fresh_selection: None
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("--accel=cuda", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--accel=cuda selects a backend that is not available:*"])


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
    result.stdout.fnmatch_lines(["*requires takes capability protocols or their names*'Graph'*"])
    assert result.ret != 0
