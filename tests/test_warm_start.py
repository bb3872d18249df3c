"""The warm start the tests use for the processes they start (tests/support/warm.py): a
script forked from the zygote sees what a cold ``python`` start would show it."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import warm
from tests.support.zygote import read_line, send_request

pytestmark = [
    pytest.mark.slow,  # starts interpreters
    pytest.mark.skipif(
        os.environ.get(warm.COLD_STARTS, "0") != "0",
        reason=f"{warm.COLD_STARTS} turns off the warm starts these tests check",
    ),
]

# What a script can see of how it was started, and (at exit) of what it ran as.
PROBE = textwrap.dedent(
    """
    import atexit, json, os, sys
    warm = "torch" in sys.modules  # before this script imports anything
    def annotated(x: int) -> None: ...
    import torch
    print(json.dumps({
        "warm": warm,
        "argv": sys.argv,
        "path": sys.path,
        "cwd": os.getcwd(),
        "name": __name__,
        "file": globals().get("__file__"),
        "probe_env": os.environ.get("PROBE_ENV"),
        "threads": torch.get_num_threads(),
        "accel_imported": any(m == "accel" or m.startswith("accel.") for m in sys.modules),
        "deepspeed_hook": any("deepspeed" in type(f).__module__ for f in sys.meta_path),
        "sitecustomize_ran": getattr(sys, "probe_sitecustomize", False),
        "safe_path": sys.flags.safe_path,
        "stdin_is_devnull": os.path.samefile("/dev/stdin", os.devnull),
        "annotation": repr(annotated.__annotations__["x"]),  # no inherited __future__ flags
        "builtins": type(__builtins__).__name__,
        "unbuffered": sys.stdout.write_through,  # -u
    }))
    atexit.register(lambda: print(json.dumps({
        "main_at_exit": getattr(sys.modules["__main__"], "__file__", "no file"),
        "argv_at_exit": sys.argv,
    })))
    if sys.argv[-1] == "exit":
        sys.exit(0)  # Python exits at once: __main__ keeps its __file__ for atexit
    """
)


# A script that starts ``python ARGS`` with ``sys.executable``, as launchers start ranks,
# and passes on what it said and how it ended.
PARENT = textwrap.dedent(
    """
    import subprocess, sys
    result = subprocess.run([sys.executable, *sys.argv[1:]], capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.exit(result.returncode)
    """
)


def _seen(start: Any, tmp_path: Path, *argv: str, **env: str) -> list[dict[str, Any]]:
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # for -u
    result = start(
        [sys.executable, *argv],
        env={**inherited, "PYTHONPATH": os.pathsep.join(["extra", ""]), **env},
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines()]


def _cold_run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, stdin=subprocess.DEVNULL, **kwargs)


@pytest.mark.parametrize(
    "form", ["script", "script-exit", "module", "code", "started-by-a-child", "unbuffered"]
)
def test_a_warm_child_sees_what_a_cold_start_shows_it(tmp_path: Path, form: str) -> None:
    # "started-by-a-child": a script starts the probe with its own sys.executable, as a
    # launcher does; warm, that is the stand-in (tests/support/stand_in.py).
    (tmp_path / "parent.py").write_text(PARENT)
    (tmp_path / "probe_module.py").write_text(PROBE)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "probe.py").symlink_to(tmp_path / "probe_module.py")
    (tmp_path / "extra").mkdir()  # PYTHONPATH's relative entry, with a sitecustomize
    customize = "import sys\nsys.probe_sitecustomize = True\n"
    (tmp_path / "extra" / "sitecustomize.py").write_text(customize)
    argv = {
        "script": ["linked/probe.py", "a", "b"],  # relative, through a symbolic link
        "script-exit": ["linked/probe.py", "a", "exit"],
        "module": ["-m", "probe_module", "a", "b"],
        "code": ["-c", PROBE, "a", "b"],
        "started-by-a-child": ["parent.py", "linked/probe.py", "a", "b"],
        "unbuffered": ["parent.py", "-u", "-m", "probe_module", "a", "b"],
    }[form]
    env = {"PROBE_ENV": "x", "OMP_NUM_THREADS": "1", "ACCEL_DEEPSPEED": "1"}
    warm_seen = _seen(warm.run, tmp_path, *argv, **env)
    cold_seen = _seen(_cold_run, tmp_path, *argv, **env)
    assert warm_seen[0].pop("warm") is True  # a fork of the zygote, not a fallback
    assert cold_seen[0].pop("warm") is False
    assert warm_seen == cold_seen
    assert warm_seen[0]["deepspeed_hook"]  # accel-deepspeed.pth ran in the child
    assert warm_seen[0]["sitecustomize_ran"]


def test_a_missing_script_fails_as_python_does(tmp_path: Path) -> None:
    def start(run: Any) -> tuple[int, str]:
        result = run([sys.executable, "missing.py"], cwd=tmp_path, capture_output=True, text=True)
        return result.returncode, result.stderr

    assert start(warm.run) == start(subprocess.run)
    assert start(warm.run)[0] == 2


def test_an_ended_child_stays_a_zombie_until_its_status_is_asked_for() -> None:
    # As with Popen: the shared-memory code's dead-peer checks look for zombies.
    child = warm.popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 60
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not end within 60 s"
        time.sleep(0.01)
    time.sleep(0.2)  # were it to be reaped without being asked, it would be by now
    assert stat.exists()
    assert child.poll() == 0
    while stat.exists():  # reaped once asked
        assert time.monotonic() < deadline, "the child was not reaped"
        time.sleep(0.01)


def _zygote_and_threads(**env: str) -> tuple[str, str]:
    """The pid of the zygote a warm ``python -c`` came from, and torch's thread count."""
    code = "import os, torch; print(os.getppid(), torch.get_num_threads())"
    result = warm.run(
        [sys.executable, "-c", code], env={**os.environ, **env},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    zygote, threads = result.stdout.split()
    return zygote, threads


def test_start_up_variables_pick_a_zygote_of_their_own(tmp_path: Path) -> None:
    one, threads_one = _zygote_and_threads(OMP_NUM_THREADS="1")
    two, threads_two = _zygote_and_threads(OMP_NUM_THREADS="2")
    assert (threads_one, threads_two) == ("1", "2")
    assert one != two
    # Variables read after the start do not: a zygote started per value would cost a cold
    # start each (DeepSpeed's tests give each test its own TORCH_EXTENSIONS_DIR).
    first = _zygote_and_threads(OMP_NUM_THREADS="1", TORCH_EXTENSIONS_DIR=str(tmp_path / "a"))
    second = _zygote_and_threads(OMP_NUM_THREADS="1", TORCH_EXTENSIONS_DIR=str(tmp_path / "b"))
    assert first == second == (one, "1")


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_client_that_drops_an_ended_child_unasked_leaves_the_zygote_serving() -> None:
    # Its return code is unread, so closing the connection resets it (ECONNRESET).
    before, _ = _zygote_and_threads(OMP_NUM_THREADS="1")
    dropped = warm.popen([sys.executable, "-c", "pass"], env={**os.environ, "OMP_NUM_THREADS": "1"})
    stat = Path(f"/proc/{dropped.pid}/stat")
    deadline = time.monotonic() + 60
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not end within 60 s"
        time.sleep(0.01)
    time.sleep(0.1)  # its return code is on the way
    del dropped
    gc.collect()
    while stat.exists():  # reaped once let go
        assert time.monotonic() < deadline, "the dropped child was not reaped"
        time.sleep(0.01)
    assert _zygote_and_threads(OMP_NUM_THREADS="1")[0] == before


def test_a_request_the_zygote_cannot_read_is_refused_and_it_serves_on() -> None:
    code = "import os, sys; print(os.getppid(), sys.executable)"
    said = warm.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"},
                    capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    pid, stand_in = said.stdout.split()
    socket_path = os.path.join(os.path.dirname(stand_in), "socket")  # beside its stand-in
    for request in ({"argv": ["-c", "pass"]}, ["not", "a", "request"]):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(socket_path)
            send_request(connection, request, [0, 1, 2])  # type: ignore[arg-type]
            assert read_line(connection, timeout=60) is None  # closed unanswered
    assert _zygote_and_threads(OMP_NUM_THREADS="1")[0] == pid


def test_exit_codes_and_output_are_those_of_the_script(tmp_path: Path) -> None:
    def run(code: str) -> subprocess.CompletedProcess[str]:
        return warm.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    assert run("import sys; sys.exit(3)").returncode == 3
    failed = run("raise ValueError('boom')")
    assert failed.returncode == 1
    assert failed.stderr.rstrip().endswith("ValueError: boom")
    said = run("import sys; print('out'); print('err', file=sys.stderr)")
    assert (said.returncode, said.stdout, said.stderr) == (0, "out\n", "err\n")
    merged = warm.popen(
        [sys.executable, "-c", "import sys; print('x' * 200000); sys.stderr.write('e')"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    out, err = merged.communicate(timeout=120)
    assert (len(out), err, merged.returncode) == (200002, None, 0)


def test_a_warm_child_can_be_waited_for_with_a_limit_and_killed() -> None:
    sleeper = warm.popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert isinstance(sleeper, warm.WarmProcess)
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.2)
    assert sleeper.poll() is None
    sleeper.kill()
    assert sleeper.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)


def test_what_the_zygote_cannot_run_starts_cold(monkeypatch: pytest.MonkeyPatch) -> None:
    def started_cold(args: list[str], **kwargs: Any) -> bool:
        with warm.popen(args, **kwargs) as process:
            return isinstance(process, subprocess.Popen)

    assert started_cold([sys.executable, "-X", "utf8", "-c", "pass"])  # an interpreter option
    assert not started_cold([sys.executable, "-u", "-c", "pass"])  # but -u, which it can do
    assert started_cold(["true"])  # another program
    assert started_cold([sys.executable, "-c", "pass"], pass_fds=())  # an argument it lacks
    assert not started_cold([sys.executable, "-c", "pass"])
    monkeypatch.setenv(warm.COLD_STARTS, "1")
    assert started_cold([sys.executable, "-c", "pass"])


# Processes a warm child starts with its sys.executable, as launchers start their ranks:
# each case's outcome, run by a script the test starts warm (through the stand-in) and cold.
FAMILY = textwrap.dedent(
    """
    import json, os, select, signal, subprocess, sys, time

    def sleeper(**kwargs):
        # SIGTERM ends it with status 7: the signal itself reached it, not a kill after.
        code = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: "
                "sys.exit(7)); print(os.getpid(), flush=True); time.sleep(60)")
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, **kwargs)
        return child, int(child.stdout.readline())

    def gone(pid):
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pid}"):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def ended(code, **kwargs):
        return subprocess.run([sys.executable, "-c", code], **kwargs).returncode

    outcomes = {}
    child, _ = sleeper()
    child.terminate()
    outcomes["terminate"] = child.wait()
    child, _ = sleeper(start_new_session=True)  # torchrun's way: a session per rank
    os.killpg(child.pid, signal.SIGTERM)
    outcomes["killpg"] = child.wait()
    child, pid = sleeper()
    child.kill()  # a killed stand-in takes its child with it
    outcomes["kill"] = [child.wait(), gone(pid)]
    outcomes["exit"] = ended("import sys; sys.exit(3)")
    outcomes["signal"] = ended("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)")
    read, write = os.pipe()
    code = f"import os; os.write({write}, b'through')"
    status = ended(code, pass_fds=(write,))
    os.close(write)  # so that the read ends, whatever the child did
    outcomes["pass_fds"] = [status, os.read(read, 16).decode()]
    # Its end of a pipe is the child's alone: closed there, the pipe ends at once.
    read, write = os.pipe()
    code = f"import os, time; os.close({write}); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], pass_fds=(write,))
    os.close(write)
    outcomes["pipe_closed_by_the_child"] = bool(select.select([read], [], [], 30)[0])
    child.kill()
    child.wait()
    # A signal sent as soon as the process exists, whether or not the zygote has forked
    # the child yet, ends it.
    soon = []
    for delay_ms in range(0, 150, 10):  # before, while and after the stand-in asks
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        time.sleep(delay_ms / 1000)
        child.terminate()
        soon.append(child.wait())
    outcomes["terminate_soon"] = sorted(set(soon))
    print(json.dumps(outcomes))
    """
)


def test_a_warm_childs_own_children_end_and_take_signals_as_cold_ones(tmp_path: Path) -> None:
    (tmp_path / "family.py").write_text(FAMILY)

    def outcomes(start: Any) -> dict[str, Any]:
        result = start([sys.executable, "family.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, check=True)  # fmt: skip
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    warm_outcomes = outcomes(warm.run)
    assert warm_outcomes == outcomes(_cold_run)
    assert warm_outcomes == {
        "terminate": 7, "killpg": 7, "kill": [-signal.SIGKILL, True],
        "exit": 3, "signal": -signal.SIGUSR1, "pass_fds": [0, "through"],
        "pipe_closed_by_the_child": True, "terminate_soon": [-signal.SIGTERM],
    }  # fmt: skip


# Which of a warm child's own children are forked warm: each case's command and the
# variables it adds; the child says whether it started with torch imported.
WHICH = textwrap.dedent(
    """
    import json, os, subprocess, sys
    pinned = json.dumps({"ranks": [{"cores": [0], "env": {}}]})
    unpinned = json.dumps({"ranks": [{"cores": None, "env": {}}]})
    one_cpu = {min(os.sched_getaffinity(0))}
    cases = {  # options, variables added, Popen arguments
        "same start": ([], {}, {}),
        "-u": (["-u"], {}, {}),
        "read later": ([], {"TORCH_NCCL_ABORT_IN_DESTROY_PG": "1", "ACCEL_RUN_PLAN": unpinned}, {}),
        "other threads": ([], {"OMP_NUM_THREADS": "3"}, {}),
        "pinned by accel run": ([], {"ACCEL_RUN_PLAN": pinned}, {}),
        "fewer cpus": ([], {}, {"preexec_fn": lambda: os.sched_setaffinity(0, one_cpu)}),
        "interpreter option": (["-X", "utf8"], {}, {}),
        "cold starts asked for": ([], {"ACCEL_TESTS_COLD_STARTS": "1"}, {}),
    }
    warm = {}
    for case, (options, env, popen) in cases.items():
        code = "import sys; print('torch' in sys.modules)"
        said = subprocess.run([sys.executable, *options, "-c", code], env={**os.environ, **env},
                              capture_output=True, text=True, check=True, **popen).stdout
        warm[case] = said.strip() == "True"
    print(json.dumps(warm))
    """
)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to narrow")
def test_a_warm_childs_own_children_are_warm_only_where_they_start_as_it_did() -> None:
    result = warm.run([sys.executable, "-c", WHICH], capture_output=True, text=True,
                      timeout=300, check=True)  # fmt: skip
    assert json.loads(result.stdout) == {
        "same start": True, "-u": True, "read later": True,
        # OpenMP sizes its pool by these when it starts:
        "other threads": False, "pinned by accel run": False, "fewer cpus": False,
        "interpreter option": False, "cold starts asked for": False,
    }  # fmt: skip
