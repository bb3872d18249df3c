"""pytest integration (registered as the ``pytest11`` entry point ``accel``).

- ``pytest --accel=NAME`` runs the session against backend NAME (any registered backend),
  and sets ``ACCEL_BACKEND=NAME`` for the processes its tests start;
- the ``accelerator`` fixture is the session's accelerator;
- ``@requires(GraphAPI, ...)`` (``from accel.pytest_plugin import requires``) or
  ``@pytest.mark.requires("GraphAPI", ...)`` skips a test when the accelerator it gets
  (its ``accelerator`` fixture, which a conftest may override, else the session's) lacks a
  capability, naming the backend and the capability in the skip reason; a mark with other
  arguments fails the test, saying so. (pytest reads ``@pytest.mark.requires(GraphAPI)``
  with one class argument as "mark this class", so the class form goes through
  ``requires``, which uses ``with_args``.)
- an in-process session (``pytest.main``, ``pytester``) leaves the process's selection as
  it found it.

Kept import-light: pytest loads it in every session of an environment with accel in it.
"""

from __future__ import annotations

import os
from typing import NoReturn, cast

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


# The marker is accel's (its pytest plugin, loaded in every session of an environment with
# accel): a project with a `requires` marker of its own is told how to turn accel's off.
_WHOSE = "(the requires marker of accel's pytest plugin; -p no:accel turns the plugin off)"


def _misused(item: pytest.Item, message: str) -> NoReturn:
    """Fail the test with ``message`` alone (no traceback through the plugin)."""
    pytest.fail(f"{item.nodeid}: {message} {_WHOSE}", pytrace=False)


def _capability(item: pytest.Item, value: object) -> type:
    found = getattr(protocols, value, None) if isinstance(value, str) else value
    if found in protocols.CAPABILITIES:
        return cast(type, found)
    _misused(
        item,
        "requires takes capability protocols of accel.protocols or their names "
        f'(GraphAPI or "GraphAPI"), got {value!r}',
    )


def _capabilities(item: pytest.Item, marker: pytest.Mark) -> list[type]:
    if marker.kwargs or not marker.args:
        given = ", ".join(
            [*map(repr, marker.args), *(f"{k}={v!r}" for k, v in marker.kwargs.items())]
        )
        _misused(
            item,
            "requires takes one or more capabilities as positional arguments "
            f"(requires(GraphAPI, StreamAPI)), got requires({given})",
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


_SELECTED = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Select ``--accel``'s backend before the first conftest files are imported (one that
    asks for the accelerator at import, or imports a module that does, such as a
    transformers device spec, gets it).

    Args:
        early_config: The session's pytest config, its command line parsed for the options
            known so far.

    Raises:
        pytest.UsageError: As :func:`pytest_configure`.
    """
    name = getattr(early_config.known_args_namespace, "accel", None)
    if name is not None:
        _select(early_config, name)


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; select the requested backend if that was not done before the
    conftest files were imported.

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
    if name is not None and not config.stash.get(_SELECTED, False):
        _select(config, name)


def _select(config: pytest.Config, name: str) -> None:
    """Start backend ``name`` and make it the process's, for the session."""
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
    from accel import _selection

    previous = _selection.chosen()
    accel.set_accelerator(started)
    config.stash[_SELECTED] = True
    config.add_cleanup(lambda: _selection.restore(previous))  # an in-process session's end
    session_env = pytest.MonkeyPatch()  # undone when the session ends
    session_env.setenv(BACKEND_ENV, name.strip())
    config.add_cleanup(session_env.undo)


@pytest.fixture(scope="session")
def accelerator() -> Accelerator:
    """The accelerator the session runs against (``--accel`` or the usual selection)."""
    return accel.get_accelerator()


@pytest.fixture(autouse=True)
def _accel_requires(request: pytest.FixtureRequest) -> None:
    """Skip the test when the accelerator it gets lacks a ``requires`` capability: its
    ``accelerator`` fixture where it takes one (a conftest may override or parametrize
    it), else the session's."""
    item = request.node
    markers = list(item.iter_markers("requires"))
    if not markers:
        return
    wanted = [capability for marker in markers for capability in _capabilities(item, marker)]
    uses_fixture = "accelerator" in request.fixturenames
    current = request.getfixturevalue("accelerator") if uses_fixture else accel.get_accelerator()
    for capability in wanted:
        if not isinstance(current, capability):
            # Where the test is, not this line: pytest's own skipif reports it so.
            raise pytest.skip.Exception(
                f"{type(current).__name__} lacks {capability.__name__}", _use_item_location=True
            )
