"""The kit's checks, one module per capability (``protocols/X.py`` + ``mixins/X.py`` +
``testing/checks/X.py``). Importing this package registers every check in
:data:`accel.testing.CHECKS` (the kit runs them in protocol order, core first).

Each check takes the backend instance to check as ``acc`` and returns when the behaviour
its summary states holds; otherwise it raises ``AssertionError`` saying what differs.
"""

from accel.testing.checks import (
    device,
    dtype,
    generic,
    graph,
    memory,
    op_builder,
    profiler,
    rng,
    runtime,
    stream,
    tensor,
)

__all__ = [
    "device",
    "dtype",
    "generic",
    "graph",
    "memory",
    "op_builder",
    "profiler",
    "rng",
    "runtime",
    "stream",
    "tensor",
]
