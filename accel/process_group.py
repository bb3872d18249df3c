"""The ``"accel"`` torch.distributed backend, under the name it has always been imported by.

``import accel.process_group`` registers the backend; the code lives in
:mod:`accel.comm.process_group`.
"""

from accel.comm.process_group import (
    BACKEND_NAME,
    AccelProcessGroup,
    make_default,
    register,
    set_default_backend,
)

__all__ = [
    "BACKEND_NAME",
    "AccelProcessGroup",
    "make_default",
    "register",
    "set_default_backend",
]
