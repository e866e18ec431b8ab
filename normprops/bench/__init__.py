"""The bandwidth table on the GPU: the textbook kernels and their predictions, the production kernels against
their peers (PyTorch, Liger-Kernel, QuACK), the RMS-versus-two-pass gates and the targets.

Every kernel is priced at its op's bytes (one read and one write of the row; the fused add + RMS
norm two of each): ``ask GB/s``. Floors, measured in the same process: the ``copyFloor`` kernel of
kernels.cu (same launch shape as the kernels) and the device-to-device memcpy (the true floor). Case
sets: the textbook's two 64 MiB shapes; L2-scaled ones (at least 16x the device's L2 each way: 1 GiB
on the H200); the decode-sized 64 x 8192; and ``model``: hidden sizes and vocabularies of real
models at decode and prefill sizes (:data:`~normprops.bench.cases.MODEL_HIDDEN`,
:data:`~normprops.bench.cases.MODEL_VOCAB`).

One module per role: :mod:`~normprops.bench.cases` (what is timed), :mod:`~normprops.bench.launchers`
(the kernels launched on a case), :mod:`~normprops.bench.timing` (CUDA events, rounds, graphs),
:mod:`~normprops.bench.verdicts` (gates, targets, the lead table, predictions) and
:mod:`~normprops.bench.output` (text, JSON, CSV, PNG). Needs CuPy and a GPU for measuring; the
cases, tables, gates, targets and predictions are plain functions of the rows (tested without a
GPU).
"""

from __future__ import annotations

from normprops.bench.cases import SETS, BenchCase, bench_cases, l2_bytes_here
from normprops.bench.launchers import PEER_LIBRARIES, Note
from normprops.bench.output import (
    format_case_list,
    format_cases,
    format_lead_table,
    format_report,
    format_run_header,
    format_table,
    write_outputs,
)
from normprops.bench.timing import BenchError, BenchRow, LaunchRow, Measurement, measure, run_bench
from normprops.bench.verdicts import (
    GATE_RATIO,
    LEAD_MEMCPY_TARGET,
    Gate,
    LeadRow,
    Prediction,
    gates,
    lead_table,
    lead_targets,
    predictions,
    targets,
)

__all__ = [
    "BenchCase",
    "BenchRow",
    "BenchError",
    "Gate",
    "LaunchRow",
    "LeadRow",
    "Measurement",
    "Note",
    "Prediction",
    "bench_cases",
    "l2_bytes_here",
    "measure",
    "run_bench",
    "gates",
    "targets",
    "lead_table",
    "lead_targets",
    "predictions",
    "format_cases",
    "format_case_list",
    "format_run_header",
    "format_report",
    "format_table",
    "format_lead_table",
    "write_outputs",
    "GATE_RATIO",
    "LEAD_MEMCPY_TARGET",
    "PEER_LIBRARIES",
    "SETS",
]
