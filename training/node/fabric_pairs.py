"""Which node (or link) a slow fabric check points at: the pairwise schedule and the localization.

Standard library only: the verdict step and its tests use it without torch.

The full all-reduce of the fabric check (``training.node.fabric_check``) says whether the job's
fabric is fast enough, not where it is slow: one node with a bad EFA interface slows every ring
through it. With three or more nodes, ``measure`` then times an all-reduce between the workers of
each pair of nodes, in rounds of disjoint pairs (:func:`round_robin`), and :func:`localize`
reads the table. With two nodes there is only one pair, the full all-reduce itself: no
measurement between the nodes can tell which one is at fault, so both are left to their own deep
check (``training.node.health_check``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: A pair of nodes, by index in the job (torchrun's ``GROUP_RANK``), the smaller first.
Pair = tuple[int, int]


def round_robin(nodes: int) -> list[list[Pair]]:
    """Rounds of disjoint node pairs that together hold every pair exactly once.

    The circle method: node 0 stays, the others turn one place per round, and the i-th node from
    the front plays the i-th from the back. An odd count gets a stand-in ``nodes`` whose partner
    sits the round out. ``nodes - 1`` rounds for an even count, ``nodes`` for an odd one (each
    node meets the ``nodes - 1`` others once, at most one per round).
    """
    if nodes < 2:
        raise ValueError("pairs need at least 2 nodes")
    seats = list(range(nodes)) + ([nodes] if nodes % 2 else [])  # ``nodes``: the bye
    rounds: list[list[Pair]] = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        pairs = [(seats[i], seats[-1 - i]) for i in range(half)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if nodes not in (a, b)])
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return rounds


def pairs_in_order(nodes: int) -> list[Pair]:
    """Every pair, in the order of :func:`round_robin` (the order every rank creates the groups)."""
    return [pair for round_ in round_robin(nodes) for pair in round_]


@dataclass(frozen=True)
class Localization:
    """What the pair table says.

    Attributes:
        named_nodes: nodes every pair of which is below the floor while some pair without them is
            not: the node is the common factor.
        slow_links: the other slow pairs (both of their nodes are fine with someone else), as
            (node, node) names.
        fabric_wide: every pair is slow: the fault is not one node's (the switch, the placement
            group, the job's configuration), so nothing is named.
    """

    named_nodes: tuple[str, ...] = ()
    slow_links: tuple[tuple[str, str], ...] = ()
    fabric_wide: bool = False


def localize(busbw: Mapping[tuple[str, str], float], *, floor_gbps: float) -> Localization:
    """The localization of a table of pair bus bandwidths (GB/s) against the floor.

    A node is named when every pair it is in is below the floor and at least one pair without it
    is at or above the floor. A slow pair whose nodes are not named is reported as a link. Nothing
    is named when every pair is slow.
    """
    slow = {pair for pair, gbps in busbw.items() if gbps < floor_gbps}
    if not slow:
        return Localization()
    if slow == set(busbw):
        return Localization(fabric_wide=True)
    nodes = sorted({node for pair in busbw for node in pair})
    named = tuple(node for node in nodes if all(pair in slow for pair in busbw if node in pair))
    links = tuple(
        (a, b) for a, b in sorted(slow) if a not in named and b not in named
    )  # a pair with a named node is explained by it
    return Localization(named_nodes=named, slow_links=links)


def pair_table(names: Sequence[str], busbw: Sequence[float]) -> dict[tuple[str, str], float]:
    """The pair bandwidths of :func:`pairs_in_order`, keyed by the nodes' names."""
    return {
        (names[a], names[b]): gbps for (a, b), gbps in zip(pairs_in_order(len(names)), busbw, strict=True)
    }
