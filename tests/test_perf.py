"""``pytest -m perf``: the 5% gate on the GPU. rmsNormRow at most 5% slower than
layerNormRowTwoPass, and at least its ask GB/s, at every case, decided from interleaved CUDA-event
medians measured in one process; per-kernel pytest-benchmark entries (pedantic, each round ends with
a device synchronize) so --benchmark-save / --benchmark-compare work. Skipped without a GPU and
under xdist (timings from concurrent processes sharing one GPU mean nothing)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from normprops.bench import GATE_RATIO, bench_cases, gates, measure

pytestmark = [pytest.mark.perf, pytest.mark.gpu]


@pytest.fixture(scope="module")
def cases():
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("perf tests do not run under xdist: one process must own the GPU")
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return bench_cases(l2_bytes=int(props["l2CacheSize"]))


@pytest.fixture(scope="module")
def table(cases):
    return measure(cases, rounds=7, reps=10)


def test_rms_norm_gates_hold_at_every_case(table, cases) -> None:
    results = gates(table)
    for g in results:  # the spread of the ratios over repeated runs is read from these lines (-s)
        print(f"gate ratio {g.case} {g.name}: {g.value:.4f}")
    assert len(results) == 2 * len(cases)
    failed = [g.text() for g in results if not g.passed]
    assert not failed, f"gate(s) failed (limit {GATE_RATIO}):\n" + "\n".join(failed)


@pytest.mark.parametrize("kernel", ["layerNormRowTwoPass", "rmsNormRow"])
def test_benchmark_entries(benchmark, kernel, cases) -> None:
    import cupy

    from normprops.cuda.build import module

    case = cases[0]
    x = cupy.random.default_rng(0).standard_normal((case.rows, case.cols), dtype=cupy.float32)
    out = cupy.empty_like(x)
    g = cupy.ones(case.cols, dtype=cupy.float32)
    fn = module().get_function(kernel)
    cols, eps = cupy.uint64(case.cols), cupy.float32(1e-5)
    args = (x, out, g, g, cols, eps) if kernel.startswith("layer") else (x, out, g, cols, eps)
    stream = cupy.cuda.get_current_stream()

    def launch_and_sync() -> None:
        fn((case.rows,), (256,), args)
        stream.synchronize()

    benchmark.pedantic(launch_and_sync, rounds=20, warmup_rounds=3, iterations=1)
    # The entry is of a kernel that ran: 20 timed rounds, and an output that is the op's.
    assert benchmark.stats.stats.rounds == 20 and benchmark.stats.stats.min > 0
    host = cupy.asnumpy(out)
    assert np.isfinite(host).all()
    if kernel.startswith("layer"):  # gamma 1, beta 1: a normalized row plus one has mean 1
        assert np.allclose(host.mean(axis=1), 1.0, atol=1e-3)
    else:  # gamma 1: a row of mean square 1
        assert np.allclose((host.astype(np.float64) ** 2).mean(axis=1), 1.0, atol=1e-3)
