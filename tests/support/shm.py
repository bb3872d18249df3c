"""What lies in /dev/shm, for tests that check accel leaves nothing there."""

from __future__ import annotations

from pathlib import Path

SHM = Path("/dev/shm")

# tests/comm/test_collectives.py's test_a_crashed_jobs_segment_is_never_read plants files
# with this prefix; tests running in other workers at the same time must not count them
# as left behind by their own job.
PLANTED = "accel-stale-"


def shm_names() -> set[str]:
    """The names in /dev/shm, less those the tests plant on purpose."""
    names = {path.name for path in SHM.iterdir()} if SHM.is_dir() else set()
    return {name for name in names if not name.startswith(PLANTED)}
