"""What lies in /dev/shm, for tests that check accel leaves nothing there."""

from __future__ import annotations

from pathlib import Path

SHM = Path("/dev/shm")

# tests/comm/test_collectives.py's test_a_crashed_jobs_segment_is_never_read plants files
# with this prefix.
PLANTED = "accel-stale-"

# Names that come and go while other pytest-xdist workers run, so a test must not count
# them as left behind by its own job: the planted files, and the named semaphore
# "sem.mp-<random>" that Python's multiprocessing keeps for each lock of a spawned process
# tree (DeepSpeed's ZenFlow test starts one) until the lock is freed.
OTHER_WORKERS = (PLANTED, "sem.mp-")


def shm_names() -> set[str]:
    """The names in /dev/shm, less those other test workers make and remove meanwhile.

    Compare with ``<=`` (nothing new), not ``==``: a name another worker made before
    can be gone afterwards.
    """
    names = {path.name for path in SHM.iterdir()} if SHM.is_dir() else set()
    return {name for name in names if not name.startswith(OTHER_WORKERS)}
