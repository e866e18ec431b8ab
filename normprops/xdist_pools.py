"""pytest-xdist scheduling that keeps each slow-start group of tests on a few workers.

A test that is the first of its backend in a worker process pays that backend's start: imports
(Liger-Kernel's 6 s), a compiler starting (torch.compile's 9-12 s), a kernel image loaded or waited
for. xdist's ``load`` scheduling hands tests out in collection order to whichever worker asks, so at
``-n 15`` every worker runs tests of every backend and pays each start up to 15 times. Its
``loadgroup`` sends all the tests of one ``xdist_group`` as a single unit (units queued largest
first, each handed whole to a worker with two or fewer tests left, the group's name appended to the
test ids): a group is neither spread over a few workers nor split when the run nears its end.

:class:`PooledLoadScheduling` hands tests out as ``load --maxschedchunk 1`` does (each worker holds
the test it runs and the next, taken in collection order), except that a test of a *pool* (a
slow-start group) goes only to that pool's workers: the first ``size`` workers that took one of its
tests. :func:`pool_sizes` sizes each pool to its share of the run's estimated seconds, so that its
workers finish it about when the others finish the rest; then they take what is left. A worker
that finds nothing else joins a pool beyond its size only where the pool's queued seconds per
worker exceed its start (:meth:`PoolDispatch.take`), and otherwise stops once it has run what it
holds. Needs pytest-xdist; a project's
``conftest.py`` installs it (normprops' own does, for its registry hunts)::

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config, log):
        if config.getoption("dist") == "load":
            return PooledLoadScheduling(config, log, plan=my_plan)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from xdist.scheduler import LoadScheduling

__all__ = ["StartCost", "PoolPlan", "pool_sizes", "PoolDispatch", "PooledLoadScheduling"]


@dataclass(frozen=True)
class StartCost:
    """What a pool's tests cost a worker, in seconds: ``first_use`` once, in the first of them it
    runs (imports, a compiler starting), and ``per_test`` for each."""

    first_use: float
    per_test: float

    def __post_init__(self) -> None:
        if not (self.first_use >= 0 and self.per_test > 0):
            raise ValueError(f"a start cost needs first_use >= 0 and per_test > 0 seconds but was "
                             f"first_use={self.first_use!r}, per_test={self.per_test!r}")


@dataclass(frozen=True)
class PoolPlan:
    """For each collected test (in collection order) its pool, or None for a test any worker runs;
    how many workers each pool is meant for; and each pool's :class:`StartCost`."""

    pool_of: tuple[str | None, ...]
    sizes: Mapping[str, int]
    costs: Mapping[str, StartCost]

    def __post_init__(self) -> None:
        pools = {p for p in self.pool_of if p is not None}
        for name in ("sizes", "costs"):
            missing = pools - set(getattr(self, name))
            if missing:
                raise ValueError(f"pools {sorted(missing)} have no entry in {name}")
        small = {p: n for p, n in self.sizes.items() if n < 1}
        if small:
            raise ValueError(f"a pool needs at least 1 worker but sizes were {small}")


def pool_sizes(pool_of: Sequence[str | None], costs: Mapping[str, StartCost], *, other_seconds: float,
               workers: int) -> dict[str, int]:
    """The workers each pool needs for its tests to end by the time all ``workers`` would, were the
    run's estimated seconds spread evenly over them (``other_seconds`` a test for the tests of no
    pool). A pool is staffed as its first tests come up in collection order, not at the start, and
    the estimates are a previous run's, so it is given a tenth of the run in hand; it never gets
    more workers than it has tests, or than there are."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1 but was {workers}")
    counts = Counter(pool_of)
    others = counts.pop(None, 0)
    work = {p: n * costs[p].per_test for p, n in counts.items()}
    total = others * other_seconds + sum(work.values()) + sum(costs[p].first_use for p in counts)
    span = 0.9 * total / workers  # seconds each worker has, with a tenth in hand
    sizes = {}
    for pool, seconds in work.items():
        # What a worker has for the pool's tests once it has paid the start, less one test: the
        # pool's last test may start just before the others end (a JAX hunt takes 7-10 s).
        room = span - costs[pool].first_use - costs[pool].per_test
        need = workers if room <= 0 else math.ceil(seconds / room)
        sizes[pool] = max(1, min(need, workers, counts[pool]))
    return sizes


@dataclass
class PoolDispatch:
    """Which queued test a worker takes next, by :class:`PoolPlan` (no xdist in it: the scheduler
    below drives it, and tests drive it directly). ``members`` records the workers each pool's
    tests went to."""

    plan: PoolPlan
    members: dict[str, set[Hashable]] = field(default_factory=dict)

    def take(self, queue: Sequence[int], worker: Hashable) -> int | None:
        """The position in ``queue`` (test indices, in the order they are handed out) of the test
        ``worker`` runs next, its pool joined; None where there is none for it.

        In order: the first queued test of a pool the worker belongs to (a pool's tests can only go
        to its workers, so they go first); else the first test of no pool or of a pool with room;
        else a test of the pool with the most queued seconds per worker, where those exceed the
        start the worker pays to join it beyond its size: with ``m`` workers and ``R`` seconds
        queued, one more ends the pool sooner when ``R / m > first_use``.
        """
        pool_of, sizes = self.plan.pool_of, self.plan.sizes
        chosen = None
        for position, test in enumerate(queue):
            pool = pool_of[test]
            if pool is not None and worker in self.members.get(pool, ()):
                chosen = position
                break
            if chosen is None and (pool is None or len(self.members.get(pool, ())) < sizes[pool]):
                chosen = position
        if chosen is None:
            chosen = self._beyond_size(queue)
        if chosen is not None and pool_of[queue[chosen]] is not None:
            self.members.setdefault(pool_of[queue[chosen]], set()).add(worker)
        return chosen

    def _beyond_size(self, queue: Sequence[int]) -> int | None:
        queued = Counter(self.plan.pool_of[t] for t in queue)
        best, best_per_worker = None, 0.0
        for pool, n in queued.items():
            cost = self.plan.costs[pool]
            per_worker = n * cost.per_test / max(1, len(self.members.get(pool, ())))
            if per_worker > cost.first_use and per_worker > best_per_worker:
                best, best_per_worker = pool, per_worker
        if best is None:
            return None
        return next(i for i, t in enumerate(queue) if self.plan.pool_of[t] == best)

    def leave(self, worker: Hashable) -> None:
        """``worker`` is gone (finished or crashed): its place in each pool is free again."""
        for workers in self.members.values():
            workers.discard(worker)


class PooledLoadScheduling(LoadScheduling):
    """xdist's ``load`` scheduling, one test at a time, with :class:`PoolDispatch` choosing the
    test. ``plan(collection, workers)`` gives the :class:`PoolPlan` once every worker has
    collected (the collection is the one after ``-k``, ``-m`` and deselection)."""

    def __init__(self, config, log=None, *, plan: Callable[[list[str], int], PoolPlan]) -> None:
        super().__init__(config, log)
        self._make_plan = plan
        self.dispatch: PoolDispatch | None = None
        self.workers_ran: dict[str, set[str]] = {}  # pool -> ids of the workers that ran its tests

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a worker added later: give every worker work
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.node2collection.values())))
        self.pending[:] = range(len(self.collection))
        if not self.collection:
            return
        self.dispatch = PoolDispatch(self._make_plan(self.collection, len(self.nodes)))
        # One test each before anyone's second, so that a short run still reaches every worker.
        for depth in (1, 2):
            for node in self.nodes:
                self._fill(node, depth)
        for node in self.nodes:
            self._stop_if_short(node)

    def check_schedule(self, node, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.dispatch is not None:
            self._fill(node, 2)
        self._stop_if_short(node)

    def _fill(self, node, depth: int) -> None:
        """Give ``node`` tests until it holds ``depth`` (or none is there for it)."""
        assert self.dispatch is not None
        held = self.node2pending[node]
        while len(held) < depth and self.pending:
            position = self.dispatch.take(self.pending, node)
            if position is None:
                return
            test = self.pending.pop(position)
            pool = self.dispatch.plan.pool_of[test]
            if pool is not None:
                self.workers_ran.setdefault(pool, set()).add(node.gateway.id)
            held.append(test)
            node.send_runtest_some([test])

    def _stop_if_short(self, node) -> None:
        # An xdist worker starts a test only once it holds the next one too, or has been told to
        # stop: a worker left with fewer than two (nothing queued is for it, or nothing is queued)
        # stops, after running what it holds. Nothing queued becomes its later (a pool's tests only
        # grow scarcer), unless a crashed worker's tests come back, which the others take.
        if len(self.node2pending[node]) < 2 or not self.pending:
            node.shutdown()

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        self.node2pending[node].remove(item_index)
        self.check_schedule(node, duration=duration)

    def remove_node(self, node) -> str | None:
        if self.dispatch is not None:
            self.dispatch.leave(node)
        held = self.node2pending.pop(node)
        if not held:
            return None
        # The worker crashed running held[0]: the tests it held after that go back in the queue,
        # in collection order, and every worker is asked again (a pool may have room now).
        assert self.collection is not None
        crashed = self.collection[held.pop(0)]
        self.pending[:] = sorted([*self.pending, *held])
        for other in self.nodes:
            self.check_schedule(other)
        return crashed

    def summary(self) -> str:
        """Each pool's planned and actual workers, for the end of the run."""
        if self.dispatch is None:
            return "workers per pool: none (nothing was scheduled)"
        plan = self.dispatch.plan
        counts = Counter(p for p in plan.pool_of if p is not None)
        if not counts:
            return "workers per pool: none (no test of a pool was collected)"
        return "workers per pool (planned): " + ", ".join(
            f"{p} {len(self.workers_ran.get(p, ()))} ({plan.sizes[p]})"
            for p in sorted(counts, key=lambda p: -counts[p] * plan.costs[p].per_test))
