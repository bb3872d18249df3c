"""The CPU as an accelerator: one logical device per NUMA node, host memory, gloo or oneCCL."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import ClassVar

import torch
from typing_extensions import override

from accel import _host
from accel._validate import (
    check_device,
    check_index,
    check_optional_index,
    env_index,
    parse_env_index,
    parse_id_list,
)
from accel.backends.base import Availability
from accel.mixins import (
    CompileBackendMixin,
    DeviceCapabilityMixin,
    DeviceNamingMixin,
    DTypeListMixin,
    HostMemoryMixin,
    HostRNGMixin,
    HostStagingMixin,
    NoGraphMixin,
    NoStreamMixin,
    OpBuilderTableMixin,
    RecordFunctionProfilerMixin,
    RuntimeEnvMixin,
    TensorPlacementMixin,
)
from accel.mixins.dtype import matmul_runs
from accel.ops.isa import load_native
from accel.ops.table import PrebuiltOpBuilders
from accel.protocols._contract import implements
from accel.protocols.device import DeviceAPI, DeviceLike, DeviceProperties, DevicePropertiesAPI
from accel.protocols.dtype import DTypeAPI
from accel.protocols.op_builder import OpBuilder
from accel.protocols.runtime import RuntimeAPI

logger = logging.getLogger(__name__)

VISIBLE_NODES_ENV = "ACCEL_VISIBLE_NUMA_NODES"


@functools.cache
def _communication_backend() -> str:
    # Importing the bindings is what registers "ccl" with torch.distributed, so the name is
    # only reported once that import has worked.
    try:
        import oneccl_bindings_for_pytorch  # type: ignore[import-not-found]  # noqa: F401  # pyright: ignore[reportMissingImports, reportUnusedImport]
    except ImportError:
        return _without_oneccl()
    except Exception:
        logger.warning("oneccl_bindings_for_pytorch failed to import", exc_info=True)
        return _without_oneccl()
    return "ccl"


def _without_oneccl() -> str:
    # "accel" is gloo plus shared-memory sums for the ranks of one node: correct wherever
    # gloo is, and faster when ranks share a node. It needs the native segment code.
    try:
        load_native("accel.ops._shm_comm")
        import accel.comm.process_group  # registers "accel" with torch.distributed
    except ImportError:
        logger.info("accel's shared-memory extension is missing; the CPU uses gloo")
        return "gloo"
    return accel.comm.process_group.BACKEND_NAME


@functools.cache
def _onednn_has_native_fp16() -> bool:
    # CPU float16 always *runs* in torch, but is emulated at a fraction of fp32 speed unless
    # oneDNN has native kernels (AVX512-FP16 / AMX-FP16); only those count as support.
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


@implements(DeviceAPI, DevicePropertiesAPI, RuntimeAPI, DTypeAPI)
class CPUAccelerator(
    NoStreamMixin,
    NoGraphMixin,
    DeviceNamingMixin,
    HostRNGMixin,
    HostMemoryMixin,
    DTypeListMixin,
    DeviceCapabilityMixin,
    TensorPlacementMixin,
    HostStagingMixin,
    RuntimeEnvMixin,
    CompileBackendMixin,
    RecordFunctionProfilerMixin,
    OpBuilderTableMixin,
):
    """The host CPU. Devices are the NUMA nodes that have usable CPUs.

    Device indices are logical rank slots: ``device_name(i)`` is ``"cpu"`` for every ``i``,
    ``current_device()`` is ``LOCAL_RANK`` (or the index given to :meth:`set_device`), and
    ``device_count()`` is ``LOCAL_SIZE`` when a launcher sets it, otherwise the number of
    NUMA nodes (restricted by ``ACCEL_VISIBLE_NUMA_NODES`` when set).
    """

    name: ClassVar[str] = "cpu"
    priority: ClassVar[int] = 0
    device_type: ClassVar[str] = "cpu"
    indexed_device_names: ClassVar[bool] = False
    visible_devices_env_names: ClassVar[tuple[str, ...]] = (VISIBLE_NODES_ENV,)
    op_builders: ClassVar[Mapping[str, type[OpBuilder]]] = PrebuiltOpBuilders("cpu")
    exported_env_prefixes: ClassVar[tuple[str, ...]] = (
        "MASTER",
        "OMP",
        "KMP",
        "CCL",
        "I_MPI",
    )

    def __init__(self) -> None:
        self._selected_device: int | None = None

    @classmethod
    def probe(cls) -> Availability:
        """Always available; chosen automatically only when no accelerator is."""
        return Availability(True, "the host CPU is always present")

    def is_available(self) -> bool:
        """Always True: the host is always there."""
        return True

    def numa_nodes(self) -> list[int]:
        """The NUMA node ids backing the devices, in device-index order.

        Returns:
            The nodes with usable CPUs, or those ``ACCEL_VISIBLE_NUMA_NODES`` lists.

        Raises:
            ValueError: ``ACCEL_VISIBLE_NUMA_NODES`` is malformed, empty, or lists a node
                without usable CPUs.
        """
        nodes = _host.numa_nodes_with_cpus()
        raw = os.environ.get(VISIBLE_NODES_ENV)
        if raw is None:
            return nodes
        visible = parse_id_list(
            raw, f"environment variable {VISIBLE_NODES_ENV}", below=max(nodes) + 1
        )
        unknown = [node for node in visible if node not in nodes]
        if not visible or unknown:
            raise ValueError(
                f"environment variable {VISIBLE_NODES_ENV} must list NUMA nodes with usable "
                f"CPUs from {nodes}, got {raw!r}"
            )
        return visible

    def device_count(self) -> int:
        """``LOCAL_SIZE`` if set, else the number of (visible) NUMA nodes with CPUs; ``ValueError``
        where ``LOCAL_SIZE`` is not a positive decimal integer or ``ACCEL_VISIBLE_NUMA_NODES`` is
        invalid (see :meth:`numa_nodes`)."""
        local_size = env_index("LOCAL_SIZE")
        if local_size == 0:
            raise ValueError("environment variable LOCAL_SIZE must be a positive integer, got '0'")
        return local_size if local_size is not None else len(self.numa_nodes())

    @override
    def device_name(self, device_index: int | None = None) -> str:
        """``"cpu"`` for every slot: indices are checked, then ignored (host device names
        carry none). Asked once per tensor made, so a valid index costs two comparisons."""
        if device_index is not None and (type(device_index) is not int or device_index < 0):
            check_index(device_index)  # raises, naming the bad value
        return "cpu"

    @override
    def current_device_name(self) -> str:
        """``"cpu"``: the host's device names carry no index (asked once per tensor made)."""
        return "cpu"

    def current_device(self) -> int:
        """The index given to :meth:`set_device`, else ``LOCAL_RANK``, else 0."""
        if self._selected_device is not None:
            return self._selected_device
        raw = os.environ.get("LOCAL_RANK")  # per step: one lookup, parsed once per value
        return 0 if raw is None else parse_env_index("LOCAL_RANK", raw)

    def set_device(self, device_index: DeviceLike) -> None:
        """Records the slot as current, any non-negative index (slots are ranks, not devices
        to count: a job may run more ranks than the host has NUMA nodes). ``"cpu"`` without
        an index names every slot (it is what ``device_name(i)`` returns for any ``i``), so
        it leaves the current slot as it is."""
        index = check_device(device_index, "cpu")
        if index is not None:
            self._selected_device = index

    def get_device_properties(self, device_index: int | None = None) -> DeviceProperties:
        """The CPU model, :meth:`total_memory`'s (cgroup-capped) size, and as
        ``multi_processor_count`` the CPUs this process may use on the NUMA node behind the slot
        (slots map to nodes as ``accel run`` assigns them; the whole host's when that is 0).
        ``ValueError`` also where ``LOCAL_SIZE``, ``ACCEL_VISIBLE_NUMA_NODES`` or (for ``None``)
        ``LOCAL_RANK`` is invalid."""
        index = check_optional_index(device_index)
        slot = self.current_device() if index is None else index
        nodes, count = self.numa_nodes(), self.device_count()
        node = nodes[(slot % count) * len(nodes) // count]
        allowed = _host.allowed_cpus()
        cores = _host.numa_topology().get(node, frozenset(allowed)) & allowed
        return DeviceProperties(
            name=_host.cpu_model_name(),
            total_memory=_host.total_memory(),
            multi_processor_count=len(cores) or len(allowed),
        )

    def synchronize(self, device_index: int | None = None) -> None:
        """Returns at once: CPU ops have finished when their calls return."""
        check_optional_index(device_index)

    def lazy_call(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` now: the CPU runtime needs no lazy initialisation."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        callback()

    def communication_backend_name(self) -> str:
        """``"ccl"`` when oneCCL's torch bindings import; else ``"accel"`` (gloo with
        shared-memory sums within a node, registered by this call) when accel's native
        segment code loads; else ``"gloo"``."""
        return _communication_backend()

    def is_bf16_supported(self) -> bool:
        """Whether a bfloat16 matmul runs correctly (it does on every torch CPU build)."""
        return matmul_runs("cpu", torch.bfloat16)

    def is_fp16_supported(self) -> bool:
        """Whether oneDNN has native float16 kernels on this CPU (AVX512-FP16 / AMX-FP16)."""
        return _onednn_has_native_fp16()

    def is_triton_supported(self) -> bool:
        """False: torch's CPU code generation does not use Triton."""
        return False
