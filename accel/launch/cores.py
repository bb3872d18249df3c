"""Which cores each local rank gets: parse core lists and split them NUMA-aware."""

from __future__ import annotations

from collections.abc import Mapping

from accel import _host
from accel._validate import format_id_list, parse_id_list


def parse_core_list(text: str, allowed: set[int], source: str = "--bind-core-list") -> list[int]:
    """Parse ``"0-51,56-107"`` into sorted core ids, each of which must be in ``allowed``.

    Linear in the number of cores, and a range past the highest allowed core fails before
    it is expanded.

    Args:
        text: Comma-separated core ids and inclusive ranges, as ``--bind-core-list`` takes.
        allowed: The cores this process may run on.
        source: Where ``text`` came from, for the messages.

    Returns:
        The core ids, sorted.

    Raises:
        ValueError: ``text`` is not ids and ranges, repeats a core, names no core, or names
            a core not in ``allowed``; the message names ``source``.
    """
    option = source
    cores = parse_id_list(text, option, below=max(allowed, default=-1) + 1)
    if not cores:
        raise ValueError(f"{option} must name at least one core, got {text!r}")
    outside = [core for core in cores if core not in allowed]
    if outside:
        raise ValueError(
            f"{option}: cores {format_id_list(outside)} are not available to this process "
            f"(allowed: {format_id_list(allowed)})"
        )
    return sorted(cores)


def node_of_cores(cores: list[int], topology: Mapping[int, frozenset[int]]) -> dict[int, list[int]]:
    """``cores`` grouped by NUMA node (one node 0 when the topology is unknown).

    Args:
        cores: Core ids.
        topology: The cores of each NUMA node, by node; a core in none counts as node 0's.

    Returns:
        Each node's cores in the order of ``cores``, keyed by node in ascending order.
    """
    groups: dict[int, list[int]] = {}
    for core in cores:
        node = next((n for n, members in topology.items() if core in members), 0)
        groups.setdefault(node, []).append(core)
    return dict(sorted(groups.items()))


def split_cores(
    cores: list[int], ranks: int, topology: Mapping[int, frozenset[int]] | None = None
) -> list[list[int]]:
    """Split ``cores`` among ``ranks``, each rank a disjoint, non-empty set, no rank
    straddling NUMA nodes when there are at least as many ranks as nodes.

    Ranks are given to nodes in proportion to the node's cores (the largest remainders
    taking the ranks left over), so ranks get about the same number of cores however the
    nodes differ in size; a small node may be left without a rank (6 and 2 cores, 2 ranks:
    3 cores each on the first), as ranks that step together wait for the one with the
    fewest cores. Within a node, cores are dealt out in contiguous blocks (neighbouring
    cores share caches). Fewer ranks than nodes share all the cores in contiguous blocks.

    Args:
        cores: The cores to share out, in order.
        ranks: The number of local ranks.
        topology: The cores of each NUMA node; ``None`` for this machine's.

    Returns:
        One list of cores per rank, by rank.

    Raises:
        ValueError: ``ranks`` is below 1, or there are fewer ``cores`` than ``ranks``.
    """
    if ranks < 1:
        raise ValueError(f"--nproc-per-node must be >= 1, got {ranks}")
    if len(cores) < ranks:
        raise ValueError(
            f"cannot bind {ranks} ranks to {len(cores)} cores ({format_id_list(cores)}): "
            "every rank needs at least one core"
        )
    groups = list(
        node_of_cores(cores, _host.numa_topology() if topology is None else topology).values()
    )
    if len(groups) < 2 or ranks < len(groups):
        return _blocks(cores, ranks)
    # ranks * len(group) / len(cores) <= len(group): no node gets more ranks than cores.
    shares = [divmod(ranks * len(group), len(cores)) for group in groups]
    counts = [whole for whole, _ in shares]
    by_remainder = sorted(range(len(groups)), key=lambda i: -shares[i][1])
    for node in by_remainder[: ranks - sum(counts)]:
        counts[node] += 1
    return [
        block
        for group, count in zip(groups, counts, strict=True)
        if count
        for block in _blocks(group, count)
    ]


def _blocks(cores: list[int], count: int) -> list[list[int]]:
    size, extra = divmod(len(cores), count)
    blocks: list[list[int]] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        blocks.append(cores[start:end])
        start = end
    return blocks
