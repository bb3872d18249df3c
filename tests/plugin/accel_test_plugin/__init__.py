"""A complete third-party backend in a dozen lines: the host CPU under another name.

Its probe reports it available only when ``ACCEL_TEST_PLUGIN_AVAILABLE=1``, so installing
this package changes nothing until a test asks for it.
"""

from __future__ import annotations

import os
from typing import ClassVar

from accel.backends.base import Availability
from accel.backends.cpu import CPUAccelerator


class ToyAccelerator(CPUAccelerator):
    """The CPU, registered by a separate distribution with a higher priority."""

    name: ClassVar[str] = "toy"
    priority: ClassVar[int] = 10

    @classmethod
    def probe(cls) -> Availability:
        if os.environ.get("ACCEL_TEST_PLUGIN_AVAILABLE") == "1":
            return Availability(True, "ACCEL_TEST_PLUGIN_AVAILABLE=1")
        return Availability(False, "set ACCEL_TEST_PLUGIN_AVAILABLE=1 to enable")
