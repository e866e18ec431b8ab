"""The pytest plugin, exercised in a throwaway pytest run (pytester)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normprops.specs import backend_status


def test_markers_are_registered_under_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.numerics
        def test_a(): pass

        @pytest.mark.perf
        def test_b(): pass
    """)
    result = pytester.runpytest("--strict-markers", "-m", "numerics")
    result.assert_outcomes(passed=1, deselected=1)


def test_the_plugin_leaves_a_projects_own_markers_threads_and_gpu_alone(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin loads in every project where normprops is installed: a project's own ``gpu``
    tests were skipped by normprops' rule (no CuPy: skipped, torch or not), and under xdist every
    worker's OpenMP and torch threads were cut to its share of the cores."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # this suite's own worker set it
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    pytester.makeini("[pytest]\nmarkers =\n    gpu: the project's own\n")
    pytester.makepyfile("""
        import os
        import pytest

        @pytest.mark.gpu
        def test_mine():
            assert "OMP_NUM_THREADS" not in os.environ and "MKL_NUM_THREADS" not in os.environ
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=1)


def test_this_suites_gpu_tests_skip_with_the_reason_where_no_gpu_is_usable(
        pytester: pytest.Pytester) -> None:
    # The rule lives in the project's own conftest.py, for its own tests.
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu(): pass
    """)
    result = pytester.runpytest("-rs", "-vv", "--strict-markers")
    usable, why = backend_status("cuda")
    if usable:  # a GPU machine runs it
        result.assert_outcomes(passed=1)
        return
    result.assert_outcomes(skipped=1)
    assert f"needs a usable CUDA GPU: {why}" in result.stdout.str()


def test_options_reach_the_hunt_config(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_config(hunt_config, normprops_options):
            assert normprops_options.policy == "table"
            assert hunt_config.policy == "table"
            assert hunt_config.max_examples == 10_000
            assert str(normprops_options.fixtures_dir).endswith("fx")
    """)
    # A subprocess: numpy cannot be imported twice into one process.
    result = pytester.runpytest_subprocess("--normprops-policy", "table", "--hypothesis-profile",
                                           "deep", "--normprops-fixtures-dir", "fx")
    result.assert_outcomes(passed=1)


def test_options_reach_a_users_own_assert_robust(pytester: pytest.Pytester) -> None:
    """A user's test calls assert_robust, not the hunt_config fixture: the run's fixtures folder,
    policy and oracle reach it all the same."""
    pytester.makepyfile(kernels="""
        import numpy as np

        def softmax_noshift(x):
            e = np.exp(x)
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    """)
    pytester.makepyfile(test_mine="""
        import pytest
        import normprops
        from kernels import softmax_noshift

        def test_noshift():
            report = normprops.hunt_kernel(softmax_noshift, op="softmax", families=["overflow_logits"],
                                           max_examples=20, seed=0)
            assert not report.passed
            assert (report.settings["policy"], report.settings["oracle"]) == ("table", "mpmath")
            with pytest.raises(AssertionError, match="replay: .* --fixtures-dir fx"):
                normprops.assert_robust(softmax_noshift, op="softmax", families=["overflow_logits"],
                                        max_examples=20, seed=0)
    """)
    result = pytester.runpytest_subprocess("--normprops-fixtures-dir", "fx", "--normprops-policy",
                                           "table", "--normprops-oracle", "mpmath")
    result.assert_outcomes(passed=1)
    assert list((pytester.path / "fx" / "softmax").glob("*.json"))


@pytest.mark.parametrize("profile, examples", [("dev", 300), ("deep", 10_000)])
def test_the_plugins_profiles_load_by_name(pytester: pytest.Pytester, profile: str, examples: int) -> None:
    # Registered before Hypothesis's own plugin loads the named profile, in a run that had not
    # imported Hypothesis yet.
    pytester.makepyfile(f"""
        def test_config(hunt_config):
            assert not hunt_config.derandomize and hunt_config.max_examples == {examples}
    """)
    pytester.runpytest_subprocess("--hypothesis-profile", profile).assert_outcomes(passed=1)


def test_a_projects_own_dev_profile_is_kept(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        from hypothesis import settings

        settings.register_profile("dev", max_examples=7)
    """)
    pytester.makepyfile("""
        from hypothesis import settings

        def test_config(hunt_config):
            assert hunt_config.max_examples == 7
            settings.load_profile("deep")  # the plugin's, registered beside the project's own
            assert settings().max_examples == 10_000
    """)
    pytester.runpytest_subprocess("--hypothesis-profile", "dev").assert_outcomes(passed=1)


def test_ci_profile_is_derandomized(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_config(hunt_config):
            assert hunt_config.derandomize and hunt_config.max_examples == 100
    """)
    pytester.runpytest_subprocess("--hypothesis-profile", "ci").assert_outcomes(passed=1)


def test_bad_option_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--normprops-policy", "loose")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid choice: 'loose'*"])
    result = pytester.runpytest("--normprops-stress-rows", "-3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--normprops-stress-rows must be 0 (off) or a positive row count*"])
    result = pytester.runpytest("--normprops-backend", "nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--normprops-backend nosuch: no such backend; choose from *numpy*"])
    pytester.makefile(".txt", notes="")
    result = pytester.runpytest("--normprops-fixtures-dir", "notes.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--normprops-fixtures-dir notes.txt is a file; name a directory*"])
    result = pytester.runpytest("--normprops-fixtures-dir", "notes.txt/fx")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--normprops-fixtures-dir notes.txt/fx: *notes.txt is a file, not a "
                                 "directory*"])


def test_a_time_budget_cuts_the_running_hunt_and_skips_the_later_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import time
        from normprops.hunt import hunt
        from normprops.launch import target_from_spec
        from normprops.specs import KERNELS

        def test_a_hunt_cut_short(hunt_config):
            spec = next(k for k in KERNELS if (k.backend, k.name) == ("numpy", "softmaxRowSafe"))
            result = hunt(target_from_spec(spec), family="ordinary",
                          config=hunt_config.__class__(max_examples=10**6, deadline=hunt_config.deadline))
            assert result.cut_short and result.passed and 0 < result.examples < 10**6

        def test_later(hunt_config):
            raise AssertionError("a hunt after the budget must not run")

        def test_a_users_later_hunt():
            import normprops
            from normprops.examples.planted import softmax_no_shift

            normprops.assert_robust(softmax_no_shift, op="softmax", families=["overflow_logits"])
            raise AssertionError("a hunt after the budget must not run, nor pass")
    """)
    # The budget runs from the first test, after collection (which imports the frameworks).
    result = pytester.runpytest_subprocess("--normprops-time-budget", "3", "-p", "no:randomly", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    # Each skip is reported at the test, not at the line of normprops that skipped it.
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_a_time_budget_cuts*.py:*: the normprops time "
                                 "budget of 3 s was spent*",
                                 "SKIPPED [[]1[]] test_a_time_budget_cuts*.py:*: the session's normprops "
                                 "time budget was spent before this hunt (--normprops-time-budget 3)*"])


def test_a_time_budget_must_be_positive(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--normprops-time-budget", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--normprops-time-budget must be a positive number of seconds*"])


@pytest.mark.parametrize("worker, count, device", [
    ("gw0", 2, 0), ("gw1", 2, 1), ("gw2", 2, 0), ("gw5", 4, 1), ("gw0", 0, None), ("master", 2, None),
])
def test_xdist_workers_are_pinned_one_per_gpu(worker: str, count: int, device) -> None:
    from normprops.plugin import worker_device

    assert worker_device(worker, count) == device


@pytest.mark.parametrize("workers, cpus, threads", [(15, 16, 1), (2, 16, 8), (4, 2, 1), (1, 8, 8), (0, 4, 4)])
def test_xdist_workers_share_the_cores(workers: int, cpus: int, threads: int) -> None:
    from normprops.plugin import worker_threads

    assert worker_threads(workers, cpus) == threads


def test_a_worker_keeps_a_thread_count_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from normprops.plugin import share_cores

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    share_cores(10_000)
    import os

    assert os.environ["OMP_NUM_THREADS"] == "3" and os.environ["MKL_NUM_THREADS"] == "1"


def test_a_timeout_plugins_alarm_ends_the_test_and_the_hunt_at_once(pytester: pytest.Pytester) -> None:
    """pytest-timeout's alarm ends a test with ``pytest.fail`` from a signal handler, inside the
    kernel's call, whether it is due before the hunt's own call timeout or after it: Hypothesis
    must not take that ``Failed`` for a failing example, nor the call timeout clear the alarm."""
    pytester.makepyfile("""
        import signal
        import time

        import numpy as np
        import pytest

        import normprops

        def slow_softmax(x):
            time.sleep(0.2)
            e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

        @pytest.fixture
        def alarm():
            # What pytest-timeout's signal method does.
            def fire(signum, frame):
                pytest.fail("Timeout (the alarm)")
            signal.signal(signal.SIGALRM, fire)
            yield lambda seconds: signal.setitimer(signal.ITIMER_REAL, seconds)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

        def test_the_alarm_fires_inside_the_hunt(alarm):
            alarm(1.0)
            normprops.assert_robust(slow_softmax, op="softmax", max_examples=500, call_timeout=30)

        def test_the_alarm_fires_after_the_hunt(alarm):
            # Due after each call's own timeout: put back after every call, it is still pending when
            # the hunt returns, and fires in its time.
            alarm(3.0)
            normprops.assert_robust(slow_softmax, op="softmax", families=["ordinary"], max_examples=2,
                                    call_timeout=1)
            left, _ = signal.getitimer(signal.ITIMER_REAL)
            assert left > 0, "the hunt cleared the alarm"
            time.sleep(10)
    """)
    # A hunt that ignored the alarm would run 500 examples of 0.2 s: the timeout ends such a run.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", timeout=120)
    result.assert_outcomes(failed=2)
    # Each test's own failure is the alarm's (the summary's lines are cut to the terminal's width).
    errors = [line for line in result.stdout.lines if line.startswith("E   ")]
    assert [line.split(maxsplit=1)[1] for line in errors] == ["Failed: Timeout (the alarm)"] * 2, errors


def test_a_call_timeout_leaves_an_alarm_it_cannot_put_back_alone() -> None:
    """An alarm pending under the default or ignored disposition (set from C, or by a caller that
    ignores it) is not re-armed under a handler the call timeout installed, nor cleared."""
    import signal

    from normprops.timeouts import call_with_timeout

    previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert call_with_timeout(lambda: 7, (), 1.0) == 7
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 29.0 < left <= 30.0 and signal.getsignal(signal.SIGALRM) is signal.SIG_IGN
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_call_timeout_puts_back_an_alarm_due_after_it() -> None:
    import signal

    from normprops.timeouts import call_with_timeout

    def handler(signum, frame):
        raise AssertionError("not due yet")

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert call_with_timeout(lambda: 7, (), 1.0) == 7
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 29.0 < left <= 30.0 and signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)



def test_a_run_that_hunts_nothing_imports_neither_the_api_nor_hypothesis(pytester: pytest.Pytester) -> None:
    """The plugin loads in every pytest run where normprops is installed: its hooks read the options
    and set the calls' defaults without importing :mod:`normprops.api` (and through it the hunt,
    Hypothesis, NumPy and the strategies); the first test that hunts imports it."""
    pytester.makepyfile("""
        import sys

        def test_nothing_heavy_loaded():
            loaded = {"normprops.api", "normprops.hunt", "hypothesis", "numpy"} & set(sys.modules)
            assert not loaded, loaded

        def test_a_hunt_loads_the_api():
            import normprops
            from normprops.examples.planted import softmax_no_shift

            normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["ordinary"], max_examples=5)
            assert "normprops.api" in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--normprops-policy", "table")
    result.assert_outcomes(passed=2)


#: Seconds of ``import MODULE`` in a fresh interpreter that has imported pytest, as pytest has when
#: it loads its plugins; the median of 5.
_IMPORT_SECONDS = """
import statistics, subprocess, sys
code = "import time, pytest; t = time.perf_counter(); import {}; print(time.perf_counter() - t)"
runs = [float(subprocess.run([sys.executable, "-c", code.format(sys.argv[1])], capture_output=True,
                             text=True, check=True).stdout) for _ in range(5)]
print(statistics.median(runs))
"""


def _import_seconds(module: str) -> float:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _IMPORT_SECONDS, module], capture_output=True,
                          text=True, check=True)
    return float(done.stdout)


@pytest.mark.perf
def test_loading_the_plugin_costs_little_more_than_importing_numpy() -> None:
    """Loading the plugin (two small modules; Hypothesis and the API wait for their first use) costs
    at most 0.1 s more than importing NumPy; it cost 1.5 s more when it imported the API to set its
    defaults."""
    plugin, numpy = _import_seconds("normprops.plugin"), _import_seconds("numpy")
    assert plugin < numpy + 0.1, f"normprops.plugin {plugin:.3f} s, numpy {numpy:.3f} s"


@pytest.mark.parametrize("op, profile, given, hunted", [
    pytest.param("attention", "ci", 100, 30, id="attention-ci"),
    pytest.param("attention", "dev", 300, 300, id="attention-dev"),
    pytest.param("attention", "ci", 20, 20, id="attention-ci-never-more"),
    pytest.param("softmax", "ci", 100, 100, id="no-gate-depth-declared"),
    pytest.param("cross_entropy", "ci", 100, 30, id="cross-entropy-ci"),
])
def test_gate_config_caps_a_claimed_hunt_only_under_the_ci_profile(op: str, profile: str, given: int,
                                                                   hunted: int) -> None:
    from normprops.engine import gate_config
    from normprops.hunt import HuntConfig

    config = HuntConfig(max_examples=given, seed=0)
    assert gate_config(config, op=op, profile=profile).max_examples == hunted


def test_an_ops_gate_examples_must_be_a_positive_integer() -> None:
    from dataclasses import replace

    from normprops.ops import get_op, register

    with pytest.raises(ValueError, match=r"gate_examples must be a positive integer or None .* but was 0"):
        register(replace(get_op("softmax"), name="softmax_gate_zero", gate_examples=0))


@pytest.mark.parametrize("profile, claimed_attention, claimed_softmax, known_bug", [
    ("ci", 30, 100, 100),   # the gate: attention's gate depth; softmax and the known bug unchanged
    ("dev", 300, 300, 300),  # the nightly hunt: every test the profile's 300
])
def test_the_numerics_suite_hunts_a_costly_ops_claims_at_its_gate_depth_under_ci_only(
        pytester: pytest.Pytester, profile: str, claimed_attention: int, claimed_softmax: int,
        known_bug: int) -> None:
    # The repository's own test module, run as it is; a fixture records each hunt's examples.
    tests = Path(__file__).parent
    for name in ("test_numerics.py", "numerics_seconds.json"):
        (pytester.path / name).write_text((tests / name).read_text())
    pytester.makeconftest("""
        import json
        import pytest

        @pytest.fixture(autouse=True)
        def _record_examples(request, monkeypatch):
            import test_numerics

            hunted = []
            real = test_numerics.hunt

            def recording(target, *, family, config):
                hunted.append(config.max_examples)
                return real(target, family=family, config=config)

            monkeypatch.setattr(test_numerics, "hunt", recording)
            yield
            with open("hunted.jsonl", "a") as out:
                out.write(json.dumps([request.node.callspec.id, hunted]) + "\\n")
    """)
    chosen = ("numpy-attention_online-gqa", "numpy-softmaxRowSafe-ordinary",
              "numpy-attention_gqa_wrong_head-gqa")
    result = pytester.runpytest_subprocess("--hypothesis-profile", profile, "-p", "no:cacheprovider",
                                           "test_numerics.py", "-k", " or ".join(chosen))
    result.assert_outcomes(passed=3)
    hunted = dict(json.loads(line) for line in (pytester.path / "hunted.jsonl").read_text().splitlines())
    assert hunted == {"numpy-attention_online-gqa": [claimed_attention],
                      "numpy-softmaxRowSafe-ordinary": [claimed_softmax],
                      "numpy-attention_gqa_wrong_head-gqa": [known_bug]}
