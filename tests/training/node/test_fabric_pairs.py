"""The fabric check's pairs: the round-robin schedule, the localization on tables, and the verdict
lines that name a node, a link, or nobody."""

from __future__ import annotations

from itertools import combinations

import pytest

from training.node.fabric_check import judge
from training.node.fabric_pairs import Localization, localize, pair_table, pairs_in_order, round_robin
from trainium_job.fabric_check_steps import EXIT_CODE

FLOOR = 10.0
FAST, SLOW = 30.0, 3.0


def _names(nodes: int) -> list[str]:
    return [f"ip-10-0-1-{10 + i}" for i in range(nodes)]


def _table(
    nodes: int, *, slow_nodes=(), slow_links=(), all_slow: bool = False
) -> dict[tuple[str, str], float]:
    """Pair bandwidths of ``nodes`` nodes: FAST, SLOW for any pair with a slow node or on a slow link."""
    names = _names(nodes)
    busbw = [
        SLOW if all_slow or a in slow_nodes or b in slow_nodes or (a, b) in slow_links else FAST
        for a, b in pairs_in_order(nodes)
    ]
    return pair_table(names, busbw)


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 7, 16, 17])
def test_given_n_nodes_then_the_rounds_hold_every_pair_once_and_no_node_twice_in_a_round(nodes):
    rounds = round_robin(nodes)
    assert len(rounds) == (nodes - 1 if nodes % 2 == 0 else nodes)
    pairs = [pair for round_ in rounds for pair in round_]
    assert sorted(pairs) == list(combinations(range(nodes), 2))
    for round_ in rounds:
        in_round = [node for pair in round_ for node in pair]
        assert len(in_round) == len(set(in_round))
        assert len(round_) == nodes // 2  # every node busy but the bye of an odd count
    assert pairs_in_order(nodes) == pairs


def test_given_fewer_than_two_nodes_then_there_is_no_schedule():
    with pytest.raises(ValueError, match="at least 2 nodes"):
        round_robin(1)


@pytest.mark.parametrize("nodes", [3, 4, 5, 16])
@pytest.mark.parametrize("bad", [0, 2])
def test_given_one_slow_node_then_it_alone_is_named(nodes, bad):
    names = _names(nodes)
    assert localize(_table(nodes, slow_nodes={bad}), floor_gbps=FLOOR) == Localization(
        named_nodes=(names[bad],)
    )


@pytest.mark.parametrize("nodes", [3, 4, 5, 16])
def test_given_one_slow_link_then_the_pair_is_reported_and_no_node_named(nodes):
    names = _names(nodes)
    got = localize(_table(nodes, slow_links={(0, 2)}), floor_gbps=FLOOR)
    assert got == Localization(slow_links=((names[0], names[2]),))


@pytest.mark.parametrize("nodes", [3, 4, 5, 16])
def test_given_every_pair_slow_then_the_fault_is_fabric_wide_and_nobody_is_named(nodes):
    assert localize(_table(nodes, all_slow=True), floor_gbps=FLOOR) == Localization(fabric_wide=True)


@pytest.mark.parametrize("nodes", [3, 4, 5, 16])
def test_given_no_slow_pair_then_nothing_is_found(nodes):
    assert localize(_table(nodes), floor_gbps=FLOOR) == Localization()


def test_given_a_pair_right_at_the_floor_then_it_is_not_slow():
    table = _table(3, slow_nodes={1})
    table[_names(3)[0], _names(3)[1]] = FLOOR
    assert localize(table, floor_gbps=FLOOR) == Localization(
        slow_links=((_names(3)[1], _names(3)[2]),)
    )  # node 1 now has a pair at the floor: only its other pair is slow


def test_given_two_slow_nodes_of_sixteen_then_both_are_named():
    names = _names(16)
    got = localize(_table(16, slow_nodes={3, 11}), floor_gbps=FLOOR)
    assert got == Localization(named_nodes=(names[3], names[11]))


def test_given_two_slow_nodes_of_three_then_every_pair_is_slow_and_nobody_is_named():
    assert localize(_table(3, slow_nodes={0, 1}), floor_gbps=FLOOR) == Localization(fabric_wide=True)


def test_given_a_slow_node_and_a_slow_link_elsewhere_then_both_are_reported():
    names = _names(5)
    got = localize(_table(5, slow_nodes={4}, slow_links={(0, 1)}), floor_gbps=FLOOR)
    assert got == Localization(named_nodes=(names[4],), slow_links=((names[0], names[1]),))


def _result(nodes: int, busbw: float, table: dict[tuple[str, str], float]) -> dict:
    """A node's result as ``measure`` writes it for ``nodes`` nodes (node 0's)."""
    return {
        "node": _names(nodes)[0],
        "world_size": 32 * nodes,
        "size_bytes": 128 * 2**20,
        "iters": 20,
        "seconds_per_op": 0.02,
        "busbw_gbps": busbw,
        "provider": "efa",
        "efa_devices": 8,
        "efa_bytes": 10**10,
        "nodes": _names(nodes),
        "pairs": [
            {"nodes": list(pair), "busbw_gbps": gbps, "seconds_per_op": 0.01} for pair, gbps in table.items()
        ],
    }


def test_given_a_slow_job_and_one_slow_node_then_the_verdict_aborts_and_names_it():
    names = _names(4)
    v = judge(_result(4, 4.0, _table(4, slow_nodes={2})), min_busbw_gbps=FLOOR, nodes=4, seconds=50)
    assert v.exit_code == EXIT_CODE
    assert v.line.startswith(
        f"fabric check FAILED on node {names[0]} after 50 s: all-reduce bus bandwidth 4.0"
    )
    assert v.named_nodes == (names[2],) and v.slow_pairs == () and v.recheck_nodes == ()
    assert v.findings == (
        f"fabric check names node {names[2]}: every pair with it is below 10 GB/s ("
        f"{names[0]} - {names[2]} 3.0, {names[1]} - {names[2]} 3.0, {names[2]} - {names[3]} 3.0 GB/s), "
        "a pair without it is not",
    )


def test_given_a_slow_job_and_one_slow_link_then_the_verdict_names_the_link_not_a_node():
    names = _names(3)
    v = judge(_result(3, 4.0, _table(3, slow_links={(1, 2)})), min_busbw_gbps=FLOOR, nodes=3, seconds=5)
    assert v.exit_code == EXIT_CODE and v.named_nodes == ()
    assert v.slow_pairs == ((names[1], names[2]),)
    assert v.findings == (f"fabric check: the link {names[1]} - {names[2]} is slow, 3.0 GB/s below 10 GB/s",)


@pytest.mark.parametrize(
    "table, expected",
    [
        (_table(5, all_slow=True), "every pair of nodes is below 10 GB/s (the fabric, not a node)"),
        (_table(5), "every pair of nodes reaches 10 GB/s, only all together is slow"),
    ],
)
def test_given_a_slow_job_that_no_pair_pins_then_the_verdict_names_nobody_and_says_why(table, expected):
    v = judge(_result(5, 4.0, table), min_busbw_gbps=FLOOR, nodes=5, seconds=5)
    assert v.exit_code == EXIT_CODE and v.named_nodes == () and v.slow_pairs == ()
    assert v.findings == (f"fabric check names no node: {expected}",)


def test_given_a_passing_job_with_a_slow_pair_then_it_passes_naming_nobody_but_the_pair():
    names = _names(4)
    v = judge(_result(4, 20.0, _table(4, slow_nodes={3})), min_busbw_gbps=FLOOR, nodes=4, seconds=5)
    assert v.passed and v.named_nodes == ()
    assert v.slow_pairs == ((names[0], names[3]), (names[1], names[3]), (names[2], names[3]))
    assert len(v.findings) == 3


def test_given_a_slow_two_node_job_then_both_nodes_are_left_to_their_own_check():
    names = _names(2)
    result = {**_result(2, 4.0, {}), "pairs": None}
    v = judge(result, min_busbw_gbps=FLOOR, nodes=2, seconds=5)
    assert v.exit_code == EXIT_CODE and v.named_nodes == ()
    assert v.recheck_nodes == tuple(names)
    assert v.findings == (
        "fabric check names no node: with 2 nodes no measurement between them can tell which one is slow; "
        f"re-check both with the node health check: {names[0]}, {names[1]}",
    )


def test_given_pairs_that_broke_off_then_the_full_verdict_stands_naming_nobody():
    result = {**_result(3, 4.0, {}), "pairs_error": "RuntimeError: Connection closed by peer"}
    v = judge(result, min_busbw_gbps=FLOOR, nodes=3, seconds=5)
    assert v.exit_code == EXIT_CODE and v.named_nodes == ()
    assert v.findings == (
        "fabric check names no node: the pairs broke off (RuntimeError: Connection closed by peer)",
    )
