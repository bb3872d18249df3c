"""accel's shared-memory all-reduce. Use it through accel.comm.all_reduce_."""

DTYPES: dict[str, int]
"""Element-type codes by torch dtype name (csrc/common/dtypes.h)."""

OTHER_DTYPES: dict[str, int]
"""Codes of dtypes the segment cannot sum but ranks can compare (float64, int64, ...)."""

UNKNOWN_DTYPE: int
"""The code for any dtype in neither table."""

MAX_SEGMENT_BYTES: int
"""The largest segment a group may map (half of x86-64's user address space)."""

MAX_WORLD: int
"""The most ranks one segment serves."""

def isa() -> str:
    """The instruction-set level the kernels use: x86-64-v4, x86-64-v3 or baseline."""

def cpu_isa() -> str:
    """The best instruction-set level this CPU runs."""

class PoolBlock:
    """Bytes of a rank's pool in the segment, exposed through the buffer protocol (for
    ``torch.frombuffer``); back to the pool when garbage."""

    @property
    def nbytes(self) -> int:
        """The block's size in bytes."""

    @property
    def offset(self) -> int:
        """Where the block starts in its pool."""

class Communicator:
    """One node-local group's shared segment (see csrc/shm_comm/shm_comm.cpp)."""

    def __init__(
        self,
        path: str,
        create: bool,
        rank: int,
        world: int,
        slot_bytes: int,
        session: int,
        pids: list[int],
        pool_bytes: int = 0,
    ) -> None: ...
    @staticmethod
    def segment_bytes(world: int, slot_bytes: int, pool_bytes: int) -> int:
        """The segment's size for ``world`` ranks; ValueError when it would pass
        ``MAX_SEGMENT_BYTES``."""

    def allocate(self, nbytes: int) -> PoolBlock | None:
        """nbytes (> 0) of this rank's pool, or None when no free range is large enough."""

    @property
    def pool_bytes(self) -> int:
        """Each rank's pool size in bytes."""

    @property
    def pool_free_bytes(self) -> int:
        """This rank's free pool bytes."""

    @property
    def pooled_calls(self) -> dict[str, int]:
        """How many calls of each collective went straight between pooled tensors."""

    def path(self) -> str:
        """Where peers open the segment (/proc/<pid>/fd/<fd>; rank 0 only)."""

    def release(self) -> None:
        """Close the creating rank's descriptor (the mappings stay)."""

    def stop(self, reason: str) -> None:
        """Leave after an error outside the segment (the other level of a collective over
        several nodes): later calls raise naming ``reason`` (the first one given), and
        peers waiting for this rank at a step are told at once."""

    def all_reduce(self, data: int, numel: int, dtype: int, eligible: bool, timeout: float) -> bool:
        """Sum a buffer across the ranks in place; False (nothing done) if any rank is not
        eligible. A size or dtype mismatch between ranks raises on every rank. When every
        rank's buffer is in its pool, the sums go straight between the buffers."""

    def all_gather(
        self, data: int, out: int, nbytes: int, dtype: int, eligible: bool, timeout: float
    ) -> bool:
        """Gather nbytes from every rank into out, in rank order; False (nothing done) if any
        rank is not eligible. Mismatched sizes or dtypes raise on every rank. When every
        rank's data is in its pool (out apart from it, or holding it as this rank's block),
        each rank copies straight from the others' pools."""

    def broadcast(
        self, data: int, nbytes: int, dtype: int, root: int, eligible: bool, timeout: float
    ) -> bool:
        """Copy nbytes from rank root to every rank; False if any rank is not eligible. When
        the root's data is in its pool, the others copy straight from it."""

    def reduce_scatter(
        self, data: int, out: int, numel: int, dtype: int, eligible: bool, timeout: float
    ) -> bool:
        """Sum block r (numel elements) of every rank's data into rank r's out, in rank
        order; False (nothing done) if any rank is not eligible. Mismatched sizes or dtypes
        raise on every rank. When every rank's data is in its pool, each rank sums its block
        straight from the others' pools."""

    def barrier(self, timeout: float) -> None:
        """Return once every rank has entered."""
