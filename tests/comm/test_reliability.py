"""Patterns that once hung a job, poisoned a group or wrote where they must not, in one
2-rank job (tests/comm/scripts/reliability_check.py runs each case on groups of its own).

Each assertion below failed before the fix it guards: the set-up lock shared by all
groups (two groups first used from two threads), async all-reduces on two new "accel"
groups issued in different orders (the first one set its group up in the caller's
thread), a late peer summing into a rank's pooled tensor after that rank was told the
step failed, local errors marking the group failed, a non-member's call, one rank's bad
pool size, a pool size whose segment overflowed, a group's first call made inside torch.compile,
and collectives issued inside a reduction's then-callback (torch's PowerSGD hook).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.shm import left_behind, shm_names

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "scripts" / "reliability_check.py"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both ranks' reports, after checking the job left /dev/shm as it found it."""
    folder = tmp_path_factory.mktemp("reliability")
    before = shm_names()
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(folder / "store"), str(rank), str(folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=240)[0])
        finally:
            proc.kill()
    said = "\n".join(f"rank {r}: {out[-3000:]}" for r, out in enumerate(outputs))
    assert [p.returncode for p in procs] == [0, 0], said
    assert not left_behind(before)
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("backend", ["gloo", "accel"])
def test_two_groups_first_used_from_two_threads_in_either_order(
    reports: list[dict[str, Any]], backend: str
) -> None:
    for report in reports:
        assert report[f"threads_{backend}"] == {"sums": [3.0, 3.0], "alive": [False, False]}


def test_one_group_used_from_two_threads_at_once_works_as_on_gloo(
    reports: list[dict[str, Any]],
) -> None:
    for report in reports:
        assert report["one_group_threads"] == {
            "outcomes": ["ok", "ok"], "alive": [False, False], "within_timeout": True
        }  # fmt: skip


def test_async_reductions_on_two_groups_issued_in_either_order(
    reports: list[dict[str, Any]],
) -> None:
    for report in reports:
        # Work.result() gives the tensors, as gloo's does (it raised "not implemented").
        assert report["async_order"] == {
            "sums": [3.0, 3.0],
            "errors": [None, None],
            "result": [3.0],
        }


def test_async_reductions_on_two_gloo_groups_issued_in_either_order(
    reports: list[dict[str, Any]],
) -> None:
    # Each rank on a node of its own: the groups turn out to be gloo's.
    for report in reports:
        assert report["async_order_gloo"] == {
            "sums": [3.0, 3.0], "errors": [None, None], "result": [3.0], "again": [3.0, 3.0],
            "levels": [[False, False], [False, False]],
        }  # fmt: skip


def test_a_late_peer_leaves_a_pooled_tensor_alone_and_fails_too(
    reports: list[dict[str, Any]],
) -> None:
    early, late = (report["late_pooled"] for report in reports)
    assert early["first"] == late["first"] == 2.0
    assert "timed out after 0.5" in early["error"]
    assert early["values"] == [42.0]  # what rank 0 wrote after it was told: untouched
    assert "failed: rank 0 gave up on it" in late["error"]
    assert late["values"] == [1.0]  # the late rank summed nothing either


def test_a_rank_waits_for_a_peer_still_reading_its_pooled_tensor(
    reports: list[dict[str, Any]],
) -> None:
    # Past its deadline, rank 0 waits for rank 1, which is alive and copying: it reported
    # a failure and returned while rank 1 still read the tensor its caller then refilled.
    for report in reports:
        assert report["slow_reader"] == {"error": None, "values": [1.0, 2.0]}


def test_a_destroyed_group_used_again_says_so(reports: list[dict[str, Any]]) -> None:
    # It raised a bare KeyError (the group's id) from the segment lookup.
    for report in reports:
        case = report["destroyed"]
        # broadcast_ on a destroyed group raised a bare KeyError; a group that is no group
        # a weak-reference or attribute error naming neither.
        for call in ("shared_empty", "all_reduce_", "broadcast_", "gloo_broadcast_"):
            assert case[call].startswith("RuntimeError: "), case
            assert "was destroyed (destroy_process_group)" in case[call]
        assert case["not_a_group"].startswith(
            "TypeError: all_reduce_(): group must be a torch.distributed ProcessGroup or None, "
            "got str 'world'"
        ), case
        assert case["an_int"].startswith("TypeError: broadcast_(): group must be"), case
        assert case["pooled"] == 4.0


def test_errors_every_rank_makes_alike_are_gloos_and_leave_the_group_usable(
    reports: list[dict[str, Any]],
) -> None:
    for report in reports:
        ours, gloos = report["local_errors"]["accel"], report["local_errors"]["gloo"]
        # An expanded tensor: gloo reads and writes past its storage (heap corruption at
        # larger sizes); accel refuses it on every rank before anything moves.
        assert ours.pop("expanded") == "ValueError"
        assert gloos.pop("expanded") == "ok"
        assert ours == gloos
        assert ours["avg_leaf"] == "RuntimeError"  # gloo sums, then refuses the in-place divide
        assert ours["sparse"] == "ok"
        assert ours["sparse_value"] == [1.0, 1.0, 0.0, 3.0]
        assert ours["after"] == 3.0  # the group still works


def test_copies_are_written_back_as_gloo_writes_and_overlapping_inputs_gathered(
    reports: list[dict[str, Any]],
) -> None:
    # The copy back into an inference tensor (or a leaf that requires grad) raised after
    # the sum and poisoned the group; an int64 every-other view went to gloo as it lay
    # (wrong elements written); an all-gather input inside its output was overwritten
    # before it was sent (2,000 wrong elements of 10M).
    for rank, report in enumerate(reports):
        copies = report["copies"]
        assert copies["inference"] is copies["leaf_broadcast"] is None, copies
        assert copies["int64_every_other"] is copies["gather"] is copies["after"] is None, copies
        assert copies["inference_value"] == [[0.0, 9.0], [3.0, 12.0], [6.0, 15.0]]
        own = [i * (rank + 1) for i in range(8)]
        assert copies["int64_value"] == [3 * i if i % 2 == 0 else own[i] for i in range(8)]
        assert copies["gather_right"] is True


def test_a_rank_outside_a_group_is_warned_and_left_alone(reports: list[dict[str, Any]]) -> None:
    member, outsider = (report["outside"] for report in reports)
    assert member["all_reduce"] is member["broadcast"] is member["shared_empty"] is None
    assert outsider["all_reduce"] is outsider["broadcast"] is outsider["shared_empty"] is None
    assert outsider["values"] == [2.0] * 4
    assert outsider["warned"] == [
        "Running all_reduce_ on global rank 1",
        "Running broadcast_ on global rank 1",
    ]
    assert member["warned"] == []


def test_a_bad_pool_size_on_one_rank_is_named_on_every_rank(
    reports: list[dict[str, Any]],
) -> None:
    good, bad = (report["bad_pool"]["error"] for report in reports)
    assert "ACCEL_SHM_POOL_BYTES must be a decimal number" in bad
    assert "got 'lots'" in bad
    assert good.startswith("ValueError: environment variable ACCEL_SHM_POOL_BYTES is not usable")
    assert "group rank(s) [1]" in good


def test_a_bad_node_id_on_one_rank_is_named_on_every_rank(reports: list[dict[str, Any]]) -> None:
    # The others waited out the group's timeout in the set-up's exchange.
    good, bad = (report["bad_node"]["error"] for report in reports)
    assert bad.startswith("ValueError: ACCEL_NODE_ID='bad id': expected 1 to 128 printable")
    assert good.startswith("ValueError: environment variable ACCEL_NODE_ID is not usable")
    assert "group rank(s) [1]" in good


def test_a_pool_size_past_the_address_space_is_refused_on_every_rank(
    reports: list[dict[str, Any]],
) -> None:
    for report in reports:
        error = report["huge_pool"]["error"]
        assert error.startswith("ValueError: environment variable ACCEL_SHM_POOL_BYTES=")
        assert "'9223372036854771712' is too large for a group of 2 ranks" in error
        assert "at most 35184338526208 fits" in error


def test_a_groups_first_call_may_be_inside_torch_compile(reports: list[dict[str, Any]]) -> None:
    for report in reports:
        assert report["compile"] == {"eager": [7.0] * 8, "aot_eager": [7.0] * 8}


def test_collectives_inside_a_reductions_callback_run_as_on_gloo(
    reports: list[dict[str, Any]],
) -> None:
    # A callback on the group's worker that issues a collective and waits for it: the
    # worker runs what was queued before it, then it (queued behind the callback, it
    # waited for ever; run at once, it overtook the reduction queued before it). Sums of
    # distinct values: any other order on one rank gives other numbers.
    for rank, report in enumerate(reports):
        case = report["then_callbacks"]
        expected = {"said": "ok", "values": [3.0, 30.0, 300.0, 2000.0]}
        assert case["accel"] == case["gloo"] == expected, case
        # Destroying the group there would wait for the callback itself: an error, said.
        assert "destroyed from a callback of one of its own reductions" in case["destroy_inside"], (
            rank,
            case["destroy_inside"],
        )


def test_ddp_with_torchs_powersgd_hook_trains_as_on_gloo(reports: list[dict[str, Any]]) -> None:
    for report in reports:
        losses = report["powersgd"]
        assert isinstance(losses["gloo"], list), losses
        assert len(losses["gloo"]) == 5
        assert losses["accel"] == losses["gloo"]


def test_point_to_point_goes_beside_a_queued_reduction_as_on_gloo(
    reports: list[dict[str, Any]],
) -> None:
    # The receive waited for the queued all-reduce, which waited for the sender: both
    # ranks hung for the group's timeout.
    for report in reports:
        case = report["p2p"]
        assert case["accel"] == case["gloo"], case
        assert case["accel"] == {"said": "ok", "sum": 2.0, "got": 1.0}


def test_a_group_of_one_rank_per_node_answers_as_one_node_does(
    reports: list[dict[str, Any]],
) -> None:
    # The first integer average went to gloo, which refuses it (a later one might not,
    # rank by rank); a view with gaps was summed and broadcast as gloo takes it: the gaps
    # summed and written over, the view's elements wrong.
    for rank, report in enumerate(reports):
        case = report["one_per_node"]
        for call in ("first", "second"):
            assert case[call] == {"said": None, "value": [3, 4, 5]}, (rank, case)
        assert case["every_other_sum"] is case["every_other_broadcast"] is None, case
        own = [i * (rank + 1.0) for i in range(12)]
        assert case["every_other"] == [3.0 * i if i % 2 == 0 else own[i] for i in range(12)]
        assert case["broadcast"] == [float(i) if i % 2 else own[i] for i in range(12)]
