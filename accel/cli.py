"""The ``accel`` command line."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import sys
import warnings
from collections.abc import Generator, Sequence

from accel import extensions
from accel._output import discard_stdout, stdout_reader_gone


def _flush_stdout() -> None:
    """Write out what is buffered for descriptor 1: Python's streams (``sys.stdout`` and the
    original ``sys.__stdout__`` a plugin may have kept) and C's stdio (a driver's printf)."""
    for stream in {id(s): s for s in (sys.stdout, sys.__stdout__) if s is not None}.values():
        with contextlib.suppress(OSError, ValueError):  # closed: nothing can be written
            stream.flush()
    with contextlib.suppress(OSError, AttributeError):  # no C library to ask
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _stdout_to_stderr() -> Generator[None]:
    """What runs inside writes to stderr, through ``sys.stdout`` or file descriptor 1 (a
    plugin's import banner, a probe's print, a driver's printf): stdout keeps only what
    the command prints, which a script may parse."""
    _flush_stdout()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (closed): only sys.stdout to turn away
        saved = -1
    if saved >= 0:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _flush_stdout()  # what was written inside goes where it was written: stderr
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)


def _report(args: argparse.Namespace) -> int:
    import json
    import shutil

    from accel import report

    with _stdout_to_stderr():
        collected = report.collect()
    if args.json:
        print(json.dumps(collected.as_dict(), indent=2))
    else:
        print(report.render(collected, width=shutil.get_terminal_size((120, 24)).columns), end="")
    return 0


def _port(args: argparse.Namespace) -> int:
    from accel.port.cli import run

    if args.strict and not args.check:  # it would change nothing: say so, not ignore it
        message = "accel port: error: --strict counts findings for --check; add --check"
        print(message, file=sys.stderr)
        return 2
    return run(
        args.paths, diff=args.diff, check=args.check, strict=args.strict, explain=args.explain
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="accel", description="One interface to every PyTorch accelerator."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report", help="show versions, backends, capabilities and op builders"
    )
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.set_defaults(handler=_report)
    port = commands.add_parser(
        "port", help="rewrite torch.cuda-specific code to accelerator-agnostic code"
    )
    port.add_argument("paths", nargs="+", metavar="PATH", help="Python files or directories")
    mode = port.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff; change nothing")
    mode.add_argument(
        "--check",
        action="store_true",
        help="print path:line:col findings; exit 1 if anything would be rewritten (for CI)",
    )
    port.add_argument(
        "--strict",
        action="store_true",
        help="with --check, also exit 1 for findings that need a person ('manual:')",
    )
    port.add_argument(
        "--explain",
        action="store_true",
        help="print each finding with its rule and why it is safe (with --check or --diff, "
        "change nothing)",
    )
    port.set_defaults(handler=_port)
    run = commands.add_parser(
        "run",
        help="torchrun with NUMA-aware core binding (accel run --help for every option)",
        add_help=False,
    )
    run.add_argument("torchrun_args", nargs=argparse.REMAINDER)  # parsed by accel.launch
    # Last, so that a name an integration takes from accel is an error naming it.
    extensions.add_subcommands(commands)  # what integrations add (accel.extensions)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``accel`` command line; returns the exit status.

    Args:
        argv: The arguments after the program name; ``None`` for ``sys.argv[1:]``.

    Returns:
        The subcommand's exit status (``accel run``'s is :func:`accel.launch.cli.main`'s);
        2 when the subcommand, or loading an integration, raised ``ValueError``,
        ``TypeError``, ``RuntimeError`` or ``OSError``, printed as ``accel: error: ...``.

    Raises:
        SystemExit: The arguments do not parse (status 2) or ask for ``--help`` (status 0),
            as argparse exits.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["run"]:
        # Everything after `run` belongs to torchrun's parser (argparse cannot hand a
        # subcommand its raw options), so the launcher parses it itself.
        from accel.launch.cli import main as run_main

        return run_main(arguments[1:])
    # torch warns on import when numpy is absent; accel never needs numpy, and the warning
    # would be the first thing a user reads in the report.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        with _stdout_to_stderr():  # an integration's import banner must not reach stdout
            parser = build_parser()  # a broken integration raises here
        args = parser.parse_args(arguments)
        status = int(args.handler(args))
        if sys.stdout is not None:  # None where the descriptor was closed (`>&-`)
            sys.stdout.flush()  # here, where a reader gone away is caught, not at exit
        return status
    except BrokenPipeError as error:
        if not stdout_reader_gone():  # another pipe of the command's: an error to say
            print(f"accel: error: {error}", file=sys.stderr)
            return 2
        # The reader went away (`| head`): nothing more can be said; exit quietly, as a
        # process killed by SIGPIPE would (128 + 13).
        discard_stdout()
        return 141
    except (ValueError, TypeError, RuntimeError, OSError) as error:
        # Configuration mistakes (a bad ACCEL_BACKEND, an integration that fails to import)
        # deserve one line, not a traceback.
        print(f"accel: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
