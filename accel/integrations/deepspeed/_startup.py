"""What ``accel-deepspeed.pth`` runs at interpreter start when ``ACCEL_DEEPSPEED`` is set.

It arms the import hook and returns: no torch, no deepspeed, no work until (and unless)
the process imports deepspeed. Errors cannot be raised from a .pth file without Python
printing a traceback and carrying on, so a bad value is reported once on stderr here and
raised as an exception when the process imports deepspeed, where it matters.
"""

from __future__ import annotations

import sys

from accel.integrations.deepspeed import _install
from accel.integrations.deepspeed._support import is_installed, requested

_ran = False


def run() -> None:
    """Arm the integration for this process if ``ACCEL_DEEPSPEED=1`` asks for it.

    Once per process: site.py may process the same site-packages twice (a venv's
    ``lib64 -> lib`` link names it twice), running every .pth file twice.
    """
    global _ran
    if _ran:
        return
    _ran = True
    try:
        wanted = requested()
    except ValueError as error:
        sys.stderr.write(f"accel: {error}; importing deepspeed will fail until it is fixed\n")
        _install.arm_error(str(error))
        return
    if not wanted:
        return
    if not is_installed():
        import logging  # only on this path: start-up stays cheap otherwise

        logging.getLogger("accel.integrations.deepspeed").debug(
            "ACCEL_DEEPSPEED=1 but deepspeed is not installed; nothing to do"
        )
        return
    _install.arm()
