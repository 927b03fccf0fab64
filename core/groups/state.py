"""The states of a membership group and the transitions between them.

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's assignment--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;  Empty --deleted--> Dead
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    # Consumer-protocol (KIP-848) groups also pass through these (consumer_group.py):
    ASSIGNING = "Assigning"        # the group epoch moved on; its target assignment is not computed yet
    RECONCILING = "Reconciling"    # some members have not reached the target assignment yet


# The states each state may be entered from.
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.ASSIGNING: frozenset(),       # never entered by a classic group
    GroupState.RECONCILING: frozenset(),
}


def parse_state(name: str) -> GroupState | None:
    """The state named `name` (any letter case), None for no such state."""
    for state in GroupState:
        if state.value.lower() == name.lower():
            return state
    return None
