"""How a declaration's fields are spelled to people: the one place that knows a field's CLI flag.

The core speaks in fields (``variance``, ``opt_in``); a message a user reads names the field as
both fronts take it, the flag for the CLI and the keyword for the API (``--variance
(variance=)``), and a report's replay command is built from the same table. Nothing else below
:mod:`normprops.cli` writes a ``--flag``.
"""

from __future__ import annotations

__all__ = ["FLAGS", "flag", "spelled"]

#: A field (a :class:`~normprops.declaration.Declaration`'s, or a hunt setting's) -> its CLI flag.
FLAGS: dict[str, str] = {
    "op": "--op", "impl": "--impl", "cuda_source": "--cuda-source", "kernel": "--kernel",
    "dtype": "--dtype", "framework": "--framework", "device": "--device",
    "cols_multiple_of": "--cols-multiple-of", "min_cols": "--min-cols", "max_cols": "--max-cols",
    "ignore": "--ignore", "opt_in": "--check", "threads": "--threads", "reduction": "--reduction",
    "arithmetic": "--arithmetic", "row_reduction": "--row-reduction", "variance": "--variance",
    "mask": "--mask", "mask_fill": "--mask-fill", "call_timeout": "--call-timeout", "ftz": "--ftz",
    "policy": "--policy", "oracle": "--oracle", "families": "--families",
    "fixtures_dir": "--fixtures-dir", "seed": "--seed", "json": "--json", "shard": "--shard",
    "peers": "--peers", "mask_layouts": "--mask-layouts", "empty_rows": "--empty-rows",
    "returns_lse": "--returns-lse", "p_dtype": "--p-dtype", "online": "--online",
    "shape_pool": "--shape-pool",
    "softcap": "--softcap", "z_loss": "--z-loss", "loss_reduction": "--loss-reduction",
    "smoothing": "--smoothing",
}


def flag(field: str) -> str:
    """``field``'s CLI flag (``opt_in`` -> ``--check``); KeyError for a field no flag sets."""
    return FLAGS[field]


def spelled(field: str, value: str | None = None, *, quoted: bool = False) -> str:
    """``field`` as both fronts spell it: ``--variance (variance=)``; with ``value``,
    ``--check row_order (opt_in=)``, or ``--dtype bfloat16 (dtype="bfloat16")`` when ``quoted``."""
    given = "" if value is None else f" {value}"
    keyword = f'"{value}"' if quoted and value is not None else ""
    return f"{FLAGS[field]}{given} ({field}={keyword})"
