"""``normprops kernels``: the registry's kernels, the backends usable here, and what each kernel
claims and carries.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import TextIO

from normprops.cli.common import BACKEND_PREFERENCE
from normprops.kernelspec import KernelSpec
from normprops.ops import get_op
from normprops.specs import KERNELS, backend_status, unusable_kernels

#: Storage types as the table writes them (the kernels' own names end in the same).
SHORT_DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
from normprops.strategies import families_for


def _kernels(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    backends = list(dict.fromkeys([*BACKEND_PREFERENCE, *(k.backend for k in KERNELS)]))
    for backend in backends:
        ok, why = backend_status(backend)
        print(f"backend {backend}: {'available' if ok else 'unavailable'} ({why})", file=out)
        if ok:  # entries of a usable backend that need more than it (a GPU for JAX's cuDNN)
            for reason, names in unusable_kernels([k for k in KERNELS if k.backend == backend]).items():
                print(f"  not usable here: {', '.join(names)} ({reason})", file=out)
    print(file=out)
    width = max(60, shutil.get_terminal_size(fallback=(100, 24)).columns)
    # The arrays a kernel takes (its framework) follow from its backend: --wide shows them, the
    # short table leaves them out to keep within 100 columns beside the longest op names.
    columns = ["kernel", "op", "backend", "dtype"]
    columns += ["arrays", "T"] if args.wide else ["claims", "bugs"]
    table = [columns]
    for k in KERNELS:
        row = [k.name, k.op, k.backend, SHORT_DTYPES[k.dtype]]
        if args.wide:
            row += [k.framework, str(k.error_model.threads)]
        else:
            claimed = sum(f in k.claims for f in families_for(k.op))
            row += [f"{claimed}/{len(families_for(k.op))}", str(len(k.bugs))]
        table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    right = {"T", "claims", "bugs"}  # numbers
    for row, k in zip(table, [None, *KERNELS]):
        print("  ".join(cell.rjust(w) if name in right else cell.ljust(w)
                        for cell, w, name in zip(row, widths, columns)).rstrip(), file=out)
        if args.wide and k is not None:
            for part in _kernel_details(k):
                print(textwrap.fill(part, width, initial_indent="    ", subsequent_indent="      ",
                                    break_on_hyphens=False), file=out)
    if not args.wide:
        print("\n" + textwrap.fill("dtype: its storage type (f32, bf16, f16); claims: the families "
                                   "the kernel claims, of its op's; bugs: the "
                                   "known bugs it carries. --wide lists them, with what each kernel "
                                   "does not promise, the widths it takes, how it sums rows and "
                                   "its threads per row (T).", width), file=out)
    return 0


def _kernel_details(k: KernelSpec) -> list[str]:
    """What ``normprops kernels --wide`` says under a kernel's row, one entry a paragraph."""
    parts = ["claims: " + (", ".join(f for f in families_for(k.op) if f in k.claims) or "nothing")]
    if k.default_families is not None:
        parts.append("first hunt: " + ", ".join(f for f in families_for(k.op) if f in k.default_families)
                     + " (the others with --families)")
    if k.exempt:
        parts.append("not promised: " + ", ".join(sorted(k.exempt)))
    if not k.constraints.unconstrained:
        parts.append("widths: " + k.constraints.describe())
    if len(get_op(k.op).outputs) > 1:  # dgamma (and dbeta) sum the rows
        parts.append(f"rows summed: {k.row_reduction}")
    if k.error_model.variance != "two_pass":
        parts.append(f"variance: {k.error_model.variance}")
    return parts + [f"BUG in {b.family}: {b.summary}" for b in k.bugs]
