"""The ``accel`` command line, run as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys


def _accel(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ACCEL_BACKEND"} | env
    return subprocess.run(
        [sys.executable, "-m", "accel", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


def test_report_shows_the_backend_and_its_capabilities() -> None:
    result = _accel("report")
    assert result.returncode == 0, result.stderr
    assert "selected backend: cpu (CPUAccelerator)" in result.stdout
    assert "chosen by: auto" in result.stdout
    lines = {
        line.split()[0]: line.split()[1]
        for line in result.stdout.splitlines()
        if line.startswith("  ")
    }
    assert lines["DeviceAPI"] == "yes"
    assert lines["GraphAPI"] == "no"
    assert lines["StreamAPI"] == "no"


def test_report_explains_a_bad_backend_variable() -> None:
    result = _accel("report", ACCEL_BACKEND="tpu")
    assert result.returncode == 2
    assert "ACCEL_BACKEND='tpu'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_command_is_required() -> None:
    result = _accel()
    assert result.returncode == 2
    assert "COMMAND" in result.stderr
