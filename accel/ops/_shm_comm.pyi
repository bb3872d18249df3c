"""accel's shared-memory all-reduce. Use it through accel.comm.all_reduce_."""

DTYPES: dict[str, int]
"""Element-type codes by torch dtype name (csrc/common/dtypes.h)."""

class Communicator:
    """One node-local group's shared segment (see csrc/shm_comm/shm_comm.cpp)."""

    def __init__(
        self,
        name: str,
        create: bool,
        rank: int,
        world: int,
        slot_bytes: int,
        session: int,
        pids: list[int],
    ) -> None: ...
    def unlink(self) -> None:
        """Remove the segment's name (the mappings stay)."""

    def all_reduce(self, data: int, numel: int, dtype: int, timeout: float) -> None:
        """Sum a buffer across the ranks in place."""
