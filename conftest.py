"""Root conftest: the normprops plugin itself is loaded through its ``pytest11`` entry point (install
the package first: ``pip install -e '.[test]'``); here only what the project's own tests need.

``calibration`` tests (hunts of 500 examples per family of every example design, about half an
hour on 2 cores) are deselected unless ``--calibration`` is given:

    python -m pytest --calibration -m calibration -n 2

``perf`` tests (timings) are deselected unless ``-m`` names them (``python -m pytest -m perf``):
alongside the rest of the suite, or under xdist, other tests load the machine they time.
"""

from __future__ import annotations

import os

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
    # (tests/test_numerics.py collects the slowest first), keeps every worker busy to the end.
    if config.pluginmanager.hasplugin("xdist") and config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1


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
