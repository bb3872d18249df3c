"""A device's tensor that reaches an "accel" process group (a CPU group) is said."""

from __future__ import annotations

import warnings
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from accel.process_group import AccelProcessGroup


def test_a_device_tensor_in_an_accel_group_is_warned_about_once() -> None:
    # init_process_group("cpu:accel,cuda:nccl") makes the accel group the whole group (torch
    # returns a Python process group as soon as it is made): CUDA tensors went to gloo
    # without a word. A meta tensor stands in for a device's (gloo refuses it after).
    group = AccelProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=10))
    try:
        with (
            pytest.warns(RuntimeWarning, match=r"a meta tensor reached the 'accel' process"),
            pytest.raises(RuntimeError, match="unsupported device type meta"),
        ):
            group.allreduce([torch.ones(2, device="meta")])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per group
            with pytest.raises(RuntimeError, match="unsupported device type meta"):
                group.broadcast([torch.ones(2, device="meta")])
    finally:
        group.shutdown()
