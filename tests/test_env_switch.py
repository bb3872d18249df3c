"""accel._validate.env_switch: the on/off variables (ACCEL_DDP_POOL, ACCEL_ZERO_POOL,
ACCEL_DEEPSPEED, ACCEL_ALLOW_DEPRECATED_FP16) are all read through it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import _accel_startup
from accel._validate import env_switch
from accel.backends import cuda
from accel.comm import _promote
from accel.integrations.deepspeed import _support

NAME = "ACCEL_TEST_SWITCH"


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("1", True), (" 1 ", True)])
def test_0_and_1_around_spaces(value: str, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, value)
    assert env_switch(NAME, default=not expected) is expected


@pytest.mark.parametrize("default", [True, False])
def test_unset_is_the_default(default: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    assert env_switch(NAME, default=default) is default


@pytest.mark.parametrize("value", ["", "2", "yes", " 1x", "true"])
def test_anything_else_names_the_variable_and_the_value(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NAME, value)
    expected = f"environment variable {NAME} must be 0 or 1, got {value!r}"
    with pytest.raises(ValueError, match=expected):
        env_switch(NAME, default=True)


@pytest.mark.parametrize(
    ("name", "read", "default"),
    [
        (_promote.ENV, _promote.enabled, True),
        (_support.ZERO_POOL_ENV, _support.zero_pool_enabled, True),
        (_support.ENV, _support.requested, False),
        (cuda.ALLOW_DEPRECATED_FP16_ENV, cuda.allow_deprecated_fp16, False),
    ],
)
def test_each_switch_reads_its_variable_with_its_default(
    name: str, read: Callable[[], bool], default: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(name, raising=False)
    assert read() is default
    monkeypatch.setenv(name, "0" if default else "1")
    assert read() is not default
    monkeypatch.setenv(name, "yes")
    with pytest.raises(ValueError, match=f"{name} must be 0 or 1, got 'yes'"):
        read()


@pytest.mark.parametrize("value", [None, "0", "1", " 1 ", "0\n", "", "2", "yes", " 1x"])
def test_start_up_reads_accel_deepspeed_as_accel_does(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # _accel_startup cannot import accel: its reading must still agree, or a value accel
    # accepts would be warned about at start-up (or one it refuses left unwatched).
    if value is None:
        monkeypatch.delenv(_support.ENV, raising=False)
    else:
        monkeypatch.setenv(_support.ENV, value)
    try:
        expected: bool | None = _support.requested()
    except ValueError:
        expected = None
    assert _accel_startup.deepspeed_asked(value) is expected
