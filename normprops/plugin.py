"""pytest plugin (entry point ``pytest11``): markers, options, Hypothesis profiles, fixtures.

Markers: ``numerics`` (hunts), ``perf`` (bandwidth gates on the GPU). Options are parsed once into a
frozen :class:`PluginOptions` kept in ``config.stash``. Nothing heavy is imported until a hook or
fixture needs it: loading the plugin imports two small modules of normprops, not Hypothesis, the
API, NumPy or a framework; the API is imported by the first test that hunts. The plugin is loaded
in every project where normprops is installed, so it changes nothing of a project's own: not its
tests' markers, nor its processes' threads or GPU. :func:`share_cores` and :func:`pin_worker_gpu`
are for a project's ``conftest.py`` that wants them (normprops' own calls both).

``--normprops-time-budget SECONDS`` bounds the session's hunts: the hunt running when the time is
spent ends with what it found (its result says ``cut_short``), and later tests that hunt skip.

Hypothesis profiles: ``ci`` (Hypothesis's own: derandomized, 100 examples, no database; Hypothesis
loads it by itself when ``CI`` is set), and the plugin's ``dev`` (300 examples) and ``deep`` (10,000
examples; ``hypothesis.target`` steers the search towards the worst err/tol), registered once
Hypothesis is imported (by ``--hypothesis-profile``, or the tests' collection). Select with
``--hypothesis-profile NAME``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from normprops.call_defaults import SessionDefaults, use_session_defaults
from normprops.jsonio import output_dir_problem

__all__ = ["PluginOptions", "register_profiles", "OPTIONS_KEY", "worker_device", "worker_threads",
           "share_cores", "pin_worker_gpu", "HUNT_PROPERTY"]

#: The profiles the plugin adds. ``ci`` is Hypothesis's own (derandomized, 100 examples, no example
#: database, no deadline, the blob printed, ``too_slow`` not checked), loaded by Hypothesis itself
#: when ``CI`` is set.
PROFILES = {
    "dev": dict(max_examples=300, deadline=None),
    "deep": dict(max_examples=10_000, deadline=None),
}


def register_profiles(*, keep_existing: bool = False) -> None:
    """Register :data:`PROFILES` with Hypothesis (importing it). With ``keep_existing``, a profile of
    the same name registered already (a project's own ``dev``) is left as it is."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    # Each profile is built on Hypothesis' own default, not on whichever profile is loaded now:
    # in a CI environment Hypothesis loads its `ci` profile first, and `dev` would inherit its
    # derandomize=True and stop exploring.
    base = settings.get_profile("default")
    for name, kwargs in PROFILES.items():
        if keep_existing:
            try:
                settings.get_profile(name)
                continue
            except InvalidArgument:
                pass
        settings.register_profile(name, parent=base, **kwargs)


def _register_profiles_where_hypothesis_is_used(config: pytest.Config) -> None:
    # Hypothesis is imported by the plugin only for a run that uses it (0.15-0.25 s a process that a
    # project that merely has normprops installed does not pay): before Hypothesis's own plugin
    # loads --hypothesis-profile (this plugin's pytest_configure runs first), or once collection
    # has imported it (the tests' fixtures load profiles by name at run time).
    if "hypothesis" in sys.modules or config.getoption("--hypothesis-profile", None):
        register_profiles(keep_existing=True)


@dataclass(frozen=True)
class PluginOptions:
    policy: str
    oracle: str
    fixtures_dir: Path | None
    backends: tuple[str, ...] | None
    stress_rows: int | None  # GPU stress batch rows; None: the target's own, 0: off
    time_budget: float | None = None  # seconds for this session's hunts (--normprops-time-budget)
    deadline: float | None = None  # time.monotonic() when the budget is spent


OPTIONS_KEY = pytest.StashKey[PluginOptions]()
#: user_properties key under which numerics tests record each hunt's outcome for the matrix.
HUNT_PROPERTY = "normprops_hunt"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normprops", "normprops numerical-robustness hunts")
    group.addoption("--normprops-policy", default="default", choices=("default", "table"),
                    help="tolerance policy for numerics tests (default: condition-aware)")
    group.addoption("--normprops-oracle", default="float64", choices=("float64", "mpmath"),
                    help="reference precision for numerics tests")
    group.addoption("--normprops-fixtures-dir", type=Path, default=None, metavar="DIR",
                    help="save counterexamples found by numerics tests under DIR/<op>/, and try "
                         "those a kernel saved there first when it is hunted again")
    group.addoption("--normprops-backend", action="append", default=None, metavar="NAME",
                    help="hunt only kernels of this backend (repeatable; default: all usable)")
    group.addoption("--normprops-time-budget", type=float, default=None, metavar="SECONDS",
                    help="seconds the session's hunts may take (per xdist worker): a hunt running "
                         "when they are spent ends with what it found, and later hunt tests skip")
    group.addoption("--normprops-stress-rows", type=int, default=None, metavar="N",
                    help="rows of the tiled batch GPU targets are also launched on (0: off; "
                         "default 2048, capped at 262144 elements)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _register_profiles_where_hypothesis_is_used(config)
    config.addinivalue_line("markers", "numerics: hunts kernels for numerical bugs (Hypothesis)")
    config.addinivalue_line("markers", "perf: bandwidth gates on the GPU")
    backends = config.getoption("--normprops-backend")
    if backends:
        from normprops.specs import KERNELS

        known = sorted({k.backend for k in KERNELS})
        unknown = [b for b in backends if b not in known]
        if unknown:
            raise pytest.UsageError(f"--normprops-backend {', '.join(unknown)}: no such backend; "
                                    f"choose from {', '.join(known)}")
    fixtures_dir = config.getoption("--normprops-fixtures-dir")
    problem = None if fixtures_dir is None else output_dir_problem(fixtures_dir)
    if problem:
        raise pytest.UsageError(f"--normprops-fixtures-dir {fixtures_dir}{problem} (fixtures are "
                                f"saved under DIR/<op>/)")
    budget = config.getoption("--normprops-time-budget")
    if budget is not None and not 0 < budget < math.inf:
        raise pytest.UsageError(f"--normprops-time-budget must be a positive number of seconds but "
                                f"was {budget:g}")
    config.stash[OPTIONS_KEY] = PluginOptions(
        policy=config.getoption("--normprops-policy"),
        oracle=config.getoption("--normprops-oracle"),
        fixtures_dir=fixtures_dir,
        backends=tuple(backends) if backends else None,
        stress_rows=config.getoption("--normprops-stress-rows"),
        time_budget=budget,
    )
    if config.stash[OPTIONS_KEY].stress_rows is not None and config.stash[OPTIONS_KEY].stress_rows < 0:
        raise pytest.UsageError("--normprops-stress-rows must be 0 (off) or a positive row count")
    _share_options(config.stash[OPTIONS_KEY])


def _share_options(options: PluginOptions) -> None:
    """The same options reach a user's own tests, which call hunt_kernel and assert_robust; a hunt
    that would start after the time budget is spent skips its test. Set where :mod:`normprops.api`
    reads them without importing it: the API is imported by the first test that hunts."""

    def spent(why: str) -> None:
        __tracebackhide__ = True  # the skip is reported at the test that hunted
        budget = options.time_budget
        pytest.skip(why if budget is None else f"{why} (--normprops-time-budget {budget:g})")

    use_session_defaults(SessionDefaults(fixtures_dir=options.fixtures_dir, policy=options.policy,
                                         oracle=options.oracle, deadline=options.deadline,
                                         when_spent=spent))


def _uses_normprops(module: object) -> bool:
    """Whether a test module's globals hold normprops or one of its names."""
    for value in vars(module).values() if module is not None else ():
        name = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
        if isinstance(name, str) and (name == "normprops" or name.startswith("normprops.")):
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """The time budget starts with the first test, not with collection (which imports the
    frameworks the tests use). Where a collected test module uses normprops, its API is imported
    here, before any test runs: a timeout's alarm (pytest-timeout's signal method) that fired inside
    a first, lazy import would leave Hypothesis half-imported for every later test."""
    if any(_uses_normprops(getattr(item, "module", None)) for item in session.items):
        import normprops.api  # noqa: F401
    _register_profiles_where_hypothesis_is_used(session.config)
    options = session.config.stash[OPTIONS_KEY]
    if options.time_budget is not None:
        options = replace(options, deadline=time.monotonic() + options.time_budget)
        session.config.stash[OPTIONS_KEY] = options
        _share_options(options)


def pytest_unconfigure(config: pytest.Config) -> None:
    use_session_defaults(SessionDefaults())


def worker_device(worker_id: str, device_count: int) -> int | None:
    """The GPU an xdist worker uses: ``gw<n>`` takes device ``n % device_count`` (one process per
    GPU when ``-n`` equals the GPU count). None outside xdist or without GPUs."""
    if device_count < 1 or not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        return None
    return int(worker_id[2:]) % device_count


def worker_threads(workers: int, cpus: int) -> int:
    """Threads each of ``workers`` processes may use on ``cpus`` cores (at least 1)."""
    return max(1, cpus // max(1, workers))


def share_cores(workers: int) -> None:
    """Keep xdist workers' thread pools to their share of the cores: a torch CPU kernel otherwise
    starts one OpenMP thread per core in every worker, and -n 15 on 16 cores runs 240 threads that
    spin against each other. A thread count the user set in the environment is kept."""
    threads = str(worker_threads(workers, os.cpu_count() or 1))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    torch = sys.modules.get("torch")
    if torch is not None:  # already imported (and its pool sized): resize it
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pin_worker_gpu(worker_id: str) -> None:
    """Make xdist worker ``worker_id``'s CuPy device :func:`worker_device`'s (where there are GPUs
    to choose from)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy or no GPU: nothing to pin
        return
    device = worker_device(worker_id, count)
    if device is not None and count > 1:
        cupy.cuda.runtime.setDevice(device)


@pytest.fixture
def normprops_options(request: pytest.FixtureRequest) -> PluginOptions:
    return request.config.stash[OPTIONS_KEY]


@pytest.fixture
def hunt_config(normprops_options: PluginOptions):
    """A :class:`normprops.hunt.HuntConfig` from the options and the active Hypothesis profile."""
    from normprops.engine import profile_config

    deadline = normprops_options.deadline
    if deadline is not None and time.monotonic() >= deadline:
        pytest.skip(f"the normprops time budget of {normprops_options.time_budget:g} s was spent")
    return profile_config(policy=normprops_options.policy, oracle=normprops_options.oracle,
                          deadline=deadline)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The robustness matrix of the hunts this session ran, merged over xdist workers (each test
    report carries its hunt's outcome in ``user_properties``)."""
    cells: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
    devices: dict[int, int] = {}
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", None) != "call":
                continue
            for key, value in getattr(report, "user_properties", ()):
                if key == HUNT_PROPERTY:
                    table = cells.setdefault((value["backend"], value["op"]), {})
                    table[(value["kernel"], value["family"])] = value["cell"]
                    if value.get("device") is not None:
                        devices[value["device"]] = devices.get(value["device"], 0) + 1
    if not cells:
        return
    from normprops.report import Cell, matrix_legend, render_matrix

    matrix = [Cell(f"{op} ({backend})", kernel, family, text)
              for (backend, op), table in cells.items() for (kernel, family), text in table.items()]
    terminalreporter.section("normprops robustness matrix")
    for line in render_matrix(matrix, sort=True).splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(matrix_legend(matrix))
    if devices:
        terminalreporter.write_line("GPU hunts per device: " + ", ".join(
            f"cuda:{d} {n}" for d, n in sorted(devices.items())))
