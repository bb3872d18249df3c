"""accel.extensions: an integration adds a subcommand, an ``accel run`` flag and a report
section through one hook; a broken one is an error naming it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, MutableMapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import override

from accel import cli, extensions
from accel.extensions import Arguments, Integration, ReportSection, Subcommands
from accel.protocols import Accelerator
from tests.support import ROOT, Installer

# no_gpu: the report's selection is the CPU, also on a GPU machine.
pytestmark = pytest.mark.usefixtures("fresh_selection", "no_gpu")

HERE = "tests.test_extensions"


class FakeIntegration(Integration):
    """Adds ``accel fake``, ``accel run --fake-flag`` and a ``fake`` report section."""

    @override
    def add_subcommands(self, commands: Subcommands) -> None:
        fake = commands.add_parser("fake", help="say hello")
        fake.add_argument("--shout", action="store_true")
        fake.set_defaults(handler=lambda args: print("HELLO" if args.shout else "hello") or 0)

    @override
    def add_launch_arguments(self, arguments: Arguments) -> None:
        arguments.add_argument("--fake-flag", choices=["on", "refuse"], default=None)

    @override
    def apply_launch(self, args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
        if args.fake_flag == "refuse":
            raise ValueError("--fake-flag refuse: refused, as asked")
        if args.fake_flag == "on":
            environ["ACCEL_TEST_FAKE_FLAG"] = "1"

    @override
    def report_section(self, accelerator: Accelerator) -> ReportSection:
        device = accelerator.device_name()
        return ReportSection({"device": device}, (f"fake integration: [on] {device}",))


class TakesTheReportCommand(Integration):
    @override
    def add_subcommands(self, commands: Subcommands) -> None:
        commands.add_parser("report")


class TakesTheRunCommand(Integration):
    @override
    def add_subcommands(self, commands: Subcommands) -> None:
        commands.add_parser("run")


class ReportSectionFails(Integration):
    @override
    def report_section(self, accelerator: Accelerator) -> ReportSection:
        raise ImportError("no driver")


class NamedLikeACoreKey(Integration):
    @override
    def report_section(self, accelerator: Accelerator) -> ReportSection:
        return ReportSection({}, ())


class ReportSectionOfAnotherType(Integration):
    @override
    def report_section(self, accelerator: Accelerator) -> ReportSection:
        return 42  # type: ignore[return-value]  # what a plugin may do


class FailsToConstruct(Integration):
    def __init__(self) -> None:
        raise RuntimeError("no licence key")


NOT_AN_INTEGRATION = object()


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Make ``installed`` entry points of accel.integrations: name -> target (accel's
    built-ins are added as for a source tree)."""

    def register(**entries: str) -> None:
        found = [EntryPoint(name, target, extensions.GROUP) for name, target in entries.items()]
        monkeypatch.setattr(extensions, "installed", lambda group: found)
        extensions.reset()

    yield register
    extensions.reset()


def test_an_integration_adds_a_subcommand(
    registered: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    registered(fake=f"{HERE}:FakeIntegration")
    assert cli.main(["fake", "--shout"]) == 0
    assert capsys.readouterr().out == "HELLO\n"
    help_text = cli.build_parser().format_help()
    assert "fake" in help_text
    assert "spec" in help_text  # the built-ins are still there


def test_an_integration_adds_a_report_section(
    registered: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    from accel import report

    registered(fake=f"{HERE}:FakeIntegration")
    collected = report.collect()
    assert collected.as_dict()["fake"] == {"device": "cpu"}
    assert "deepspeed" in collected.as_dict()  # the built-in section too
    # Printed as written: "[on]" is text, not rich markup.
    assert "fake integration: [on] cpu\n" in report.render(collected)
    assert cli.main(["report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fake"] == {"device": "cpu"}


def _launch(monkeypatch: pytest.MonkeyPatch, *arguments: str) -> dict[str, str | None]:
    """``accel run`` in this process up to torchrun, which is replaced: what the ranks
    would inherit."""
    from accel.launch import cli as launch_cli
    from accel.launch.worker import PLAN_ENV

    for name in ("ACCEL_TEST_FAKE_FLAG", PLAN_ENV, "OMP_NUM_THREADS", "ACCEL_DEEPSPEED"):
        monkeypatch.setenv(name, "")  # set back as it was after the test
        monkeypatch.delenv(name)
    seen: dict[str, str | None] = {}

    def torchrun(args: Any) -> None:
        seen["fake"] = os.environ.get("ACCEL_TEST_FAKE_FLAG")

    monkeypatch.setattr("torch.distributed.run.run", torchrun)
    assert launch_cli.main(["--nproc-per-node=1", *arguments, __file__]) == 0  # any script
    return seen


def test_an_integration_adds_a_launch_flag(
    registered: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    registered(fake=f"{HERE}:FakeIntegration")
    assert _launch(monkeypatch, "--fake-flag", "on") == {"fake": "1"}
    assert _launch(monkeypatch) == {"fake": None}


def test_a_launch_flag_that_cannot_be_honoured_is_a_usage_error(
    registered: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registered(fake=f"{HERE}:FakeIntegration")
    with pytest.raises(SystemExit) as exit_info:
        _launch(monkeypatch, "--fake-flag", "refuse")
    assert exit_info.value.code == 2
    assert "accel run: error: --fake-flag refuse: refused, as asked" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "accel_no_such_module:Thing",
            "accel integration 'broken' from <unknown distribution> "
            "(accel_no_such_module:Thing) failed to import: ModuleNotFoundError: "
            "No module named 'accel_no_such_module'",
        ),
        (
            f"{HERE}:NOT_AN_INTEGRATION",
            f"accel integration 'broken' from <unknown distribution> ({HERE}:NOT_AN_INTEGRATION)"
            ": expected a subclass of accel.extensions.Integration, got <object object at",
        ),
        (
            f"{HERE}:FailsToConstruct",
            f"accel integration 'broken' from <unknown distribution> ({HERE}:FailsToConstruct)"
            ": FailsToConstruct() raised RuntimeError: no licence key",
        ),
        (
            f"{HERE}:TakesTheReportCommand",
            f"accel integration 'broken' from <unknown distribution> "
            f"({HERE}:TakesTheReportCommand): subcommand 'report' is taken",
        ),
        (
            f"{HERE}:TakesTheRunCommand",
            f"accel integration 'broken' from <unknown distribution> "
            f"({HERE}:TakesTheRunCommand): subcommand 'run' is taken",
        ),
        (
            f"{HERE}:ReportSectionFails",
            f"accel integration 'broken' from <unknown distribution> "
            f"({HERE}:ReportSectionFails): report_section raised ImportError: no driver",
        ),
        (
            f"{HERE}:ReportSectionOfAnotherType",
            f"accel integration 'broken' from <unknown distribution> "
            f"({HERE}:ReportSectionOfAnotherType): report_section returned int 42; expected a "
            "ReportSection or None",
        ),
    ],
    ids=[
        "import",
        "not-a-subclass",
        "constructor",
        "command-taken",
        "run-taken",
        "section-fails",
        "section-of-another-type",
    ],
)
def test_a_broken_integration_is_an_error_naming_it(
    registered: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
    target: str,
    message: str,
) -> None:
    registered(broken=target)
    assert cli.main(["report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"accel: error: {message}"), err
    assert "Traceback" not in err


def test_a_broken_integration_stops_accel_run_with_its_name(
    registered: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registered(broken="accel_no_such_module:Thing")
    monkeypatch.setattr("torch.distributed.run.run", lambda args: pytest.fail("ran"))
    from accel.launch import cli as launch_cli

    assert launch_cli.main(["--nproc-per-node=1", "script.py"]) == 2
    assert capsys.readouterr().err.startswith(
        "accel run: error: accel integration 'broken' from <unknown distribution> "
        "(accel_no_such_module:Thing) failed to import"
    )


def test_a_report_section_may_not_replace_a_core_key(registered: Callable[..., None]) -> None:
    from accel import report

    registered(versions=f"{HERE}:NamedLikeACoreKey")
    with pytest.raises(extensions.IntegrationError, match=r"'versions'.*expected a name other"):
        report.collect()


def test_two_registrations_of_one_name_are_an_error_naming_both() -> None:
    entries = [
        EntryPoint("twin", f"{HERE}:FakeIntegration", extensions.GROUP),
        EntryPoint("twin", f"{HERE}:NamedLikeACoreKey", extensions.GROUP),
    ]
    with pytest.raises(extensions.IntegrationError) as error:
        extensions.discover(entries)
    assert str(error.value) == (
        "accel integration name 'twin' is registered twice: accel integration 'twin' from "
        f"<unknown distribution> ({HERE}:FakeIntegration) and accel integration 'twin' from "
        f"<unknown distribution> ({HERE}:NamedLikeACoreKey)"
    )


def test_an_installed_distribution_registers_through_its_metadata(
    install: Installer, capsys: pytest.CaptureFixture[str]
) -> None:
    install(
        "accel-fake-integration",
        {"hello": "fake_integration:Hello"},
        {
            "fake_integration": textwrap.dedent(
                """
                from accel.extensions import Integration

                class Hello(Integration):
                    def add_subcommands(self, commands):
                        hello = commands.add_parser("hello")
                        hello.set_defaults(handler=lambda args: print("hi") or 0)
                """
            ),
        },
        group=extensions.GROUP,
    )
    extensions.reset()
    try:
        assert cli.main(["hello"]) == 0
        assert capsys.readouterr().out == "hi\n"
        assert {entry.name for entry in extensions.registered()} >= {
            "deepspeed",
            "hello",
            "transformers",
        }
    finally:
        extensions.reset()


def test_the_built_ins_are_used_when_the_metadata_lacks_them(
    registered: Callable[..., None],
) -> None:
    registered()
    names = {entry.name: entry.origin for entry in extensions.registered()}
    assert names == {
        "deepspeed": "accel integration 'deepspeed' from <unknown distribution> "
        "(accel.integrations.deepspeed.extension:DeepSpeedIntegration)",
        "transformers": "accel integration 'transformers' from <unknown distribution> "
        "(accel.integrations.transformers:TransformersIntegration)",
    }


def test_pyproject_registers_the_built_ins_the_source_tree_list_names() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][extensions.GROUP]
    assert declared == extensions._SOURCE_TREE_BUILTINS, (
        'pyproject.toml\'s [project.entry-points."accel.integrations"] and '
        "accel.extensions._SOURCE_TREE_BUILTINS must name the same integrations"
    )


@pytest.mark.slow
def test_import_accel_and_selection_load_no_integration() -> None:
    code = (
        "import sys, accel; accel.get_accelerator();"
        "print(sorted(m for m in sys.modules if m.startswith('accel.integrations')"
        " or m == 'accel.extensions'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


def test_what_an_integration_prints_at_import_stays_off_the_json(
    registered: Callable[..., None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "banner_integration.py").write_text(
        "from accel.extensions import Integration\n"
        "print('vendor banner, printed at import')\n"
        "class Banner(Integration):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registered(banner="banner_integration:Banner")
    assert cli.main(["report", "--json"]) == 0
    out, err = capfd.readouterr()
    json.loads(out)
    assert "vendor banner, printed at import" in err
