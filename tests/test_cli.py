"""The ``accel`` command line, run as a user would run it."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from accel.ops import isa

# Every test here starts other processes (ranks, launchers, CLIs): `-m "not slow"`
# leaves them out for a quick run.
pytestmark = pytest.mark.slow

# The report tests describe a machine without a usable GPU; on a GPU machine the GPUs are
# hidden from the command so the same expectations hold there. The tables are read line by
# line, so they get a width at which no cell wraps (pytest-xdist's workers set COLUMNS=80).
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200"}
CUDA_UNAVAILABLE = ("this torch build has no CUDA or ROCm support", "no CUDA device is visible")


def _accel(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ACCEL_BACKEND"} | CPU_ONLY | env
    return subprocess.run(
        [sys.executable, "-m", "accel", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


def test_report_shows_selection_backends_and_capabilities() -> None:
    result = _accel("report")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "selected backend: cpu (CPUAccelerator)" in out
    assert "chosen by: auto" in out
    assert "registered backends" in out
    assert any(reason in out for reason in CUDA_UNAVAILABLE)
    # Borderless tables: every cell of the capability matrix is one word.
    matrix = {
        cells[0]: cells[1:]
        for line in out.splitlines()
        if (cells := line.split()) and cells[0].endswith("API")
    }
    header = next(line for line in out.splitlines() if line.split()[:1] == ["protocol"])
    columns = header.split()[1:]
    cpu = columns.index("cpu")
    assert matrix["DeviceAPI"][cpu] == "yes"
    assert matrix["GraphAPI"][cpu] == "no"
    assert matrix["OpBuilderAPI"][cpu] == "yes"
    assert "CPUAdamBuilder" in out
    assert matrix["StreamAPI"][columns.index("cuda")] == "yes"
    assert matrix["StreamAPI"][columns.index("xpu")] == "?"
    # On a CPU-only machine the CPU is the expected choice: the report says so, and no
    # warning is printed (it is logged at INFO).
    assert "chosen by: auto" in out
    assert "no accelerator is available" not in result.stderr


def test_report_lines_stay_whole_in_a_narrow_terminal() -> None:
    # Tables fit the width; a sentence is never broken, so a saved report can be grepped.
    result = _accel("report", COLUMNS="40", ACCEL_CPU_ISA="baseline")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "chosen by: auto (highest-priority available: the host CPU is always present)" in lines
    kernels = next(line for line in lines if line.startswith("cpu kernels: "))
    assert kernels.startswith("cpu kernels: baseline (")
    if isa.active() not in (None, "baseline"):  # the CPU has more: the cap is said on the line
        assert "capped by ACCEL_CPU_ISA; the CPU has x86-64-v" in kernels


def test_report_json_is_machine_readable() -> None:
    result = _accel("report", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["selected"] == "cpu (CPUAccelerator)"
    assert report["how"] == "auto"
    assert {"python", "torch", "accel"} <= set(report["versions"])
    backends = {row["name"]: row for row in report["backends"]}
    assert backends["cpu"]["available"] is True
    assert backends["cpu"]["capabilities"]["StreamAPI"] is False
    assert backends["cuda"]["available"] is False
    assert backends["cuda"]["capabilities"]["GraphAPI"] is True
    assert backends["xpu"]["capabilities"]["GraphAPI"] is None
    builders = {row["name"]: row for row in report["op_builders"]}
    assert set(builders) == {
        "AsyncIOBuilder", "CCLCommBuilder", "CPUAdamBuilder", "CPUAdagradBuilder",
        "CPULionBuilder", "FusedAdamBuilder", "FusedLionBuilder", "PinMemoryBuilder",
        "ShareMemCommBuilder",
    }  # fmt: skip
    assert builders["CCLCommBuilder"]["compatible"] is False
    assert "oneccl_bindings_for_pytorch" in builders["CCLCommBuilder"]["reason"]
    assert report["collectives"].startswith("shared memory for groups on one node; pools of")
    assert builders["CPUAdamBuilder"] == {
        "name": "CPUAdamBuilder",
        "compatible": True,
        "reason": "ready",
    }


NOISY_PLUGIN = """
import os
from accel.backends.base import Availability
from accel.backends.cpu import CPUAccelerator

import ctypes, sys
print("vendor banner, printed at import")
os.write(1, b"driver banner, written to descriptor 1\\n")
ctypes.CDLL(None).printf(b"driver banner, through C's printf\\n")  # buffered by the C library
print("vendor banner, to the original stdout", file=sys.__stdout__)


class Noisy(CPUAccelerator):
    name = "noisy"
    priority = 5

    @classmethod
    def probe(cls):
        print("probe chatter")
        os.write(1, b"probe chatter on descriptor 1\\n")
        return Availability(False, "not here")
"""


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_report_json_stays_json_when_a_plugin_prints(
    tmp_path: pathlib.Path, isolation: str
) -> None:
    # What a plugin printed at import or in its probe came first on stdout: json.loads failed.
    info = tmp_path / "noisy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[accel.backends]\nnoisy = noisy_plugin:Noisy\n")
    (tmp_path / "noisy_plugin.py").write_text(NOISY_PLUGIN)
    result = _accel(  # buffered output, as outside a terminal
        "report", "--json", PYTHONPATH=str(tmp_path), ACCEL_PROBE_ISOLATION=isolation,
        PYTHONUNBUFFERED="",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {row["name"]: row["reason"] for row in report["backends"]}["noisy"] == "not here"
    for said in ("printed at import", "written to descriptor 1", "through C's printf",
                 "to the original stdout", "probe chatter", "chatter on descriptor 1"):  # fmt: skip
        assert said in result.stderr


@pytest.mark.parametrize(
    ("pool", "says"),
    [
        ("0", "no pools (ACCEL_SHM_POOL_BYTES=0)"),
        ("12", "no pools: environment variable ACCEL_SHM_POOL_BYTES must be a decimal"),
        (str(64 << 20), "pools of 64 MiB per rank (ACCEL_SHM_POOL_BYTES)"),
        ("8192", "pools of 8192 bytes per rank (ACCEL_SHM_POOL_BYTES)"),
    ],
)  # fmt: skip
def test_report_says_how_collectives_run(
    pool: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel import cli

    monkeypatch.setenv("ACCEL_SHM_POOL_BYTES", pool)
    assert cli.main(["report", "--json"]) == 0  # a bad pool size is reported, not raised
    assert says in json.loads(capsys.readouterr().out)["collectives"]


def test_report_says_how_an_env_choice_was_made() -> None:
    result = _accel("report", "--json", ACCEL_BACKEND="cpu")
    assert json.loads(result.stdout)["how"] == "env"


def test_report_explains_a_bad_backend_variable() -> None:
    result = _accel("report", ACCEL_BACKEND="tpu")
    assert result.returncode == 2
    assert "ACCEL_BACKEND='tpu'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_command_is_required() -> None:
    result = _accel()
    assert result.returncode == 2
    assert "COMMAND" in result.stderr


def test_report_text_keeps_brackets_it_is_given() -> None:
    # Rich read "[errno 13]" as markup and dropped it; "[/x]" raised a MarkupError.
    from accel.report import BackendRow, OpBuilderRow, collect, render

    said = "probe failed: [errno 13] [/x] [bold]raw[/bold]"
    real = collect()
    report = dataclasses.replace(
        real,
        detail=said,
        backends=[dataclasses.replace(real.backends[0], reason=said, distribution="[dist]")],
        op_builders=[OpBuilderRow("[Builder]", False, said)],
    )
    text = render(report, width=400)
    assert text.count(said) == 3
    assert "[dist]" in text
    assert "[Builder]" in text
    assert isinstance(report.backends[0], BackendRow)


def test_a_reader_gone_away_ends_the_command_quietly() -> None:
    # `accel report --json | head -c 10`: "Exception ignored ... BrokenPipeError" at exit.
    reader, writer = os.pipe()
    os.close(reader)
    with os.fdopen(writer, "w") as closed:
        result = subprocess.run(
            [sys.executable, "-m", "accel", "report", "--json"], stdout=closed,
            stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""


def test_a_broken_pipe_of_the_commands_own_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every BrokenPipeError was taken for stdout's reader gone: exit 141, nothing said.
    from accel import cli, report

    def broken() -> None:
        raise BrokenPipeError(32, "Broken pipe (a helper's socket)")

    monkeypatch.setattr(report, "collect", broken)
    assert cli.main(["report"]) == 2
    assert "accel: error: [Errno 32] Broken pipe (a helper's socket)" in capsys.readouterr().err


def test_a_closed_stdout_is_not_a_crash() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accel", "report", "--json"], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
