"""Facts about the host read from the kernel: NUMA nodes, cgroup memory limits, process RSS.

Every reader takes its file-system root as an argument so tests can point it at a fake
tree; on systems without these files (macOS, Windows) they return ``None`` or a neutral
answer instead of guessing.
"""

from __future__ import annotations

import functools
import os
import platform
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from accel._validate import parse_id_list

if TYPE_CHECKING:
    import psutil

# psutil is imported where it is used: it costs ~10 ms to import, and selecting a backend
# reads no memory figure.

NODE_ROOT = Path("/sys/devices/system/node")
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF = Path("/proc/self")


@functools.cache
def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model name (Linux ``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def allowed_cpus() -> set[int]:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


@functools.cache
def numa_topology(root: Path = NODE_ROOT) -> dict[int, frozenset[int]]:
    """CPU ids of each NUMA node (read once per root: topology is fixed while we run)."""
    nodes: dict[int, frozenset[int]] = {}
    if not root.is_dir():
        return nodes
    for entry in root.iterdir():
        name = entry.name
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        cpulist = entry / "cpulist"
        try:
            nodes[int(name[4:])] = frozenset(parse_id_list(cpulist.read_text(), str(cpulist)))
        except OSError:
            continue
    return nodes


def numa_nodes_with_cpus(root: Path = NODE_ROOT, allowed: set[int] | None = None) -> list[int]:
    """Ids of the NUMA nodes that have at least one CPU this process may use.

    Memory-only nodes (HBM or CXL in flat mode) and nodes outside the affinity mask (read
    on every call: it can change) are left out. Without NUMA information (no sysfs) the
    host counts as one node, ``[0]``.
    """
    topology = numa_topology(root)
    if not topology:
        return [0]
    usable = allowed_cpus() if allowed is None else allowed
    return sorted(node for node, cpus in topology.items() if cpus & usable) or [0]


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def cgroup_memory(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF / "cgroup"
) -> tuple[int, int] | None:
    """``(limit, usage)`` in bytes of this process's memory cgroup, or ``None`` when unlimited.

    Understands cgroup v2 (``memory.max``) and v1 (``memory.limit_in_bytes``). Inside a
    container the process's cgroup path is often not mounted; the mount's root files
    then describe the container's own cgroup.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            candidates = [
                (root / relative, "memory.max", "memory.current"),
                (root, "memory.max", "memory.current"),
            ]
        elif "memory" in controllers.split(","):
            v1 = root / "memory"
            candidates = [
                (v1 / relative, "memory.limit_in_bytes", "memory.usage_in_bytes"),
                (v1, "memory.limit_in_bytes", "memory.usage_in_bytes"),
            ]
        else:
            continue
        for directory, limit_file, usage_file in candidates:
            if (directory / limit_file).exists():
                limit = _read_int(directory / limit_file)
                usage = _read_int(directory / usage_file)
                if limit is None or usage is None:
                    break
                return limit, usage
    return None


def total_memory() -> int:
    """Physical memory this process can use: the host's, capped by its cgroup limit."""
    import psutil

    total = int(psutil.virtual_memory().total)
    limits = cgroup_memory()
    return min(total, limits[0]) if limits else total


def available_memory() -> int:
    """Memory a new allocation can still obtain, capped by the cgroup's headroom."""
    import psutil

    available = int(psutil.virtual_memory().available)
    limits = cgroup_memory()
    return min(available, max(0, limits[0] - limits[1])) if limits else available


def _kernel_peak_rss(status: Path = PROC_SELF / "status") -> int | None:
    """The kernel's high-water mark of this process's RSS (``VmHWM``), in bytes."""
    try:
        with status.open() as lines:
            for line in lines:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_kernel_peak_rss(clear_refs: Path = PROC_SELF / "clear_refs") -> bool:
    """Restart ``VmHWM`` from the current RSS (Linux >= 4.0); False where not permitted."""
    try:
        clear_refs.write_text("5")
    except OSError:
        return False
    return True


class ProcessMemory:
    """RSS of this process with a peak that is real, not sampled, where the kernel keeps one.

    On Linux the peak is the kernel's ``VmHWM``, which sees every page ever resident, and a
    reset restarts it through ``/proc/self/clear_refs``. Elsewhere (or if that reset is not
    permitted) the peak is the largest RSS that accel itself has observed since the reset.
    Safe across ``fork()``: the child starts its own accounting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._process: psutil.Process | None = None
        self._observed_peak = 0
        self._kernel_peak_valid = True

    def rss(self) -> int:
        """Current resident set size in bytes."""
        with self._lock:
            pid = os.getpid()
            if self._process is None or pid != self._pid:
                import psutil

                self._process, self._pid, self._observed_peak = psutil.Process(pid), pid, 0
            current = int(self._process.memory_info().rss)
            self._observed_peak = max(self._observed_peak, current)
            return current

    def peak(self) -> int:
        """Peak resident set size in bytes since the process started or the last reset."""
        current = self.rss()
        kernel = _kernel_peak_rss() if self._kernel_peak_valid else None
        return max(current, self._observed_peak, kernel or 0)

    def reset_peak(self) -> None:
        """Start the peak again from the current RSS."""
        self._kernel_peak_valid = _reset_kernel_peak_rss()
        with self._lock:
            self._observed_peak = 0
        self.rss()


process_memory = ProcessMemory()
