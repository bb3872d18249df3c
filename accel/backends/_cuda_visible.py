"""``CUDA_VISIBLE_DEVICES`` parsing and the torch index -> NVML device mapping.

torch numbers the devices that ``CUDA_VISIBLE_DEVICES`` exposes 0, 1, ...; NVML numbers
every device on the machine. DeepSpeed maps one to the other with ``int()`` and crashes
on the UUID forms. The rules here follow CUDA's (as torch's ``_parse_visible_devices``
documents them):

- unset: every device, NVML index == torch index;
- integers, e.g. ``"2, 0"``: parsed like ``strtoul``; a negative entry ends the list
  (``"-1"`` and ``""`` expose nothing), a repeated entry makes the whole list empty;
- ``GPU-<uuid>`` entries, full or any unique prefix; ``MIG-<uuid>`` entries for MIG
  instances. The first entry decides the form; an entry of another form ends the list.
"""

from __future__ import annotations

from typing import Any

ENV = "CUDA_VISIBLE_DEVICES"

Entry = int | str


def _leading_int(text: str) -> int:
    # strtoul semantics: "1gpu" is 1, "" or "x" is invalid (-1), "-1" is negative.
    digits = ""
    for position, char in enumerate(text):
        if char.isdigit() or (position == 0 and char in "+-"):
            digits += char
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return -1


def parse_visible_devices(raw: str | None) -> list[Entry] | None:
    """The visible entries in torch order, or ``None`` when the variable is unset."""
    if raw is None:
        return None
    items = [item.strip() for item in raw.split(",")]
    prefix = next((p for p in ("GPU-", "MIG-") if items[0].startswith(p)), None)
    entries: list[Entry] = []
    for item in items:
        entry: Entry
        if prefix is not None:
            if not item.startswith(prefix):
                break
            entry = item
        else:
            entry = _leading_int(item)
            if entry < 0:
                break
        if entry in entries:
            return []  # CUDA exposes nothing when an id repeats
        entries.append(entry)
    return entries


def _all_uuids(nvml: Any) -> dict[str, Any]:
    """Every GPU and MIG instance NVML knows, by UUID."""
    handles: dict[str, Any] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        gpu = nvml.nvmlDeviceGetHandleByIndex(index)
        handles[str(nvml.nvmlDeviceGetUUID(gpu))] = gpu
        try:
            mig_slots = nvml.nvmlDeviceGetMaxMigDeviceCount(gpu)
        except nvml.NVMLError:
            continue  # not MIG-capable
        for slot in range(mig_slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
            except nvml.NVMLError:
                continue  # empty slot
            handles[str(nvml.nvmlDeviceGetUUID(mig))] = mig
    return handles


def nvml_handle(torch_index: int, raw: str | None, nvml: Any) -> Any:
    """The NVML handle of torch's CUDA device ``torch_index`` under ``CUDA_VISIBLE_DEVICES=raw``.

    ``nvml`` is the ``pynvml`` module (initialised). ``ValueError`` names the variable when
    the index is not visible or a UUID prefix matches no device or several.
    """
    entries = parse_visible_devices(raw)
    if entries is None:
        return nvml.nvmlDeviceGetHandleByIndex(torch_index)
    if torch_index >= len(entries):
        raise ValueError(
            f"device_index {torch_index} is not visible: {ENV}={raw!r} exposes "
            f"{len(entries)} device(s)"
        )
    entry = entries[torch_index]
    if isinstance(entry, int):
        return nvml.nvmlDeviceGetHandleByIndex(entry)
    handles = _all_uuids(nvml)
    matches = [uuid for uuid in handles if uuid.startswith(entry)]
    if len(matches) != 1:
        found = "no device" if not matches else f"{len(matches)} devices"
        raise ValueError(f"{ENV} entry {entry!r} matches {found}; expected exactly one")
    return handles[matches[0]]
