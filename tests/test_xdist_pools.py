"""The pooled xdist scheduling (normprops.xdist_pools): each pool's tests on the few workers sized
for them."""

from __future__ import annotations

import re

import pytest

from normprops.xdist_pools import PoolDispatch, PoolPlan, StartCost, pool_sizes


def _plan(pool_of, sizes, first_use=10.0, per_test=1.0) -> PoolPlan:
    pools = {p for p in pool_of if p is not None}
    return PoolPlan(tuple(pool_of), sizes, {p: StartCost(first_use, per_test) for p in pools})


def test_a_pools_tests_go_to_its_workers_first_and_to_no_other_while_it_is_full() -> None:
    dispatch = PoolDispatch(_plan(["slow", "slow", "slow", None, None], {"slow": 1}))
    queue = [0, 1, 2, 3, 4]
    assert dispatch.take(queue, "gw0", idle=True) == 0  # the first test: gw0 joins the pool
    queue.pop(0)
    assert dispatch.take(queue, "gw1", idle=True) == 2  # the pool is full: gw1 takes test 3
    queue.pop(2)
    assert dispatch.take(queue, "gw0", idle=False) == 0  # its pool's test before test 4
    assert dispatch.members == {"slow": {"gw0"}}


def test_an_idle_worker_joins_a_full_pool_only_where_that_pays_for_its_start() -> None:
    # 3 queued tests of 1 s for the pool's one worker: 3 s, less than the 10 s a newcomer pays.
    cheap = PoolDispatch(_plan(["slow"] * 4, {"slow": 1}))
    assert cheap.take([0, 1, 2, 3], "gw0", idle=True) == 0
    assert cheap.take([1, 2, 3], "gw1", idle=True) is None
    # 30 queued tests of 1 s: joining ends the pool sooner, so an idle worker joins...
    dear = PoolDispatch(_plan(["slow"] * 31, {"slow": 1}))
    assert dear.take(list(range(31)), "gw0", idle=True) == 0
    assert dear.take(list(range(1, 31)), "gw1", idle=False) is None  # ...but not one still busy
    assert dear.take(list(range(1, 31)), "gw1", idle=True) == 0
    assert dear.members == {"slow": {"gw0", "gw1"}}


def test_a_worker_that_left_frees_its_place() -> None:
    dispatch = PoolDispatch(_plan(["slow"] * 3, {"slow": 1}))
    assert dispatch.take([0, 1, 2], "gw0", idle=True) == 0
    assert dispatch.take([1, 2], "gw1", idle=True) is None
    dispatch.leave("gw0")
    assert dispatch.take([1, 2], "gw1", idle=True) == 0


@pytest.mark.parametrize("workers, size", [
    (10, 3),  # 244 s of work, 22 s a worker with a tenth in hand: 16 s once the start and a test are paid
    (2, 1),
    (1, 1),
    (30, 20),  # 7.3 s a worker, 1.3 s of it for the pool: a worker for each of its 20 tests
])
def test_a_pool_gets_the_workers_its_share_of_the_run_needs(workers: int, size: int) -> None:
    # 20 tests of 2 s in the pool (40 s, and 4 s to start), 200 tests of 1 s outside it.
    pool_of = ["a"] * 20 + [None] * 200
    assert pool_sizes(pool_of, {"a": StartCost(4.0, 2.0)}, other_seconds=1.0, workers=workers) == {"a": size}


def test_pool_sizes_grow_with_the_pools_share() -> None:
    costs = {"a": StartCost(5.0, 2.0)}
    sizes = [pool_sizes(["a"] * n + [None] * 400, costs, other_seconds=1.0, workers=15)["a"]
             for n in (10, 100, 300)]
    assert sizes[0] < sizes[1] < sizes[2] < 15


@pytest.mark.parametrize("bad, message", [
    (dict(pool_of=("a",), sizes={}, costs={"a": StartCost(1, 1)}), "pools ['a'] have no entry in sizes"),
    (dict(pool_of=("a",), sizes={"a": 0}, costs={"a": StartCost(1, 1)}), "at least 1 worker"),
    (dict(pool_of=("a",), sizes={"a": 1}, costs={}), "pools ['a'] have no entry in costs"),
], ids=["no size", "no worker", "no cost"])
def test_a_plan_that_cannot_be_followed_is_refused(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PoolPlan(**bad)
