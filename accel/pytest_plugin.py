"""pytest integration (registered as the ``pytest11`` entry point ``accel``).

- ``pytest --accel=NAME`` runs the session against backend NAME (any registered backend),
  and sets ``ACCEL_BACKEND=NAME`` for the processes its tests start;
- the ``accelerator`` fixture is the session's accelerator;
- ``@requires(GraphAPI, ...)`` (``from accel.pytest_plugin import requires``) or
  ``@pytest.mark.requires("GraphAPI", ...)`` skips a test when the backend lacks a
  capability, naming the backend and the capability in the skip reason. (pytest reads
  ``@pytest.mark.requires(GraphAPI)`` with one class argument as "mark this class", so
  the class form goes through ``requires``, which uses ``with_args``.)

Kept import-light: pytest loads it in every session of an environment with accel in it.
"""

from __future__ import annotations

import os
from typing import cast

import pytest

import accel
from accel import protocols
from accel.protocols import Accelerator


def requires(*capabilities: type) -> pytest.MarkDecorator:
    """``@requires(GraphAPI)``: skip the test unless the backend provides every capability.

    Args:
        *capabilities: Capability protocols of :mod:`accel.protocols`, or their names; they
            are checked when the test is set up.

    Returns:
        The ``requires`` mark with these arguments.
    """
    return pytest.mark.requires.with_args(*capabilities)


def _capability(item: pytest.Item, value: object) -> type:
    found = getattr(protocols, value, None) if isinstance(value, str) else value
    if found in protocols.CAPABILITIES:
        return cast(type, found)
    raise pytest.UsageError(
        f"{item.nodeid}: requires takes capability protocols of accel.protocols or their "
        f'names (GraphAPI or "GraphAPI"), got {value!r}'
    )


def _capabilities(item: pytest.Item, marker: pytest.Mark) -> list[type]:
    if marker.kwargs or not marker.args:
        given = ", ".join(
            [*map(repr, marker.args), *(f"{k}={v!r}" for k, v in marker.kwargs.items())]
        )
        raise pytest.UsageError(
            f"{item.nodeid}: requires takes one or more capabilities as positional "
            f"arguments (requires(GraphAPI, StreamAPI)), got requires({given})"
        )
    return [_capability(item, value) for value in marker.args]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--accel=NAME``.

    Args:
        parser: pytest's command-line parser.
    """
    group = parser.getgroup("accel")
    group.addoption(
        "--accel",
        metavar="NAME",
        default=None,
        help="run the tests against this accel backend (names: `accel report`)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker and select the requested backend.

    Args:
        config: The session's pytest config.

    Raises:
        pytest.UsageError: ``--accel`` names no registered backend, or one that failed to
            load, is not available here or failed to start; ``ACCEL_BACKEND`` is set to
            another name (the processes the tests start would run on that one).
    """
    config.addinivalue_line(
        "markers",
        "requires(*capabilities): skip unless the accel backend provides every capability "
        "protocol given (e.g. accel.protocols.GraphAPI)",
    )
    name = config.getoption("accel")
    if name is None:
        return
    from accel._probe import raised
    from accel._registry import available
    from accel._selection import BACKEND_ENV

    source = f"--accel {name!r}"
    inherited = os.environ.get(BACKEND_ENV)
    if inherited is not None and inherited.strip() != name.strip():
        raise pytest.UsageError(
            f"{source} and {BACKEND_ENV}={inherited!r} name different backends, and the "
            f"processes the tests start would run on {BACKEND_ENV}'s: unset it or give both "
            "the same name"
        )
    try:
        backend = available(name.strip(), source)  # as ACCEL_BACKEND is read
    except (ValueError, RuntimeError) as error:
        raise pytest.UsageError(str(error)) from None
    try:
        started = backend()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a plugin's constructor: sys.exit too
        raise pytest.UsageError(
            f"{source}: backend {name.strip()!r} failed to start: {raised(error)}"
        ) from None
    accel.set_accelerator(started)
    session_env = pytest.MonkeyPatch()  # undone when the session ends
    session_env.setenv(BACKEND_ENV, name.strip())
    config.add_cleanup(session_env.undo)


@pytest.fixture(scope="session")
def accelerator() -> Accelerator:
    """The accelerator the session runs against (``--accel`` or the usual selection)."""
    return accel.get_accelerator()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests whose ``requires`` capabilities the accelerator lacks.

    Args:
        item: The test about to run.

    Raises:
        pytest.skip.Exception: The accelerator lacks a capability (``pytest.skip``).
        pytest.UsageError: A ``requires`` argument is neither a capability protocol nor a
            capability's name, or the mark has none, or keyword arguments.
        ValueError: ``ACCEL_BACKEND`` names no registered backend (see
            :func:`accel.get_accelerator`).
        RuntimeError: No backend can be selected (see :func:`accel.get_accelerator`).
    """
    for marker in item.iter_markers("requires"):
        capabilities = _capabilities(item, marker)
        current = accel.get_accelerator()
        for capability in capabilities:
            if not isinstance(current, capability):
                pytest.skip(f"{type(current).__name__} lacks {capability.__name__}")
