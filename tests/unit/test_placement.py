"""Placement decisions as pure functions (dist_notebook/cluster/placement.py): plain
data in, plain data out, no cluster, no client, no engine.

(``place``, which numbers remote engines from their probes, is tested with the
launchers' probes in tests/multinode/test_placement.py.)
"""

from __future__ import annotations

import pytest

from dist_notebook.cluster.placement import (
    PlacementError,
    asked_layout,
    growth,
    host_counts,
    host_layout,
    leaving_by_host,
    local_ranks,
    mpi_hosts,
    newest_ranks,
    threads_per_rank,
)


def test_host_counts_grow_the_least_and_shrink_the_most_loaded_host() -> None:
    assert host_counts({"h1": 1, "h2": 1}, 3) == {"h1": 2, "h2": 1}  # a tie: the first
    assert host_counts({"h1": 2, "h2": 2}, 3) == {"h1": 2, "h2": 1}  # a tie: the last
    assert host_counts({"h1": 0, "h2": 1}, 2) == {"h1": 1, "h2": 1}  # an emptied host refills
    assert host_counts({"h1": 2, "h2": 1}, 3) == {"h1": 2, "h2": 1}  # nothing to change
    assert host_counts({"h1": 1, "h2": 1}, 4, cap=2) == {"h1": 2, "h2": 2}


def test_host_counts_beyond_the_gpus_per_node_name_the_fix() -> None:
    with pytest.raises(PlacementError, match="have 2 GPUs each.*add a host with scale --hosts"):
        host_counts({"h1": 2, "h2": 1}, 5, cap=2)


def test_host_layout_counts_in_the_clusters_host_order() -> None:
    # A host of the cluster with no rank left keeps its 0; an unknown host comes after.
    assert host_layout(["h2", "h3", "h2"], ["h1", "h2"]) == {"h1": 0, "h2": 2, "h3": 1}
    assert list(host_layout(["h2", "h1"], ["h1", "h2"])) == ["h1", "h2"]
    assert host_layout([], []) == {}


def test_asked_layout_empties_hosts_left_out_and_adds_new_ones_last() -> None:
    got = asked_layout({"h1": 2, "h2": 1}, {"h3": 1, "h1": 1})
    assert got == {"h1": 1, "h2": 0, "h3": 1}
    assert list(got) == ["h1", "h2", "h3"]


def test_growth_is_what_each_host_gains() -> None:
    assert growth({"h1": 3, "h2": 1, "h3": 2}, {"h1": 2, "h2": 1}) == {"h1": 1, "h3": 2}
    assert growth({"h1": 1}, {"h1": 2}) == {}
    assert growth({}, {}) == {}


def test_leaving_by_host_takes_each_hosts_highest_ranks() -> None:
    host_of = {0: "h1", 1: "h1", 2: "h1", 3: "h2", 4: "h2"}
    assert leaving_by_host(host_of, {"h1": 1, "h2": 2}) == [1, 2]
    assert leaving_by_host(host_of, {"h1": 3}) == [3, 4]  # a host left out: all its ranks
    assert leaving_by_host(host_of, {"h1": 3, "h2": 2}) == []


def test_newest_ranks_leave_from_the_last_engine_set_first() -> None:
    set_of = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c"}
    assert newest_ranks(set_of, ["a", "b", "c"], 2) == [4, 3]
    assert newest_ranks(set_of, ["a", "b", "c"], 4) == [4, 3, 2, 1]
    assert newest_ranks(set_of, ["a", "b", "c"], 0) == []
    # A rank of a set already forgotten counts as the oldest.
    assert newest_ranks({0: None, 1: "b"}, ["b"], 1) == [1]


def test_mpi_hosts_follow_the_mpiexec_host_slots() -> None:
    args = ["--oversubscribe", "--host", "h1:2,h2:1", "--map-by", "slot"]
    assert mpi_hosts(args) == ["h1", "h1", "h2"]
    assert mpi_hosts(["--map-by", "slot"]) == []


def test_local_ranks_by_the_engines_report_else_by_registration() -> None:
    # Engines report their rank (launcher variables) in registration order.
    assert local_ranks([{"rank": 1}, {"rank": 0}], 2) == [(1, 0), (0, 1)]
    # A plain ipengine (no variables) reports -1: its place in the registration order.
    assert local_ranks([{"rank": -1}, {"rank": -1}], 2) == [(0, 0), (1, 1)]


def test_local_ranks_that_are_not_0_to_n_minus_1_are_refused() -> None:
    with pytest.raises(PlacementError, match=r"engines report ranks \[0, 0\], not 0..1"):
        local_ranks([{"rank": 0}, {"rank": 0}], 2)
    with pytest.raises(PlacementError, match=r"not 0..2"):
        local_ranks([{"rank": 0}, {"rank": 1}], 3)


def test_threads_per_rank_share_the_cores_of_a_host() -> None:
    assert threads_per_rank(8, 2) == 4
    assert threads_per_rank(2, 4) == 1  # never less than one
    assert threads_per_rank(None, 2) == 1  # cores unknown
    assert threads_per_rank(8, 3, given=5) == 5  # --threads wins
