"""The pooled xdist scheduling (normprops.xdist_pools) and this suite's pools (the root conftest):
each slow-start backend's registry hunts on the few workers sized for them, every test run once."""

from __future__ import annotations

import importlib.util
import re
import statistics
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from normprops.specs import KERNELS
from normprops.xdist_pools import PoolDispatch, PooledLoadScheduling, PoolPlan, StartCost, pool_sizes

ROOT_CONFTEST = Path(__file__).parents[1] / "conftest.py"


def _plan(pool_of, sizes, first_use=10.0, per_test=1.0) -> PoolPlan:
    pools = {p for p in pool_of if p is not None}
    return PoolPlan(tuple(pool_of), sizes, {p: StartCost(first_use, per_test) for p in pools})


def test_a_pools_tests_go_to_its_workers_first_and_to_no_other_while_it_is_full() -> None:
    dispatch = PoolDispatch(_plan(["slow", "slow", "slow", None, None], {"slow": 1}))
    queue = [0, 1, 2, 3, 4]
    assert dispatch.take(queue, "gw0") == 0  # the first test: gw0 joins the pool
    queue.pop(0)
    assert dispatch.take(queue, "gw1") == 2  # the pool is full: gw1 takes test 3
    queue.pop(2)
    assert dispatch.take(queue, "gw0") == 0  # its pool's test before test 4
    assert dispatch.members == {"slow": {"gw0"}}


def test_a_worker_joins_a_full_pool_only_where_that_pays_for_its_start() -> None:
    # 3 queued tests of 1 s for the pool's one worker: 3 s, less than the 10 s a newcomer pays.
    cheap = PoolDispatch(_plan(["slow"] * 4, {"slow": 1}))
    assert cheap.take([0, 1, 2, 3], "gw0") == 0
    assert cheap.take([1, 2, 3], "gw1") is None
    # 30 queued tests of 1 s: one more worker ends the pool sooner.
    dear = PoolDispatch(_plan(["slow"] * 31, {"slow": 1}))
    assert dear.take(list(range(31)), "gw0") == 0
    assert dear.take(list(range(1, 31)), "gw1") == 0
    assert dear.members == {"slow": {"gw0", "gw1"}}


def test_a_worker_that_left_frees_its_place() -> None:
    dispatch = PoolDispatch(_plan(["slow"] * 3, {"slow": 1}))
    assert dispatch.take([0, 1, 2], "gw0") == 0
    assert dispatch.take([1, 2], "gw1") is None
    dispatch.leave("gw0")
    assert dispatch.take([1, 2], "gw1") == 0


class _Worker:
    """Stands in for xdist's WorkerController: what the scheduler sends it and whether it was told
    to stop."""

    def __init__(self, n: int) -> None:
        self.gateway = SimpleNamespace(id=f"gw{n}")
        self.shutting_down = False

    def send_runtest_some(self, indices) -> None:
        pass

    def shutdown(self) -> None:
        self.shutting_down = True


class _Config:
    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name: str):
        assert name == "tx"
        return ["popen"] * self.workers

    def getoption(self, name: str):
        return None


def _run(plan: PoolPlan, seconds: list[float], workers: int) -> dict[int, str]:
    """The pooled scheduling driven as xdist drives it, each worker running its tests in turn and,
    as an xdist worker does, starting one only once it holds the next too or was told to stop.
    Returns the worker each test ran on."""
    scheduler = PooledLoadScheduling(_Config(workers), plan=lambda collection, n: plan)
    nodes = [_Worker(n) for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, [f"t{i}" for i in range(len(seconds))])
    scheduler.schedule()
    free_at = {node: 0.0 for node in nodes}
    ran: dict[int, str] = {}
    while True:
        running = [n for n in nodes if scheduler.node2pending[n]
                   and (len(scheduler.node2pending[n]) >= 2 or n.shutting_down)]
        if not running:
            break
        node = min(running, key=lambda n: free_at[n] + seconds[scheduler.node2pending[n][0]])
        test = scheduler.node2pending[node][0]
        free_at[node] += seconds[test]
        ran[test] = node.gateway.id
        scheduler.mark_test_complete(node, test)
    held = {n.gateway.id: scheduler.node2pending[n] for n in nodes if scheduler.node2pending[n]}
    assert not held, f"tests held by workers that cannot start them: {held}"
    return ran


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_every_test_runs_once_and_a_pool_stays_on_its_workers(workers: int) -> None:
    # A pool of 12 tests for 2 workers, then 30 tests of no pool: the pool's start (100 s) never
    # pays for a third worker, and no worker is left holding a test it cannot start.
    pool_of = ["slow"] * 12 + [None] * 30
    plan = _plan(pool_of, {"slow": min(2, workers)}, first_use=100.0)
    ran = _run(plan, [1.0] * len(pool_of), workers)
    assert sorted(ran) == list(range(len(pool_of)))
    assert len({ran[t] for t in range(12)}) == min(2, workers)
    assert len(set(ran.values())) == workers


def test_workers_that_find_only_a_full_pools_tests_stop_and_the_pool_finishes() -> None:
    pool_of = [None] * 3 + ["slow"] * 10
    ran = _run(_plan(pool_of, {"slow": 1}, first_use=100.0), [1.0] * len(pool_of), 4)
    assert sorted(ran) == list(range(len(pool_of)))
    assert len({ran[t] for t in range(3, 13)}) == 1


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


def _root_conftest():
    spec = importlib.util.spec_from_file_location("normprops_root_conftest", ROOT_CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_registry_hunt_of_a_slow_start_backend_has_its_pool() -> None:
    from test_numerics import BUGS, CLAIMS

    conftest = _root_conftest()
    labels = {f"{k.backend}-{k.name}": k for k in KERNELS}
    for param in [*CLAIMS, *BUGS]:
        spec = param.values[0]
        pool = conftest.registry_pool(f"tests/test_numerics.py::test_x[{param.id}]", labels)
        expected = (spec.backend if spec.backend in ("torch-compile", "liger", "jax", "flax", "quack")
                    else "cuda-prod 16-bit" if spec.backend == "cuda-prod" and spec.dtype != "float32"
                    else None)
        assert pool == expected, param.id
    other = "tests/test_other.py::test_x[liger-liger.softmax-f32-ordinary]"
    assert conftest.registry_pool(other, labels) is None


def test_every_timed_hunt_is_one_the_suite_collects() -> None:
    """tests/numerics_seconds.json orders the hunts; an id it names that no longer exists (an entry
    or family renamed) would leave its successor at the median, wherever it falls: refresh it."""
    from test_numerics import CLAIMS, SECONDS

    collected = {param.id for param in CLAIMS}
    stale = sorted(set(SECONDS) - collected)
    assert not stale, (f"tests/numerics_seconds.json names {len(stale)} hunts not collected, e.g. "
                       f"{stale[:3]}: refresh it with tools/suite_by_backend.py --test-seconds JUNIT.xml ...")


def test_the_longest_timed_hunts_are_handed_out_first() -> None:
    """Among the hunts of no slow-start backend (the last and largest share of the collection), the
    timed ones come longest first: one of 20 s handed out last ends the run 20 s after the rest."""
    from test_numerics import CLAIMS, SECONDS, SLOW_BACKENDS

    rest = [SECONDS[p.id] for p in CLAIMS
            if p.values[0].backend not in SLOW_BACKENDS and p.id in SECONDS]
    assert len(rest) > 100 and rest[0] == max(rest) and rest[0] > 5 * statistics.median(rest), rest[:5]
    assert all(a >= b for a, b in zip(rest, rest[1:])), "not longest first"


def _workers_by_test(junit: Path) -> dict[str, str]:
    return {case.get("name"): prop.get("value") for case in ET.parse(junit).getroot().iter("testcase")
            for prop in case.iter("property") if prop.get("name") == "xdist_worker"}


def test_a_run_keeps_a_pools_tests_on_its_planned_workers(pytester: pytest.Pytester) -> None:
    """At -n 3, this suite's conftest runs the Liger hunts (a stand-in ``liger_kernel`` makes the
    library found) on the one worker planned for them, the others on every worker; xdist's own
    ``load``, asked for by name, spreads them over all three."""
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(liger_kernel="")
    liger = [f"liger-{k.name}-{family}" for k in KERNELS if k.backend == "liger"
             for family in ("ordinary", "tiny")][:8]
    numpy = [f"numpy-{k.name}-{family}" for k in KERNELS if k.backend == "numpy" for family in
             ("ordinary", "tiny", "huge", "constant", "ragged", "nonfinite", "large_mean", "masked")]
    pytester.makepyfile(test_numerics=textwrap.dedent(f"""
        import time
        import pytest

        @pytest.mark.parametrize("case", {liger + numpy!r})
        def test_hunt(case):
            time.sleep(0.05)
    """))
    result = pytester.runpytest_subprocess("-n", "3", "-p", "no:cacheprovider", "--junitxml=pooled.xml")
    result.assert_outcomes(passed=len(liger) + len(numpy))
    planned = re.search(r"workers per pool \(planned\): liger (\d+) \((\d+)\)", result.stdout.str())
    assert planned is not None, result.stdout.str()
    ran = _workers_by_test(pytester.path / "pooled.xml")
    assert len(ran) == len(liger) + len(numpy)
    liger_workers = {w for name, w in ran.items() if "[liger-" in name}
    assert len(liger_workers) == int(planned[1]) == int(planned[2]) == 1
    assert set(ran.values()) == {"gw0", "gw1", "gw2"}  # every worker had work

    result = pytester.runpytest_subprocess("-n", "3", "-p", "no:cacheprovider", "--dist", "load",
                                           "--junitxml=load.xml")
    result.assert_outcomes(passed=len(liger) + len(numpy))
    assert "workers per pool" not in result.stdout.str()
    spread = {w for name, w in _workers_by_test(pytester.path / "load.xml").items() if "[liger-" in name}
    assert len(spread) == 3
