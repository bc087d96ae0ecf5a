import pytest
from hypothesis import given
from hypothesis import strategies as st

from shmq.client.consumer.rebalance import (
    STRATEGIES,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_config,
    allocate_consistent_hash,
)


def split(strategy, queues, members, **kw):
    return [strategy(queues, members, m, **kw) for m in members]


def test_averagely_matches_rocketmq():
    q = list(range(8))
    assert split(allocate_averagely, q, ["a", "b", "c"]) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert split(allocate_averagely, q, ["a", "b"]) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split(allocate_averagely, [0, 1], ["a", "b", "c"]) == [[0], [1], []]
    assert split(allocate_averagely, list(range(10)), list("abcd")) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


def test_by_circle_matches_rocketmq():
    q = list(range(8))
    assert split(allocate_averagely_by_circle, q, ["a", "b", "c"]) == [[0, 3, 6], [1, 4, 7], [2, 5]]
    assert split(allocate_averagely_by_circle, [0, 1], ["a", "b", "c"]) == [[0], [1], []]


@pytest.mark.parametrize("strategy", list(STRATEGIES.values()))
def test_not_a_member_and_no_queues(strategy):
    assert strategy([1, 2, 3], ["a", "b"], "z") == []
    assert strategy([], ["a", "b"], "a") == []


members_st = st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True).map(sorted)
queues_st = st.integers(0, 40).map(lambda n: [("T", i) for i in range(n)])


@given(queues_st, members_st)
@pytest.mark.parametrize("strategy", list(STRATEGIES.values()))
def test_every_queue_exactly_once(strategy, queues, members):
    shares = split(strategy, queues, members)
    flat = [q for share in shares for q in share]
    assert sorted(flat) == queues
    assert split(strategy, queues, members) == shares  # deterministic: every member computes the same


@given(queues_st, members_st)
@pytest.mark.parametrize("strategy", [allocate_averagely, allocate_averagely_by_circle])
def test_balanced_within_one(strategy, queues, members):
    sizes = [len(s) for s in split(strategy, queues, members)]
    assert max(sizes) - min(sizes) <= 1


@given(queues_st, members_st, st.integers(0, 10_000))
def test_consistent_hash_moves_only_to_a_new_member(queues, members, newcomer):
    if newcomer in members:
        return
    before = dict(zip(members, split(allocate_consistent_hash, queues, members)))
    grown = sorted([*members, newcomer])
    after = dict(zip(grown, split(allocate_consistent_hash, queues, grown)))
    for m in members:
        assert set(after[m]) <= set(before[m])


def test_consistent_hash_virtual_nodes_checked():
    with pytest.raises(ValueError):
        allocate_consistent_hash([1], ["a"], "a", virtual_nodes=0)


def test_by_config():
    fixed = allocate_by_config([("T", 3), ("T", 1)])
    assert fixed([("T", 0)], ["a", "b"], "b") == [("T", 3), ("T", 1)]
