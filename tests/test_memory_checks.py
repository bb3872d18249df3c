"""accel._validate's memory checks for native code and copies that write by address:
a tensor's extent in memory, elements that share memory, tensors that share memory."""

from __future__ import annotations

import itertools
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accel._validate import (
    Span,
    check_disjoint,
    check_no_self_overlap,
    memory_extent,
    require_disjoint_spans,
)


def _offsets(tensor: torch.Tensor) -> list[int]:
    """Every element's offset from the first, in elements: the ground truth."""
    ranges = [range(size) for size in tensor.shape]
    return [
        sum(i * s for i, s in zip(index, tensor.stride(), strict=True))
        for index in itertools.product(*ranges)
    ]


layouts = st.tuples(
    st.lists(st.integers(1, 4), min_size=1, max_size=3),  # shape
    st.lists(st.integers(0, 12), min_size=3, max_size=3),  # strides, cut to the shape
)


@settings(max_examples=300, deadline=None)
@given(layout=layouts)
def test_a_layout_that_passes_has_no_two_elements_in_one_place(
    layout: tuple[list[int], list[int]],
) -> None:
    shape, strides = layout[0], layout[1][: len(layout[0])]
    base = torch.zeros(200)
    view = base.as_strided(shape, strides)
    offsets = _offsets(view)
    assert memory_extent(view) == (max(offsets) + 1) * view.element_size()
    try:
        check_no_self_overlap(view, "t")
    except ValueError:
        return
    assert len(set(offsets)) == len(offsets)


@settings(max_examples=100, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_every_permuted_or_sliced_view_of_own_memory_passes(
    shape: list[int], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(shape))))
    view = torch.zeros(shape).permute(*order)
    check_no_self_overlap(view, "t")
    check_no_self_overlap(view[..., ::2], "t")


def test_an_expanded_view_names_itself_and_its_strides() -> None:
    with pytest.raises(
        ValueError,
        match=r"^grads\[2\] has elements that share memory \(shape \(3, 4\), strides \(0, 1\)",
    ):
        check_no_self_overlap(torch.zeros(4).expand(3, 4), "grads[2]")


def test_views_of_one_storage_are_disjoint_only_where_their_extents_are() -> None:
    weight = torch.zeros(4, 6)
    check_disjoint([(weight[:2], "top"), (weight[2:], "bottom"), (torch.zeros(0), "empty")])
    with pytest.raises(ValueError, match=r"^left and right overlap in memory"):
        # The left and right halves share no element, but their extents cross: refused too.
        check_disjoint([(weight[:, :3], "left"), (weight[:, 3:], "right")])
    with pytest.raises(ValueError, match=r"^a and b overlap in memory"):
        check_disjoint([(weight.t(), "a"), (torch.zeros(2), "c"), (weight[3], "b")])


spans = st.lists(
    st.tuples(st.integers(0, 60), st.integers(1, 20), st.booleans()),  # start, length, written
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(drawn=spans)
def test_spans_clash_exactly_where_a_written_one_shares_a_byte(
    drawn: list[tuple[int, int, bool]],
) -> None:
    # Against every pair: two spans clash when they share a byte and either is written.
    def clash(a: tuple[int, int, bool], b: tuple[int, int, bool]) -> bool:
        return (a[2] or b[2]) and a[0] < b[0] + b[1] and b[0] < a[0] + a[1]

    expected = any(clash(a, b) for a, b in itertools.combinations(drawn, 2))
    given_spans: list[Span] = [(s, s + n, k, w) for k, (s, n, w) in enumerate(drawn)]
    try:
        require_disjoint_spans(given_spans, lambda k: f"span{k}")
    except ValueError as error:
        low, high = (int(name[4:]) for name in re.findall(r"span\d+", str(error)))
        assert expected
        assert low < high
        assert clash(drawn[low], drawn[high])
    else:
        assert not expected


def test_tensors_only_read_may_share_memory_with_each_other() -> None:
    weight = torch.zeros(8)
    check_disjoint([(torch.zeros(4), "p")], read=[(weight, "g0"), (weight[2:], "g1")])
    with pytest.raises(ValueError, match=r"^p and g1 overlap in memory"):
        check_disjoint([(weight[6:], "p")], read=[(weight[:2], "g0"), (weight[1:8], "g1")])
