"""``accel run``: torchrun (elastic agent, rendezvous, restarts, multi-node) plus binding.

Every torchrun option passes through unchanged; accel adds ``--bind-cores-to-rank`` and
``--bind-core-list``, defaults ``--nproc-per-node`` to the selected backend's device count,
and gives each rank its device-visibility variables through the backend's
``set_visible_devices_envs``. Exit status and failure handling are torchrun's: when one
rank fails, the agent stops the others and ``accel run`` exits non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from typing_extensions import Protocol, runtime_checkable

from accel import _host, extensions
from accel._validate import env_switch
from accel.backends._cuda_visible import parse_visible_devices
from accel.launch import worker
from accel.launch.cores import parse_core_list, split_cores
from accel.launch.worker import PLAN_ENV, Plan, RankPlan
from accel.protocols import Accelerator


@runtime_checkable
class _NumaDevices(Protocol):
    """A backend whose devices are NUMA nodes (the CPU)."""

    def numa_nodes(self) -> list[int]: ...


# nproc_per_node's default until the command line is read: anything the user wrote (any
# spelling torchrun's parser accepts, abbreviations included) replaces it.
_FROM_BACKEND = "accel:device_count"
MAX_LOCAL_RANKS = 65536  # ranks one launcher starts
MAX_MONITOR_INTERVAL = 86400.0  # seconds; the agent's clock overflows on inf


def _ranks(value: str, parser: argparse.ArgumentParser, torchrun: Any) -> int:
    """The number of local ranks ``--nproc-per-node`` asks for (a usage error if none)."""
    try:
        ranks = int(torchrun.determine_local_world_size(value))
    except (ValueError, AssertionError) as error:
        parser.error(f"--nproc-per-node {value!r}: {error or 'not a number of ranks'}")
    if ranks < 1:  # "-1" and " 0" too: torchrun reads them with int()
        parser.error(f"--nproc-per-node must be at least 1, got {value.strip()}")
    if ranks > MAX_LOCAL_RANKS:  # a typo's count would be planned (and fail) rank by rank
        parser.error(f"--nproc-per-node must be at most {MAX_LOCAL_RANKS}, got {value.strip()}")
    return ranks


def _visible_ids(
    accelerator: Accelerator, rank: int, ranks: int, cores: list[int] | None
) -> list[int]:
    if isinstance(accelerator, _NumaDevices):  # CPU: a rank sees the NUMA nodes of its cores
        nodes = accelerator.numa_nodes()
        topology = _host.numa_topology()
        if cores:
            own = sorted({n for n in nodes if topology.get(n, frozenset()) & set(cores)})
            return own or nodes[:1]
        return [nodes[rank * len(nodes) // ranks]]
    return [rank]  # one device per rank


def _inherited_ids(env: dict[str, str], ranks: int) -> None:
    """Where the launcher itself sees only some devices (``CUDA_VISIBLE_DEVICES=2,3``),
    the ids a rank was given count within them: local device 1 is the launcher's "3".
    CUDA's and ROCm's variables are read by CUDA's rules (a repeated or invalid entry ends
    the list); the others as comma-separated entries."""
    for name, value in env.items():
        inherited = os.environ.get(name)
        if inherited is None:
            continue
        if name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            visible = [str(entry) for entry in parse_visible_devices(inherited) or []]
        else:
            visible = [item.strip() for item in inherited.split(",") if item.strip()]
        local = [int(item) for item in value.split(",")]
        if max(local) >= len(visible):
            raise ValueError(
                f"{ranks} local ranks need device {max(local)}, but {name}={inherited!r} in "
                f"accel run's environment makes {len(visible)} visible"
            )
        env[name] = ",".join(visible[i] for i in local)


def _numa_cores(accelerator: Accelerator, allowed: set[int]) -> set[int]:
    """The allowed cores of the NUMA nodes the CPU backend uses (``ACCEL_VISIBLE_NUMA_NODES``
    may name fewer than the host has); all allowed cores where the topology is unknown."""
    if not isinstance(accelerator, _NumaDevices):
        return allowed
    topology = _host.numa_topology()
    if not topology:
        return allowed
    own: set[int] = set()
    for node in accelerator.numa_nodes():
        own |= topology.get(node, frozenset())
    return allowed & own or allowed


def make_plan(
    accelerator: Accelerator,
    ranks: int,
    bind: bool,
    core_list: str | None,
    core_list_source: str = "--bind-core-list",
) -> Plan:
    """Cores and environment for each local rank.

    Args:
        accelerator: The selected backend; it writes each rank's device-visibility
            variables (none where it has none).
        ranks: The number of local ranks.
        bind: Give each rank its own share of the cores this process may use.
        core_list: Bind to only these cores (``"0-51,56-107"``), even without ``bind``;
            ``None`` for every allowed core.
        core_list_source: Where ``core_list`` came from, for the messages.

    Returns:
        One entry per local rank: its cores (``None`` when not binding) and environment.

    Raises:
        ValueError: When binding: ``core_list`` is not a core list or names a core this
            process may not use (on the CPU: outside the NUMA nodes it uses), ``ranks`` is
            below 1, or there are fewer cores than ranks; or the launcher's own
            device-visibility variable shows fewer devices than the ranks need.
    """
    blocks: list[list[int] | None] = [None] * ranks
    if bind or core_list is not None:
        allowed = set(_host.allowed_cpus())
        usable = _numa_cores(accelerator, allowed)
        cores = sorted(usable)
        if core_list is not None:
            cores = parse_core_list(core_list, allowed, core_list_source)
            outside = sorted(set(cores) - usable)
            if outside:
                raise ValueError(
                    f"{core_list_source}: cores {outside} are not on the NUMA nodes the backend "
                    "uses (ACCEL_VISIBLE_NUMA_NODES)"
                )
        try:
            blocks = list(split_cores(cores, ranks))
        except ValueError as error:
            source = core_list_source if core_list is not None else (
                "--bind-cores-to-rank (the cores of this process's CPU affinity, on the NUMA "
                "nodes the backend uses)"
            )  # fmt: skip
            raise ValueError(f"{source}: {error}") from None
    entries: list[RankPlan] = []
    for rank, block in enumerate(blocks):
        env: dict[str, str] = {}
        if accelerator.visible_devices_envs():
            accelerator.set_visible_devices_envs(env, _visible_ids(accelerator, rank, ranks, block))
            if not isinstance(accelerator, _NumaDevices):
                _inherited_ids(env, ranks)
        entries.append({"cores": block, "env": env})
    return {"ranks": entries}


def _last_short_option(argument: str, actions: Mapping[str, argparse.Action]) -> tuple[str, bool]:
    """The last option of a cluster of short ones (``-mt3``: ``-m``, then ``-t`` with the
    value ``3``) and whether its value is attached; ``("", False)`` when a letter names no
    option."""
    for position in range(1, len(argument)):
        option = f"-{argument[position]}"
        action = actions.get(option)
        if action is None:
            return "", False
        if action.nargs != 0:
            return option, position + 1 < len(argument)
    return f"-{argument[-1]}", False


def _usage_error(message: str) -> NoReturn:
    """argparse's ``error``, in one line: the usage (19 lines) is ``accel run --help``'s."""
    print(f"accel run: error: {message} (accel run --help lists the options)", file=sys.stderr)
    raise SystemExit(2)


def _script_after_separator(arguments: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``arguments`` with ``--`` before the script, so that none of the script's own
    arguments is read as an abbreviation of a launcher option: argparse looks at every
    argument for one, and ``train.py --bind 0.0.0.0`` failed with "ambiguous option: --bind
    could match --bind-cores-to-rank, --bind-core-list" (torchrun passes it on). Arguments
    this cannot place (an unknown option) are left for argparse to report."""
    actions = parser._option_string_actions  # pyright: ignore[reportPrivateUsage]
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        if argument == "--" or not argument.startswith("-") or argument == "-":
            break
        name, attached = argument.split("=", 1)[0], "=" in argument
        if not argument.startswith("--") and len(argument) > 2:
            # -mt3, -mt 3, -t3: short flags, then at most one option with a value
            name, attached = _last_short_option(argument, actions)
        exact = actions.get(name)
        matches = {exact} if exact is not None else {
            action for option, action in actions.items()
            if name.startswith("--") and option.startswith(name)
        }  # fmt: skip
        nargs = {action.nargs for action in matches}
        if len(matches) != 1 or not nargs <= {None, 0}:
            return arguments  # argparse says what is wrong (or reads it as it does)
        index += 2 if nargs == {None} and not attached else 1
    if index >= len(arguments) or "--" in arguments[index : index + 2]:
        return arguments  # argparse drops a "--" right after the script, as torchrun's does
    return [*arguments[:index], "--", *arguments[index:]]


def _check_torchrun_options(args: Any, parser: argparse.ArgumentParser, torchrun: Any) -> None:
    """torchrun's options it checks only with a bare ``assert`` or ``int()`` deep inside
    (a traceback that names nothing), said as usage errors."""
    try:
        low, high = torchrun.parse_min_max_nnodes(args.nnodes)
    except (ValueError, RuntimeError):
        parser.error(f"--nnodes must be a number of nodes or MIN:MAX, got {args.nnodes!r}")
    if not 1 <= low <= high:
        parser.error(f"--nnodes must be at least 1 (and MIN <= MAX), got {args.nnodes!r}")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    if not 0 < args.monitor_interval <= MAX_MONITOR_INTERVAL:
        parser.error(
            f"--monitor-interval must be more than 0 and at most {MAX_MONITOR_INTERVAL:g} "
            f"seconds, got {args.monitor_interval}"
        )


def _check_program(args: Any, parser: argparse.ArgumentParser) -> None:
    """What every rank would fail on, said once before any starts, as torchrun's ``python``
    would say it."""
    program: str = args.training_script
    if args.no_python and args.module:
        parser.error("--no-python and --module (-m) cannot be used together")
    if args.no_python:
        if shutil.which(program) is None:
            parser.error(f"--no-python: {program!r} is not an executable program (PATH included)")
    elif not args.module and not os.path.exists(program):
        parser.error(f"can't open file {os.path.abspath(program)!r}: no such file or directory")
    elif (
        not args.module
        and os.path.isdir(program)
        and not os.path.isfile(os.path.join(program, "__main__.py"))
    ):
        parser.error(f"can't find '__main__' module in {os.path.abspath(program)!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``accel run``; returns the exit status.

    Args:
        argv: The arguments after ``accel run``; ``None`` for ``sys.argv[1:]``.

    Returns:
        0 when every rank succeeded; 1 when one failed (torchrun's message is printed); 2
        when an integration fails to load or its options clash (printed as
        ``accel run: error: ...``).

    Raises:
        SystemExit: A usage error (status 2, as argparse exits): the arguments do not parse,
            an integration cannot honour its option, ``--nproc-per-node`` is not a number
            of ranks torchrun accepts here, or the cores cannot be bound (see
            :func:`make_plan`); or ``--help`` (status 0).
        ValueError: ``ACCEL_BACKEND`` names no registered backend.
        RuntimeError: No backend can be selected (see :func:`accel.get_accelerator`).
    """
    # Untyped in torch's stubs: taken as Any, called as torchrun documents.
    torchrun: Any = importlib.import_module("torch.distributed.run")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    import accel

    arguments = list(sys.argv[1:] if argv is None else argv)
    parser: argparse.ArgumentParser = torchrun.get_args_parser()
    parser.prog = "accel run"
    parser.error = _usage_error  # type: ignore[method-assign]  # one line, not the usage
    parser.description = (
        "torchrun, with every torchrun option, and accel's defaults: --nproc-per-node is "
        "the selected backend's device count unless given (or PET_NPROC_PER_NODE is set)."
    )
    group = parser.add_argument_group("accel")
    try:  # PET_<OPTION> gives the default, as for torchrun's own options
        bind_default = env_switch("PET_BIND_CORES_TO_RANK", False)
    except ValueError as error:
        print(f"accel run: error: {error}", file=sys.stderr)
        return 2
    group.add_argument(
        "--bind-cores-to-rank",
        action="store_true",
        default=bind_default,
        help="pin each local rank to its share of the cores (NUMA-aware); OMP_NUM_THREADS to "
        "match (default: PET_BIND_CORES_TO_RANK=1)",
    )
    group.add_argument(
        "--bind-core-list",
        metavar="LIST",
        default=None,  # PET_BIND_CORE_LIST is read after parsing, to name it in errors
        help="use only these cores, e.g. 0-51,56-107 (implies --bind-cores-to-rank; default: "
        "PET_BIND_CORE_LIST)",
    )
    try:
        extensions.add_launch_arguments(group)  # what integrations add (accel.extensions)
    except extensions.IntegrationError as error:
        print(f"accel run: error: {error}", file=sys.stderr)
        return 2
    if "PET_NPROC_PER_NODE" not in os.environ:  # torchrun's own variable keeps its meaning
        parser.set_defaults(nproc_per_node=_FROM_BACKEND)
    args = parser.parse_args(_script_after_separator(arguments, parser))
    try:
        extensions.apply_launch(args, os.environ)  # the ranks inherit what they set
    except ValueError as error:
        parser.error(str(error))
    core_list_source = "--bind-core-list"
    if args.bind_core_list is None and os.environ.get("PET_BIND_CORE_LIST"):
        args.bind_core_list = os.environ["PET_BIND_CORE_LIST"]
        core_list_source = "environment variable PET_BIND_CORE_LIST"
    try:  # ACCEL_BACKEND, LOCAL_SIZE, ACCEL_VISIBLE_NUMA_NODES: one line naming the variable
        accelerator = accel.get_accelerator()
        count = accelerator.device_count()  # read whatever the rank count: the ranks read it
        if args.nproc_per_node == _FROM_BACKEND:
            args.nproc_per_node = str(count)
    except (ValueError, RuntimeError) as error:
        print(f"accel run: error: {error}", file=sys.stderr)
        return 2
    ranks = _ranks(args.nproc_per_node, parser, torchrun)
    _check_torchrun_options(args, parser, torchrun)
    binds = args.bind_cores_to_rank or args.bind_core_list is not None
    if args.virtual_local_rank and binds:
        # Every rank is then LOCAL_RANK 0, so no rank could find its own cores.
        parser.error("--virtual-local-rank cannot be used with --bind-cores-to-rank or "
                     "--bind-core-list (every rank's LOCAL_RANK is 0)")  # fmt: skip
    try:
        plan = make_plan(
            accelerator, ranks, args.bind_cores_to_rank, args.bind_core_list, core_list_source
        )
    except ValueError as error:  # a usage error: one line and status 2, not a traceback
        parser.error(str(error))
    _check_program(args, parser)
    if not args.virtual_local_rank:  # torch gives each rank its device itself then
        os.environ[PLAN_ENV] = json.dumps(plan)
    else:  # nor may an outer launch's plan (this one started from its rank) apply
        os.environ.pop(PLAN_ENV, None)
    if binds:
        # Each rank sets its own value; this only stops torchrun announcing "1 for everyone".
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    user_program = args.training_script
    mode = ["--exec"] if args.no_python else (["--module"] if args.module else [])
    args.training_script_args = [*mode, args.training_script, *args.training_script_args]
    # The worker as a script, so the current directory is not on sys.path as it starts.
    args.training_script, args.module, args.no_python = worker.__file__, False, False
    try:
        torchrun.run(args)
    except ChildFailedError as error:
        error.name = user_program  # torchrun would name accel's worker module
        failure: Any = error  # format_msg is untyped in torch's stubs
        message: str = failure.format_msg()
        print(f"accel run: {message}", file=sys.stderr)
        return 1
    return 0
