"""pytest integration (registered as the ``pytest11`` entry point ``accel``).

- ``pytest --accel=NAME`` runs the session against backend NAME (any registered backend);
- the ``accelerator`` fixture is the session's accelerator;
- ``@requires(GraphAPI, ...)`` (``from accel.pytest_plugin import requires``) or
  ``@pytest.mark.requires("GraphAPI", ...)`` skips a test when the backend lacks a
  capability, naming the backend and the capability in the skip reason. (pytest reads
  ``@pytest.mark.requires(GraphAPI)`` with one class argument as "mark this class", so
  the class form goes through ``requires``, which uses ``with_args``.)

Kept import-light: pytest loads it in every session of an environment with accel in it.
"""

from __future__ import annotations

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
    if isinstance(value, str):
        found = getattr(protocols, value, None)
        if isinstance(found, type) and value.endswith("API"):
            return found
    elif isinstance(value, type) and getattr(value, "_is_protocol", False):
        return value
    raise pytest.UsageError(
        f"{item.nodeid}: requires takes capability protocols or their names "
        f'(GraphAPI or "GraphAPI"), got {value!r}'
    )


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
            load or is not available here.
    """
    config.addinivalue_line(
        "markers",
        "requires(*capabilities): skip unless the accel backend provides every capability "
        "protocol given (e.g. accel.protocols.GraphAPI)",
    )
    name = config.getoption("accel")
    if name is None:
        return
    from accel._registry import available

    try:
        backend = available(name, f"--accel={name}")
    except (ValueError, RuntimeError) as error:
        raise pytest.UsageError(str(error)) from None
    accel.set_accelerator(backend())


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
            capability's name.
        ValueError: ``ACCEL_BACKEND`` names no registered backend (see
            :func:`accel.get_accelerator`).
        RuntimeError: No backend can be selected (see :func:`accel.get_accelerator`).
    """
    for marker in item.iter_markers("requires"):
        current = accel.get_accelerator()
        for value in marker.args:
            capability = _capability(item, value)
            if not isinstance(current, capability):
                pytest.skip(f"{type(current).__name__} lacks {capability.__name__}")
