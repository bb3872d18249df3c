"""accel: one typed interface to every PyTorch accelerator.

    from accel import get_accelerator
    acc = get_accelerator()
    x = torch.ones(4, device=acc.current_device_name())

Capabilities are small protocols in :mod:`accel.protocols`; test for optional ones with
``isinstance(acc, GraphAPI)``, which narrows the static type.
"""

from accel._selection import (
    current_selection,
    get_accelerator,
    reset_accelerator,
    set_accelerator,
)
from accel._version import __version__
from accel.protocols import Accelerator

__all__ = [
    "Accelerator",
    "__version__",
    "current_selection",
    "get_accelerator",
    "reset_accelerator",
    "set_accelerator",
]
