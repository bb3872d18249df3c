"""Entry-point discovery: plugins, priorities, failure isolation and duplicate names."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import accel
from accel import _probe, _registry
from accel.backends.base import Availability
from accel.backends.cpu import CPUAccelerator
from tests.support import ROOT, Installer

# no_gpu (tests/conftest.py): the fallback cases expect the CPU to be chosen, also on a GPU
# machine.
pytestmark = pytest.mark.usefixtures("fresh_selection", "fresh_registry", "no_gpu")


GOOD_PLUGIN = textwrap.dedent(
    """
    from typing import ClassVar
    from accel.backends.base import Availability
    from accel.backends.cpu import CPUAccelerator

    class Fast(CPUAccelerator):
        name: ClassVar[str] = "fast"
        priority: ClassVar[int] = 500

        @classmethod
        def probe(cls) -> Availability:
            return Availability(True, "always")
    """
)


def test_builtins_register_through_entry_points() -> None:
    entries = _registry.registry()
    assert {"cpu", "cuda", "xpu", "mps", "npu", "hpu", "privateuse1"} <= set(entries)
    assert entries["cpu"].distribution == "accel"
    assert entries["cpu"].backend is CPUAccelerator
    assert list(entries) == sorted(entries, key=lambda n: (-(entries[n].priority or 0), n))


def test_installed_plugin_is_discovered_and_selected_by_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = _registry.registry()
    if "toy" not in entries:
        pytest.fail("accel-test-plugin is not installed: pip install ./tests/plugin")
    assert entries["toy"].distribution == "accel-test-plugin"
    monkeypatch.setenv("ACCEL_TEST_PLUGIN_AVAILABLE", "1")
    monkeypatch.setenv("ACCEL_BACKEND", "toy")
    assert type(accel.get_accelerator()).__name__ == "ToyAccelerator"
    assert accel.current_selection().how == "env"


def test_auto_detection_prefers_the_highest_priority_available(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    install("fastdist", {"fast": "fast_plugin:Fast"}, {"fast_plugin": GOOD_PLUGIN})
    assert type(accel.get_accelerator()).__name__ == "Fast"
    assert accel.current_selection().how == "auto"


def test_unavailable_backend_requested_by_env_says_why(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    source = GOOD_PLUGIN.replace('Availability(True, "always")', 'Availability(False, "no board")')
    install("absentdist", {"fast": "absent_plugin:Fast"}, {"absent_plugin": source})
    monkeypatch.setenv("ACCEL_BACKEND", "fast")
    with pytest.raises(RuntimeError, match=r"ACCEL_BACKEND='fast'.*not available: no board"):
        accel.get_accelerator()


def test_cpu_fallback_is_logged_at_info_not_as_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The expected state of a CPU-only machine: every process of a job would print it.
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    with caplog.at_level(logging.INFO, logger="accel"):
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
    fallback = [r for r in caplog.records if "no accelerator is available" in r.getMessage()]
    assert [r.levelno for r in fallback] == [logging.INFO]
    assert "cuda" in fallback[0].getMessage()


def test_plugin_that_fails_to_import_is_skipped_and_reported(
    monkeypatch: pytest.MonkeyPatch, install: Installer, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    install(
        "brokendist",
        {"broken": "broken_plugin:Broken"},
        {"broken_plugin": "raise ImportError('no driver')"},
    )
    with caplog.at_level(logging.WARNING, logger="accel"):
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert "broken" in caplog.text
    assert "ImportError: no driver" in caplog.text  # the traceback is logged
    entry = _registry.registry()["broken"]
    assert entry.backend is None
    assert entry.availability().reason == "failed to load: ImportError: no driver"
    monkeypatch.setenv("ACCEL_BACKEND", "broken")
    accel.reset_accelerator()
    with pytest.raises(RuntimeError, match="'broken' from brokendist failed to load: ImportError"):
        accel.get_accelerator()


def test_a_malformed_entry_point_value_is_named_with_the_form_expected(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    # importlib.metadata said only "'NoneType' object has no attribute 'group'".
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    install("spacedist", {"spaced": "spaced_plugin:My Accelerator"}, {"spaced_plugin": ""})
    assert isinstance(accel.get_accelerator(), CPUAccelerator)
    reason = _registry.registry()["spaced"].availability().reason
    assert reason == (
        "failed to load: ValueError: entry point 'spaced' of group 'accel.backends' has the "
        "value 'spaced_plugin:My Accelerator'; expected 'module:Class' (a dotted module path, "
        "':' and a dotted attribute)"
    )


def test_a_backend_named_by_accel_backend_is_the_only_plugin_imported(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    # Every plugin module was imported to find the one named: one that hangs or breaks at
    # import held up (or broke) every process, whatever ACCEL_BACKEND said.
    install("slowdist", {"slow": "slow_plugin:Slow"}, {"slow_plugin": "IMPORTED = True"})
    monkeypatch.setenv("ACCEL_BACKEND", "cpu")
    assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert "slow_plugin" not in sys.modules
    with pytest.raises(ValueError, match="ACCEL_BACKEND='nope' names no backend; expected one"):
        _registry.available("nope", "ACCEL_BACKEND='nope'")
    assert "slow_plugin" not in sys.modules  # the names are known without importing
    assert "has no attribute 'Slow'" in str(_registry.registry()["slow"].error)  # all, here
    assert "slow_plugin" in sys.modules


def test_plugin_whose_probe_raises_is_skipped(
    monkeypatch: pytest.MonkeyPatch, install: Installer, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    source = GOOD_PLUGIN.replace(
        'return Availability(True, "always")', "raise OSError('bus error')"
    )
    install("probedist", {"fast": "probe_plugin:Fast"}, {"probe_plugin": source})
    with caplog.at_level(logging.WARNING, logger="accel"):
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert "probe() raised" in caplog.text
    assert _registry.registry()["fast"].availability().reason == "probe() raised OSError: bus error"


def test_plugin_whose_constructor_raises_gives_way_to_the_next_backend(
    monkeypatch: pytest.MonkeyPatch, install: Installer, caplog: pytest.LogCaptureFixture
) -> None:
    # Its probe says available, then making it fails: selection used to raise.
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    source = GOOD_PLUGIN + (
        "\n    def __init__(self) -> None:\n        raise RuntimeError('driver went away')\n"
    )
    install("ctordist", {"fast": "ctor_plugin:Fast"}, {"ctor_plugin": source})
    with caplog.at_level(logging.WARNING, logger="accel"):
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert "fast: its probe said available, then RuntimeError: driver went away" in caplog.text
    assert "failed to start: fast" in accel.current_selection().detail
    assert accel.current_selection().failed_to_start == {"fast": "RuntimeError: driver went away"}
    # The report's row says so too, not only its selection line (it read "yes, always").
    from accel import report

    row = {row.name: row for row in report.collect().backends}["fast"]
    assert row.reason == "always; then its constructor raised RuntimeError: driver went away"
    monkeypatch.setenv("ACCEL_BACKEND", "fast")
    accel.reset_accelerator()
    with pytest.raises(
        RuntimeError, match=r"backend 'fast' .* failed to start: RuntimeError: driver went away"
    ):
        accel.get_accelerator()


@pytest.mark.parametrize("made", ["None", "object()"])
def test_plugin_whose_constructor_returns_no_backend_gives_way_to_the_next(
    monkeypatch: pytest.MonkeyPatch, install: Installer, made: str
) -> None:
    # get_accelerator() returned what __new__ made: None, or a bare object.
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    source = GOOD_PLUGIN + f"\n    def __new__(cls):\n        return {made}\n"
    install("newdist", {"fast": "new_plugin:Fast"}, {"new_plugin": source})
    assert isinstance(accel.get_accelerator(), CPUAccelerator)
    said = accel.current_selection().failed_to_start["fast"]
    returned = "NoneType" if made == "None" else "object"
    assert said.startswith(f"TypeError: Fast() returned {returned}, which does not satisfy "
                           "accel.Accelerator; missing or not callable: "), said  # fmt: skip
    monkeypatch.setenv("ACCEL_BACKEND", "fast")
    accel.reset_accelerator()
    with pytest.raises(RuntimeError, match=r"backend 'fast' .* failed to start: TypeError: Fast"):
        accel.get_accelerator()


def test_malformed_plugin_classes_are_rejected_with_the_problem(install: Installer) -> None:
    odd = GOOD_PLUGIN + (
        "\nINSTANCE = Fast()\n"
        "\nclass Truthy(Fast):\n    name = 'truthy'\n    priority = True\n"
        "\nclass Unranked(Fast):\n    name = 'unranked'\n    priority = 5.0\n"
    )
    install(
        "oddities",
        {"wrongname": "odd_plugin:Fast", "notaclass": "odd_plugin:INSTANCE",
         "truthy": "odd_plugin:Truthy", "unranked": "odd_plugin:Unranked"},
        {"odd_plugin": odd},
    )  # fmt: skip
    entries = _registry.registry()
    assert entries["wrongname"].error == "class Fast declares name 'fast', expected 'wrongname'"
    assert entries["notaclass"].error == "entry point must name a class, got Fast"
    # A bool priority was taken as an int one (True outranked the CPU).
    assert entries["truthy"].error == "class Truthy must declare an int priority, got bool True"
    assert entries["unranked"].error == (
        "class Unranked must declare an int priority, got float 5.0"
    )


def test_two_distributions_with_one_name_is_an_error_naming_both(install: Installer) -> None:
    install("firstdist", {"twin": "twin_a:Fast"}, {"twin_a": GOOD_PLUGIN})
    install("seconddist", {"twin": "twin_b:Fast"}, {"twin_b": GOOD_PLUGIN})
    with pytest.raises(_registry.DuplicateBackendError, match=r"'twin'.*firstdist.*seconddist"):
        _registry.registry()


def test_builtins_are_used_from_an_uninstalled_source_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "entry_points", lambda group: [])
    entries = _registry.registry()
    assert entries["cpu"].backend is CPUAccelerator
    assert entries["cpu"].distribution == "<unknown distribution>"


@pytest.mark.parametrize(
    ("answer", "shown"), [("None", "NoneType None"), ("True", "bool True"), ("'yes'", "str 'yes'")]
)
def test_a_probe_answer_that_is_no_availability_names_the_plugin(
    monkeypatch: pytest.MonkeyPatch,
    install: Installer,
    caplog: pytest.LogCaptureFixture,
    answer: str,
    shown: str,
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    source = GOOD_PLUGIN.replace('return Availability(True, "always")', f"return {answer}")
    install("oddprobe", {"fast": "odd_probe:Fast"}, {"odd_probe": source})
    with caplog.at_level(logging.WARNING, logger="accel"):
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
    reason = _registry.registry()["fast"].availability().reason
    assert reason == f"probe() returned {shown}, expected accel.backends.base.Availability"
    assert "'fast' from oddprobe" in caplog.text


def test_availability_keeps_answers_that_were_never_strings() -> None:
    # Backends written before Availability checked its fields keep working.
    assert Availability(2, "two boards") == Availability(True, "two boards")  # type: ignore[arg-type]
    assert Availability(0, "none") == Availability(False, "none")  # type: ignore[arg-type]
    assert Availability(True, OSError("x")).reason == "x"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ('Availability("no", "a string")',
         "probe() raised TypeError: Availability.available must be a bool, got str 'no'"),
        ("exit(3)", "probe() raised SystemExit with exit code 3"),
        ("__import__('sys').exit()", "probe() raised SystemExit with exit code None"),
        ("(_ for _ in ()).throw(KeyboardInterrupt())", "probe() raised KeyboardInterrupt"),
    ],
    ids=["truthy-string", "system-exit", "bare-exit", "keyboard-interrupt"],
)  # fmt: skip
def test_a_probe_answer_is_taken_only_for_what_it_says(
    monkeypatch: pytest.MonkeyPatch, install: Installer, answer: str, reason: str
) -> None:
    # Availability("no", ...) counted as available; SystemExit and KeyboardInterrupt in a
    # probe were reported as a timeout.
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    source = GOOD_PLUGIN.replace('return Availability(True, "always")', f"return {answer}")
    install("oddanswer", {"fast": "odd_answer:Fast"}, {"odd_answer": source})
    assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert _registry.registry()["fast"].availability().reason.startswith(reason)


def test_a_slow_probe_is_bounded_and_asked_once(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    monkeypatch.setenv(_probe.PROBE_TIMEOUT_ENV, "1")
    source = GOOD_PLUGIN.replace(
        'return Availability(True, "always")',
        "CALLS.append(1); RELEASE.wait(120); return Availability(True, 'late')",
    ).replace(
        "class Fast", "import threading\nCALLS, RELEASE = [], threading.Event()\n\n\nclass Fast"
    )
    install("slowdist", {"fast": "slow_probe:Fast"}, {"slow_probe": source})
    try:
        started = time.perf_counter()
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
        entry = _registry.registry()["fast"]
        reason = entry.availability().reason
        assert reason == "probe() did not answer within 1 s (ACCEL_PROBE_TIMEOUT)"
        # Selection and the second question together, with the probe still unanswered.
        assert time.perf_counter() - started < 60
        assert sys.modules["slow_probe"].CALLS == [1]  # probed once
    finally:
        sys.modules["slow_probe"].RELEASE.set()


def test_probes_are_asked_on_one_thread_kept_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A thread started per probe cost selection ~0.2-0.5 ms a backend, more when loaded.
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    answers = [entry.availability() for entry in _registry.registry().values()]
    assert len(answers) >= 9  # every built-in backend was asked
    assert len([name for name in started if name.startswith("accel-probe")]) <= 1


@pytest.mark.slow
def test_a_forked_child_probes_on_threads_of_its_own() -> None:
    # The parent's kept thread does not exist in a child made by fork().
    code = """
        import os, sys, time
        from accel import _probe
        from accel.backends.cpu import CPUAccelerator
        assert _probe.in_thread(CPUAccelerator, "cpu", 10).available
        pid = os.fork()
        if pid == 0:
            started = time.perf_counter()
            answer = _probe.in_thread(CPUAccelerator, "cpu", 10)
            os._exit(0 if answer.available and time.perf_counter() - started < 5 else 1)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "read"),
    [
        *[(_probe.PROBE_TIMEOUT_ENV, v, _probe.probe_timeout)
          for v in ("0", "-1", "soon", "nan", "inf")],
        *[(_probe.PROBE_ISOLATION_ENV, v, _probe.probe_isolation)
          for v in ("", "threads", "subprocess")],
    ],
)  # fmt: skip
def test_a_bad_probe_setting_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, read: Callable[[], object]
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=f"{variable} must be .* got '{value}'"):
        read()


# A probe that blocks while holding the GIL: ctypes.PyDLL calls C without releasing it.
_GIL_HELD = "import ctypes; ctypes.PyDLL(None).sleep(60); return Availability(True, 'late')"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('return Availability(True, "always")', None),
        ('return Availability(False, "no board")', "no board"),
        ("raise ValueError('boom')",
         "probe() raised ValueError: boom (in a separate process, ACCEL_PROBE_ISOLATION=process)"),
        ("import ctypes; ctypes.string_at(0); return Availability(True, 'x')",
         "probe() killed its process with SIGSEGV (ACCEL_PROBE_ISOLATION=process)"),
        ("return 'yes'", "probe() returned str 'yes', expected accel.backends.base.Availability"),
        ("import sys; sys.exit()",
         "probe() raised SystemExit with exit code None (in a separate process, "
         "ACCEL_PROBE_ISOLATION=process)"),
        (_GIL_HELD, "probe() did not answer within 5 s (ACCEL_PROBE_TIMEOUT; in a separate "
                    "process, ACCEL_PROBE_ISOLATION=process)"),
    ],
    ids=["available", "unavailable", "raises", "crashes", "not-an-answer", "exits",
         "holds-the-gil"],
)  # fmt: skip
def test_probes_in_a_separate_process_are_bounded_whatever_they_do(
    monkeypatch: pytest.MonkeyPatch, install: Installer, body: str, reason: str | None
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    monkeypatch.setenv(_probe.PROBE_ISOLATION_ENV, "process")
    # Only the probe that holds the GIL (for 60 s) must run out of time; the others get a
    # minute. The limit starts once the child has imported torch (seconds on a loaded
    # machine), so the built-ins' probes, asked by a second child after the GIL holder ran
    # out of time, answer well within the GIL holder's 5 s.
    monkeypatch.setenv(_probe.PROBE_TIMEOUT_ENV, "5" if body == _GIL_HELD else "60")
    source = GOOD_PLUGIN.replace('return Availability(True, "always")', body)
    install("isolated", {"fast": "isolated_probe:Fast"}, {"isolated_probe": source})
    started = time.perf_counter()
    chosen = accel.get_accelerator()
    answer = _registry.registry()["fast"].availability()
    assert time.perf_counter() - started < 50  # not the GIL holder's 60 s
    if reason is None:
        assert answer.available
        assert type(chosen).__name__ == "Fast"
    else:
        assert not answer.available
        assert answer.reason == reason
        assert isinstance(chosen, CPUAccelerator)


# A torch that cannot be imported, or whose import never ends (a wedged device driver).
_TORCH_THAT_FAILS = {
    "fails": "raise ImportError('this torch is broken')",
    "hangs": "import time\ntime.sleep(600)",
}


@pytest.mark.slow
@pytest.mark.parametrize("torch_does", list(_TORCH_THAT_FAILS))
def test_a_probing_interpreter_that_cannot_start_answers_for_every_backend_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch_does: str
) -> None:
    # The interpreter imports torch before it is ready: if it never is, no probe ran, so
    # every backend gets that one reason from one interpreter (not one start, and one
    # start limit, per backend, each blamed on its probe).
    (tmp_path / "torch.py").write_text(_TORCH_THAT_FAILS[torch_does])
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])  # the child's PYTHONPATH
    monkeypatch.setattr(_probe, "_START_S", 3.0)
    targets = ["accel.backends.cpu:CPUAccelerator", "accel.backends.cuda:CUDAAccelerator"]
    started = time.perf_counter()
    answers = _probe.in_process(targets, timeout=60)
    assert time.perf_counter() - started < 30  # one start, not one per backend
    reasons = {target: getattr(answers[target], "reason", None) for target in targets}
    expected = {
        "fails": "the probing interpreter ended with exit status 1 while importing torch and "
        "accel: ImportError: this torch is broken (ACCEL_PROBE_ISOLATION=process)",
        "hangs": "the probing interpreter did not import torch and accel within 3 s "
        "(ACCEL_PROBE_ISOLATION=process)",
    }[torch_does]
    assert reasons == dict.fromkeys(targets, expected)


# A probe that writes half a line, and one that writes a line shaped like an answer: the
# answers travel on their own pipe, so neither can take another backend's answer.
_CHATTY = GOOD_PLUGIN.replace(
    'return Availability(True, "always")',
    "print('scanning bus... ', end='', flush=True); return Availability(False, 'no bus')",
).replace('"fast"', '"chatty"')
_FAKE_ANSWER = 'accel-probe {"available": true, "reason": "fake"}'  # an answer line's shape
_FAKER = f"FAKE = {_FAKE_ANSWER!r}\n" + GOOD_PLUGIN.replace(
    'return Availability(True, "always")',
    "print(FAKE, flush=True)\n"
    "        import sys; print('accel-probe ready', file=sys.stderr)\n"
    "        return Availability(False, 'no card')",
).replace('"fast"', '"faker"')


@pytest.mark.slow
@pytest.mark.parametrize("priority", [5, 95])
def test_what_a_probe_prints_in_a_separate_process_is_never_taken_for_an_answer(
    monkeypatch: pytest.MonkeyPatch,
    install: Installer,
    capsys: pytest.CaptureFixture[str],
    priority: int,
) -> None:
    # Answers matched by position on the probes' stdout would shift: the half line hides
    # the chatty backend's answer and every later backend gets the next one's, so a plugin
    # is selected (priority 5) or the CPU gets no answer (priority 95).
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    monkeypatch.setenv(_probe.PROBE_ISOLATION_ENV, "process")
    monkeypatch.setenv(_probe.PROBE_TIMEOUT_ENV, "60")
    install(
        "noisy",
        {"chatty": "chatty_probe:Fast", "faker": "faker_probe:Fast"},
        {
            "chatty_probe": _CHATTY.replace("= 500", f"= {priority}"),
            "faker_probe": _FAKER.replace("= 500", f"= {priority + 1}"),
        },
    )
    chosen = accel.get_accelerator()
    entries = _registry.registry()
    assert entries["chatty"].availability() == Availability(False, "no bus")
    assert entries["faker"].availability() == Availability(False, "no card")
    # Every other backend gets the answer its probe gives without the noisy ones.
    others = {name: entry for name, entry in entries.items() if name not in ("chatty", "faker")}
    alone = _probe.in_process([entry.target for entry in others.values()], 60)
    for name, entry in others.items():
        assert entry.availability() == alone[entry.target], name
    first = next(entry for entry in others.values() if entry.availability().available)
    assert type(chosen) is first.backend
    # What the probes wrote reaches this process's streams, as it does from a thread.
    out, err = capsys.readouterr()
    assert "scanning bus... " in out
    assert _FAKE_ANSWER in out
    assert "accel-probe ready" in err


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("import sys; sys.exit(3)", "SystemExit with exit code 3"),
        ("import sys; sys.exit()", "SystemExit with exit code None"),
        ("import sys; sys.exit('no driver')", "SystemExit with exit code 'no driver'"),
        ("raise GeneratorExit('closed')", "GeneratorExit: closed"),
    ],
    ids=["exit-3", "exit", "exit-message", "generator-exit"],
)
def test_a_plugin_that_exits_while_imported_is_skipped_not_the_end_of_the_host(
    monkeypatch: pytest.MonkeyPatch,
    install: Installer,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    statement: str,
    error: str,
) -> None:
    # A BaseException that is not an Exception passed through the loader and ended the
    # user's process from get_accelerator() and `accel report`.
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    install("exitdist", {"quitter": "exit_plugin:Fast"}, {"exit_plugin": statement})
    with caplog.at_level(logging.WARNING, logger="accel"):
        assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert "'quitter' from exitdist failed to import" in caplog.text
    entry = _registry.registry()["quitter"]
    assert entry.backend is None
    assert entry.error == error
    assert entry.availability().reason == f"failed to load: {error}"
    assert entry.priority is None  # its class never loaded: no priority to show
    assert list(_registry.registry())[-1] == "quitter"
    from accel import cli

    assert cli.main(["report", "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out)["backends"] if r["name"] == "quitter"]
    assert row["reason"] == f"failed to load: {error}"
    assert row["priority"] is None
    assert cli.main(["report"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.split()[:1] == ["quitter"]]
    assert line.split()[:3] == ["quitter", "-", "no"]


def test_a_plugin_interrupted_while_imported_lets_the_interrupt_through(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    # Ctrl-C during discovery is the user's, not the plugin's: it is never swallowed.
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    install("ctrlc", {"ctrlc": "ctrlc_plugin:Fast"}, {"ctrlc_plugin": "raise KeyboardInterrupt"})
    with pytest.raises(KeyboardInterrupt):
        accel.get_accelerator()


def test_a_constructor_that_exits_gives_way_to_the_next_backend(
    monkeypatch: pytest.MonkeyPatch, install: Installer
) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    source = GOOD_PLUGIN + "\n    def __init__(self) -> None:\n        raise SystemExit(4)\n"
    install("exitctor", {"fast": "exit_ctor:Fast"}, {"exit_ctor": source})
    assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert "then SystemExit with exit code 4" in accel.current_selection().detail
    monkeypatch.setenv("ACCEL_BACKEND", "fast")
    accel.reset_accelerator()
    with pytest.raises(
        RuntimeError, match=r"'fast' .* failed to start: SystemExit with exit code 4"
    ):
        accel.get_accelerator()


# A backend whose probe or constructor asks for the selection: each mode by an environment
# variable, so that the probing interpreter of ACCEL_PROBE_ISOLATION=process does the same.
ASKING_PLUGIN = GOOD_PLUGIN.replace(
    'return Availability(True, "always")',
    "if os.environ.get('ASK_IN') == 'probe': accel.get_accelerator()\n"
    "        threading.Event().wait(float(os.environ.get('PROBE_S', '0')))\n"
    "        return Availability(True, 'always')",
).replace(
    "from typing",
    "import os, threading\nimport accel\n"
    "if os.environ.get('ASK_IN') == 'import':\n    accel.get_accelerator()\nfrom typing",
) + (
    "\n    def __init__(self) -> None:\n"
    "        if os.environ.get('ASK_IN') == 'constructor':\n"
    "            accel.get_accelerator()\n"
    "        super().__init__()\n"
)

ASKING_SCRIPT = """
import os, signal, sys, threading, time
import accel
from accel import _registry

def fresh(**env):
    os.environ.pop("ASK_IN", None)
    os.environ.update(env)
    accel.reset_accelerator()
    _registry.reset_registry()

def attempt():
    try:
        return accel.current_selection().detail
    except RuntimeError as error:
        return f"raised {error}"

fresh(ASK_IN="import")
print("import, auto:", attempt(), _registry.registry()["fast"].error)
sys.modules.pop("asking_plugin", None)
fresh(ASK_IN="constructor")
print("constructor, auto:", attempt())
fresh(ASK_IN="constructor", ACCEL_BACKEND="fast")
print("constructor, env:", attempt())
del os.environ["ACCEL_BACKEND"]
for isolation in ("thread", "process"):
    fresh(ASK_IN="probe", ACCEL_PROBE_ISOLATION=isolation)
    print(f"probe in a {isolation}:", attempt(), _registry.registry()["fast"].availability())
# A child forked while another thread chooses, its probe under way.
fresh(ACCEL_PROBE_ISOLATION="thread", PROBE_S="3")
threading.Thread(target=accel.get_accelerator).start()
deadline = time.monotonic() + 60
while not any(t.name == "accel-probe-fast" for t in threading.enumerate()):
    assert time.monotonic() < deadline, "the probe never started"
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a hang ends the child, which the parent reports
    os.write(1, f"forked child: {type(accel.get_accelerator()).__name__}\\n".encode())
    os._exit(0)
print("forked child ended with:", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.mark.slow  # starts interpreters
def test_a_backend_may_not_ask_for_the_choice_it_is_part_of(
    tmp_path: Path, install: Installer
) -> None:
    # A module import or constructor that called get_accelerator() waited for the lock its
    # own selection held: the process hung (a probe that did waited out its time limit). A
    # child forked while another thread chose inherited that lock held: it hung.
    install("askingdist", {"fast": "asking_plugin:Fast"}, {"asking_plugin": ASKING_PLUGIN})
    result = subprocess.run(
        [sys.executable, "-c", ASKING_SCRIPT],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "askingdist")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    said = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    refusal = "accel.get_accelerator() called from the {} of backend {!r}, which runs while"
    assert said["import, auto"].startswith("highest-priority available: the host CPU")
    assert refusal.format("import", "fast") in said["import, auto"]
    assert said["constructor, auto"].startswith("highest-priority available: the host CPU")
    assert refusal.format("constructor", "fast") in said["constructor, auto"]
    assert said["constructor, env"].startswith("raised backend 'fast'")
    assert refusal.format("constructor", "fast") in said["constructor, env"]
    assert refusal.format("probe()", "fast") in said["probe in a thread"]
    # The probing interpreter knows the backend by its target.
    assert refusal.format("probe()", "asking_plugin:Fast") in said["probe in a process"]
    assert "did not answer" not in said["probe in a thread"] + said["probe in a process"]
    assert said["forked child"] == "Fast"
    assert said["forked child ended with"] == "0"
