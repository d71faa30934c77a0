"""Topologies: who attends to whom, in which canonical edge order, and their checks."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import attend as ref_attend
from reference import bipartite_edges, complete_edges, window_edges

from setattn import attend, bipartite, complete, edges, ptr_from_batch, window
from setattn.scores import ScaledDot
from setattn.topology import Bipartite, Complete, Edges, Window, ptr_from_sizes

SIZES = [3, 5, 0, 7, 1]
PTR = [0, 3, 8, 8, 15, 16]


def test_ptr_from_sizes():
    assert ptr_from_sizes(SIZES).tolist() == PTR
    assert ptr_from_sizes(torch.tensor(SIZES)).tolist() == PTR
    assert ptr_from_sizes([]).tolist() == [0]
    assert ptr_from_sizes(SIZES).dtype == torch.long


def test_ptr_from_batch_keeps_empty_graphs():
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 4])
    assert ptr_from_batch(batch).tolist() == PTR  # graph 2 is empty
    assert ptr_from_batch(batch, num_graphs=7).tolist() == PTR + [16, 16]  # trailing empties
    assert ptr_from_batch(torch.zeros(0, dtype=torch.long)).tolist() == [0]
    assert ptr_from_batch(torch.zeros(0, dtype=torch.long), num_graphs=2).tolist() == [0, 0, 0]


def test_ptr_from_batch_rejects_unsorted_batch():
    with pytest.raises(ValueError, match="sorted"):
        ptr_from_batch(torch.tensor([0, 1, 0]))


@pytest.mark.parametrize("ptr_type", [list, torch.tensor])
def test_complete(ptr_type):
    top = complete(ptr_type(PTR))
    assert isinstance(top, Complete) and isinstance(top, Bipartite)
    assert (top.num_q, top.num_kv) == (16, 16)
    assert top.sizes_q.tolist() == SIZES and top.sizes_kv.tolist() == SIZES
    assert top.num_edges == 9 + 25 + 0 + 49 + 1
    assert top.edge_index().tolist() == list(complete_edges(SIZES))
    assert top.edge_offsets().tolist() == [0, 9, 34, 34, 83, 84]


def test_bipartite_with_empty_sides():
    sizes_q, sizes_kv = [2, 0, 3, 1], [5, 3, 0, 7]
    top = bipartite(ptr_from_sizes(sizes_q), ptr_from_sizes(sizes_kv))
    assert (top.num_q, top.num_kv) == (6, 15)
    assert top.num_edges == 10 + 0 + 0 + 7
    assert top.edge_index().tolist() == list(bipartite_edges(sizes_q, sizes_kv))
    assert top.edge_offsets().tolist() == [0, 10, 10, 10, 17]


@pytest.mark.parametrize("radius", [0, 1, 2, 6, 50])
def test_window(radius):
    top = window(PTR, radius)
    assert isinstance(top, Window)
    assert (top.num_q, top.num_kv) == (16, 16)
    src, tgt = window_edges(SIZES, radius)
    assert top.edge_index().tolist() == [src, tgt]
    assert top.num_edges == len(src)
    index, valid = top.neighbours()
    assert index.shape == valid.shape == (16, 2 * radius + 1)
    assert int(valid.sum()) == len(src)
    assert bool((index >= 0).all() and (index < 16).all())
    # slot w of query i is key i - r + w whenever it is valid
    expected = torch.arange(16)[:, None] + torch.arange(-radius, radius + 1)[None, :]
    assert torch.equal(index[valid], expected[valid])


def test_window_larger_than_every_set_is_complete():
    assert window(PTR, 7).edge_index().tolist() == list(complete_edges(SIZES))


def test_window_radius_zero_is_self_only():
    assert window(PTR, 0).edge_index().tolist() == [list(range(16)), list(range(16))]


def test_edges_infers_or_takes_num_nodes():
    index = torch.tensor([[0, 4, 2], [1, 1, 3]])
    top = edges(index)
    assert isinstance(top, Edges)
    assert (top.num_kv, top.num_q) == (5, 5)
    assert (edges(index, 9).num_kv, edges(index, 9).num_q) == (9, 9)
    bip = edges(index, (7, 4))  # (num_src, num_dst)
    assert (bip.num_kv, bip.num_q) == (7, 4)
    assert bip.num_edges == 3
    assert torch.equal(bip.edge_index(), index)  # the caller's order is canonical


def test_edges_casts_to_long_and_allows_no_edges():
    top = edges(torch.tensor([[0, 1], [1, 0]], dtype=torch.int32))
    assert top.edge_index().dtype == torch.long
    empty = edges(torch.zeros(2, 0, dtype=torch.long))
    assert (empty.num_q, empty.num_kv, empty.num_edges) == (0, 0, 0)
    assert edges(torch.zeros(2, 0, dtype=torch.long), (3, 4)).num_q == 4


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: complete([1, 3]), "ptr"),
        (lambda: complete([0, 3, 2]), "ptr"),
        (lambda: complete([[0, 3]]), "ptr"),
        (lambda: complete([]), "ptr"),
        (lambda: bipartite([0, 2, 3], [0, 4]), "same number of sets"),
        (lambda: bipartite([2, 3], [0, 4]), "ptr_q"),
        (lambda: bipartite([0, 3], [0, 4, 1]), "ptr_kv"),
        (lambda: window([0, 3], -1), "radius"),
        (lambda: window([0, 5, 3], 1), "ptr"),
        (lambda: edges(torch.zeros(3, 4, dtype=torch.long)), "edge_index"),
        (lambda: edges(torch.zeros(4, dtype=torch.long)), "edge_index"),
        (lambda: edges(torch.tensor([[0, -1], [0, 0]])), "negative"),
        (lambda: edges(torch.tensor([[0, 5], [0, 0]]), 3), "num_nodes"),
        (lambda: edges(torch.tensor([[0, 1], [0, 2]]), (3, 2)), "num_nodes"),
    ],
)
def test_invalid_topologies_raise_value_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 8), max_size=7),
    sizes_kv=st.lists(st.integers(0, 8), min_size=7, max_size=7),
    radius=st.integers(0, 9),
)
def test_canonical_order_is_target_major_sources_ascending(sizes, sizes_kv, radius):
    sizes_kv = sizes_kv[: len(sizes)]
    for top, want in [
        (complete(ptr_from_sizes(sizes)), complete_edges(sizes)),
        (bipartite(ptr_from_sizes(sizes), ptr_from_sizes(sizes_kv)),
         bipartite_edges(sizes, sizes_kv)),
        (window(ptr_from_sizes(sizes), radius), window_edges(sizes, radius)),
    ]:
        index = top.edge_index()
        assert index.shape == (2, top.num_edges)
        assert index.tolist() == [list(want[0]), list(want[1])]
        if top.num_edges:
            # sorted by (target, source), no pair twice
            key = index[1] * (top.num_kv + 1) + index[0]
            assert bool((key[1:] > key[:-1]).all())


def test_edges_sees_in_place_changes_of_its_edge_index():
    """Edges may be memoised for speed, never at the price of a stale graph."""
    index = torch.tensor([[0, 1, 2], [1, 1, 0]])
    q, k, v = (torch.randn(4, 2, 3, dtype=torch.float64) for _ in range(3))
    first = edges(index, 4)
    attend(q, k, v, first)  # let the engine cache whatever it caches
    assert edges(index, 4).edge_index().tolist() == [[0, 1, 2], [1, 1, 0]]
    index[0, 0] = 3
    again = edges(index, 4)
    assert again.edge_index().tolist() == [[3, 1, 2], [1, 1, 0]]
    want, _ = ref_attend(q, k, v, [3, 1, 2], [1, 1, 0], ScaledDot())
    torch.testing.assert_close(attend(q, k, v, again), want)
    assert (again.num_q, again.num_kv) == (first.num_q, first.num_kv)
    with pytest.raises(ValueError, match="num_nodes"):  # same tensor, smaller graph
        edges(index, 3)
    assert edges(index, (5, 2)).num_kv == 5
