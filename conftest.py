"""Root conftest: the normprops plugin itself is loaded through its ``pytest11`` entry point (install
the package first: ``pip install -e '.[test]'``); here only what the project's own tests need.

``calibration`` tests (hunts of 500 examples per family of every example design, about half an
hour on 2 cores) are deselected unless ``--calibration`` is given:

    python -m pytest --calibration -m calibration -n 2
"""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--calibration", action="store_true", default=False,
                     help="also run the tests marked calibration (long hunts; deselected by default)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "calibration: hunts of at least 500 examples per family of "
                                       "the example designs; deselected unless --calibration")
    # pytest-xdist's load scheduling hands each worker a block of consecutive tests (11 at -n 15
    # over the numerics suite): a worker that drew a block of JAX hunts (25-50 s each) ran them one
    # after another while the others sat idle. Two tests at a time, taken in collection order
    # (tests/test_numerics.py collects the slowest first), keeps every worker busy to the end.
    if config.pluginmanager.hasplugin("xdist") and config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--calibration"):
        return
    deselected = [item for item in items if item.get_closest_marker("calibration")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("calibration")]
