"""normprops: numerical-robustness property testing for normalization kernels.

Point it at a softmax, layer norm or RMS norm kernel and it hunts, with Hypothesis-drawn adversarial
rows judged against exact references, for the overflow, cancellation, eps-placement, ragged-shape and
race bugs these kernels are prone to; every failure comes back shrunk, readable and replayable.

    import normprops

    report = normprops.hunt_kernel(my_rms_norm, op="rmsnorm", dtype="bfloat16", framework="torch")
    normprops.assert_robust(my_softmax, op="softmax", ignore=["batch_invariance"])

Importing the package is cheap: each name below is imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

#: name -> the module that defines it
_EXPORTS = {
    "hunt_kernel": "normprops.api",
    "assert_robust": "normprops.api",
    "hunt_families": "normprops.engine",
    "Report": "normprops.report",
    "Case": "normprops.case",
    "ShapeConstraints": "normprops.case",
    "cases": "normprops.strategies",
    "make_case": "normprops.strategies",
    "Extras": "normprops.strategies",
    "FAMILIES": "normprops.strategies",
    "families_for": "normprops.strategies",
    "Target": "normprops.launch",
    "target_from_callable": "normprops.launch",
    "hunt": "normprops.hunt",
    "HuntConfig": "normprops.hunt",
    "HuntResult": "normprops.hunt",
    "Finding": "normprops.hunt",
    "Verdict": "normprops.judge",
    "evaluate": "normprops.properties",
    "PROPERTIES": "normprops.ops",
    "OPS": "normprops.ops",
    "UsageError": "normprops.errors",
    "ContractError": "normprops.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'normprops' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
