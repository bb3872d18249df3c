"""The DeepSpeed lines of ``accel report``."""

from __future__ import annotations

import pytest

from accel.integrations.deepspeed.status import DeepSpeedStatus, describe


def _status(env: str | None, active: bool = False) -> DeepSpeedStatus:
    return DeepSpeedStatus(
        version="0.19.8", supported=True, reason="supported", env=env, active=active,
        accel_builders=["CPUAdamBuilder"],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "said"),
    [(None, "ACCEL_DEEPSPEED unset"), ("1", "ACCEL_DEEPSPEED '1'"), (" 0 ", "ACCEL_DEEPSPEED ' 0 '")],
)  # fmt: skip
def test_the_switch_is_shown_as_set(env: str | None, said: str) -> None:
    line = describe(_status(env))[1]
    assert line == f"accel integration: not active in this process; {said}"


@pytest.mark.parametrize("env", ["2", "yes", ""])
def test_a_switch_deepspeed_will_refuse_is_called_invalid(env: str) -> None:
    # It was shown as any other value, while importing deepspeed fails on it.
    line = describe(_status(env))[1]
    assert line.endswith(
        f"ACCEL_DEEPSPEED {env!r} (expected 0 or 1: importing deepspeed fails until it is fixed)"
    )


def test_an_unsupported_version_says_only_why() -> None:
    status = DeepSpeedStatus(
        version="0.14.0", supported=False, reason="needs deepspeed>=0.19.0", env="1", active=False
    )
    assert describe(status) == ("deepspeed: 0.14.0 (needs deepspeed>=0.19.0)",)
