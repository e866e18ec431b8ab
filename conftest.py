"""Root conftest: the normprops plugin itself is loaded through its ``pytest11`` entry point (install
the package first: ``pip install -e '.[test]'``); here only what the project's own tests need.

``calibration`` tests (hunts of 500 examples per family of every example design, about half an
hour on 2 cores) are deselected unless ``--calibration`` is given:

    python -m pytest --calibration -m calibration -n 2

``perf`` tests (timings) are deselected unless ``-m`` names them (``python -m pytest -m perf``):
alongside the rest of the suite, or under xdist, other tests load the machine they time.

Under ``-n`` without ``--dist``, tests are handed out by
:class:`normprops.xdist_pools.PooledLoadScheduling`: the registry hunts of each slow-start backend
(``POOL_COSTS``) run on a few workers sized to their share of the run, and the run ends with a line
of each pool's workers, planned and actual. Each test's junit XML record names its worker (property
``xdist_worker``; ``tools/suite_by_backend.py`` counts them).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

import pytest

from normprops.plugin import pin_worker_gpu, share_cores

pytest_plugins = ("pytester",)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--calibration", action="store_true", default=False,
                     help="also run the tests marked calibration (long hunts; deselected by default)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "calibration: hunts of at least 500 examples per family of "
                                       "the example designs; deselected unless --calibration")
    config.addinivalue_line("markers", "gpu: needs a usable CUDA GPU; skipped with the reason otherwise")
    # Each xdist worker takes GPU n % count and its share of the cores: -n 15 on 16 cores would
    # otherwise start an OpenMP thread per core in every worker (torch's CPU kernels), 240 in all.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        pin_worker_gpu(worker)
        share_cores(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    # pytest-xdist's load scheduling hands each worker a block of consecutive tests (11 at -n 15
    # over the numerics suite): a worker that drew a block of JAX hunts (25-50 s each) ran them one
    # after another while the others sat idle. Two tests at a time, taken in collection order
    # (tests/test_numerics.py collects the slowest first), keeps every worker busy to the end. (For
    # --dist load given by name; without --dist, the pooled scheduling below does the same.)
    if config.pluginmanager.hasplugin("xdist") and config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1


# What a test of each slow-start backend's registry hunts costs an xdist worker at the ci profile
# on the H200 with every cache warm (docs/registry.md, "What 150 s would take"): its first in a
# worker pays the start (torch.compile's Dynamo and Inductor 9-12 s, Liger's imports 6.1 s, JAX's
# and Flax's imports and XLA client about 1 s, a prod.cu image loaded), and each test the backend's
# mean there (5.2, 2.2, 7.1, 10.5 and 1.6 s a test) less its part of the 15 workers' starts. QuACK
# was not installed in those runs: its 17.8 s a test at the dev profile, over 3 (a third of the
# examples). A pool whose library is not installed is no pool (its tests skip at once). The other
# tests took 1.3 s a test.
POOL_COSTS = {  # pool: (the module it needs, first use s, s a test)
    "torch-compile": ("torch", 10.0, 3.3),
    "liger": ("liger_kernel", 6.1, 1.2),
    "jax": ("jax", 1.0, 6.7),
    "flax": ("flax", 1.0, 10.0),
    "quack": ("quack", 10.0, 6.0),
    # The first cuda-prod tests collected: where the kernel cache is empty they wait for prod.cu's
    # compile (80-100 s, started beside the run by tools/numerics_on_gpu.sh).
    "cuda-prod 16-bit": ("cupy", 1.0, 1.5),
}
OTHER_TEST_SECONDS = 1.3


def registry_pool(nodeid: str, labels: dict) -> str | None:
    """The pool of a registry hunt of tests/test_numerics.py (its id: ``[backend-name-family]``,
    ``labels`` the registry by ``backend-name``), None for any other test."""
    if "test_numerics.py::" not in nodeid or not nodeid.endswith("]"):
        return None
    spec = labels.get(nodeid[nodeid.index("[") + 1:-1].rsplit("-", 1)[0])
    if spec is None:
        return None
    if spec.backend == "cuda-prod":
        return "cuda-prod 16-bit" if spec.dtype != "float32" else None
    return spec.backend if spec.backend in POOL_COSTS else None


def registry_pools(collection: list[str], workers: int, *, labels: dict):
    """The :class:`normprops.xdist_pools.PoolPlan` of a collection (node ids, in order) at ``workers``."""
    from normprops.xdist_pools import PoolPlan, StartCost, pool_sizes

    installed = {pool for pool, (module, _, _) in POOL_COSTS.items()
                 if importlib.util.find_spec(module) is not None}
    pool_of = tuple(p if p in installed else None for p in (registry_pool(n, labels) for n in collection))
    costs = {pool: StartCost(first_use, per_test) for pool, (_, first_use, per_test) in POOL_COSTS.items()}
    sizes = pool_sizes(pool_of, costs, other_seconds=OTHER_TEST_SECONDS, workers=workers)
    return PoolPlan(pool_of, sizes, costs)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Without --dist (or -d) given, xdist's ``load`` becomes the pooled scheduling; any --dist
    given by name is kept."""
    given = config.known_args_namespace
    if config.getoption("dist") != "load" or given.dist != "no" or given.distload:
        return None
    # The registry is read here, while the workers start and collect, not once they have.
    from normprops.specs import KERNELS
    from normprops.xdist_pools import PooledLoadScheduling

    labels = {f"{k.backend}-{k.name}": k for k in KERNELS}
    return PooledLoadScheduling(config, log, plan=functools.partial(registry_pools, labels=labels))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if "normprops.xdist_pools" not in sys.modules:  # not the pooled scheduling
        return
    from normprops.xdist_pools import PooledLoadScheduling

    scheduler = getattr(config.pluginmanager.get_plugin("dsession"), "sched", None)
    if isinstance(scheduler, PooledLoadScheduling):
        terminalreporter.write_line(scheduler.summary())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:  # skipped with the reason where no GPU is usable, reported at the test itself
        from normprops.specs import backend_status

        ok, why = backend_status("cuda")
        if not ok:
            for item in gpu:
                item.add_marker(pytest.mark.skip(reason=f"needs a usable CUDA GPU: {why}"))
    # Deselected unless asked for: calibration by --calibration, perf (timings) by an -m that names it.
    asked = {"calibration": config.getoption("--calibration"),
             "perf": "perf" in (config.getoption("markexpr") or "")}
    keep = [item for item in items
            if all(wanted or item.get_closest_marker(name) is None for name, wanted in asked.items())]
    if len(keep) < len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # in the junit XML: which worker ran each test
        for item in items:
            item.user_properties.append(("xdist_worker", worker))
