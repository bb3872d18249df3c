"""DeepSpeed on accel: accel's backends and prebuilt kernels under an unchanged DeepSpeed.

Three ways to turn it on, all idempotent (docs/deepspeed.md):

- ``from accel.integrations import deepspeed as accel_ds; accel_ds.install()``, before or
  after ``import deepspeed``;
- ``ACCEL_DEEPSPEED=1`` in the environment: every Python process of the job (launchers,
  torchrun, spawned workers) installs it when it imports deepspeed;
- ``accel run --deepspeed script.py``, which sets that variable for the ranks.

Then ``deepspeed.accelerator.get_accelerator()`` is an
:class:`~accel.integrations.deepspeed.adapter.AccelDeepSpeedAccelerator` over
``accel.get_accelerator()``, and DeepSpeed's CPU op builders load accel's kernels instead
of compiling. This module imports neither torch nor deepspeed.
"""

from accel.integrations.deepspeed._install import install, is_active, is_armed
from accel.integrations.deepspeed._support import ENV, SUPPORTED_RANGE

__all__ = ["ENV", "SUPPORTED_RANGE", "install", "is_active", "is_armed"]
