"""What each rank runs first under ``accel run``: apply its plan, then run the user's code.

torchrun starts ``python -u <this file> [--module|--exec] TARGET ARGS...``: as a script,
not with ``-m``, so that the current directory is not on ``sys.path`` while it starts (a
``json.py`` there would shadow the standard library's). The plan (JSON in
``ACCEL_RUN_PLAN``, made by the launcher) gives each local rank its cores and environment.
Both are applied before the user's code (and so before torch and its OpenMP runtime)
starts; the affinity is inherited by every thread the rank creates, and survives
``--exec`` of a non-Python program. The user's code then sees what torchrun's ``python
script.py`` or ``python -m module`` gives it: ``sys.path[0]`` is the script's directory
(or the current directory for a module) and ``__file__`` an absolute path.

Only the standard library is imported here, before the user's code.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import zipfile
from collections.abc import Sequence
from typing import TypedDict, cast

PLAN_ENV = "ACCEL_RUN_PLAN"


class RankPlan(TypedDict):
    """What one local rank gets: its cores (None: unbound) and extra environment."""

    cores: list[int] | None
    env: dict[str, str]


class Plan(TypedDict):
    """Every local rank's plan, by local rank."""

    ranks: list[RankPlan]


def apply_plan(local_rank: int, plan: Plan) -> None:
    """Pin this process to the rank's cores and set its environment.

    With cores, ``OMP_NUM_THREADS`` is set to their number.

    Args:
        local_rank: This process's local rank.
        plan: Every local rank's plan, as the launcher made it.

    Raises:
        RuntimeError: ``plan`` has no entry for ``local_rank``.
        OSError: The OS refuses the cores (``sched_setaffinity``).
    """
    if local_rank >= len(plan["ranks"]):
        raise RuntimeError(f"{PLAN_ENV} has no entry for LOCAL_RANK={local_rank}")
    entry = plan["ranks"][local_rank]
    cores = entry["cores"]
    if cores:
        os.sched_setaffinity(0, cores)
        os.environ["OMP_NUM_THREADS"] = str(len(cores))
    os.environ.update(entry["env"])


def main(argv: Sequence[str] | None = None) -> None:
    """Apply the plan for ``LOCAL_RANK``, then run the target as ``__main__``.

    Args:
        argv: ``[--module|--exec] TARGET ARGS...``; ``None`` for ``sys.argv[1:]``. A script
            path by default, a module with ``--module``, or a program that replaces this
            process with ``--exec``.

    Raises:
        SystemExit: ``argv`` names no target.
        RuntimeError: The plan in ``ACCEL_RUN_PLAN`` has no entry for ``LOCAL_RANK``.
        OSError: The OS refuses the plan's cores, or ``--exec`` cannot run the program.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    raw_plan = os.environ.get(PLAN_ENV)
    if raw_plan is not None:
        try:
            plan = cast(Plan, json.loads(raw_plan))
        except ValueError:
            raise SystemExit(
                f"accel.launch.worker: {PLAN_ENV} is not the plan accel run writes (JSON): "
                f"{raw_plan[:80]!r}"
            ) from None
        apply_plan(int(os.environ.get("LOCAL_RANK", "0")), plan)
    mode = arguments.pop(0) if arguments and arguments[0] in ("--module", "--exec") else None
    if not arguments:
        raise SystemExit("accel.launch.worker: no program to run")
    target, *rest = arguments
    if mode == "--exec":
        try:
            os.execvp(target, [target, *rest])
        except OSError as error:
            raise SystemExit(f"accel run: cannot run {target!r}: {error.strerror}") from None
    # Started as `python <this file>`, this file's directory is sys.path[0]: the user's
    # code gets what `python script.py` (or `python -m`) puts there instead; nothing where
    # Python puts nothing (-P, PYTHONSAFEPATH) or did not start this file (--run-path).
    started_as_script = bool(sys.path) and sys.path[0] == os.path.dirname(
        os.path.realpath(__file__)
    )
    if started_as_script:
        del sys.path[0]
    if mode == "--module":
        if started_as_script:
            sys.path.insert(0, os.getcwd())
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    path = os.path.join(os.getcwd(), target)
    if os.path.realpath(os.path.normpath(path)) != os.path.realpath(path):
        # "link/../x.py" is "x.py" beside the link's target for the kernel (and for
        # `python link/../x.py`); runpy would normalise it to "x.py" beside the link.
        path = os.path.realpath(path)
    if started_as_script and not os.path.isdir(path) and not _is_zip(path):
        # Python resolves a symbolic link to find the script's directory.
        sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    sys.argv = [path, *rest]
    runpy.run_path(path, run_name="__main__")  # a directory or zip goes on sys.path itself


def _is_zip(path: str) -> bool:
    return zipfile.is_zipfile(path)


if __name__ == "__main__":
    main()
