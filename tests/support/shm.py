"""What lies in /dev/shm, for tests that check accel leaves nothing there."""

from __future__ import annotations

import time
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


def left_behind(before: set[str], *, settle_s: float = 2.0) -> set[str]:
    """The names :func:`shm_names` gives now and in every look for up to ``settle_s``
    seconds that were not in ``before``: what a job left in /dev/shm.

    A name another worker makes and removes meanwhile (torch's ``share_memory_()`` files
    live for microseconds) is not in every look; a leaked one is. Returns at once when
    nothing new is there.
    """
    staying = shm_names() - before
    deadline = time.monotonic() + settle_s
    while staying and time.monotonic() < deadline:
        time.sleep(0.05)
        staying &= shm_names()
    return staying
