"""Judge every known bug's explicit example (``KnownBug.example``, a fixture in
``normprops/known/``) on its own kernel, once, as a registry hunt would try it first: each must
still fail on the bug's own property. Kernels whose backend is not usable here are listed and
skipped (their reason printed).

    python tools/known_examples.py [--backend B[,B...]]

One line per example: ``shows`` (the declared property failed), ``MISSED`` (passed, or failed
another property: the properties named), ``skipped`` (backend unusable). Exit 0 when no example
was missed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from normprops.properties import evaluate
from normprops.registry_hunt import known_example, registry_target
from normprops.specs import KERNELS, kernel_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default=None, help="comma-separated backends (default: all)")
    args = parser.parse_args(argv)
    wanted = None if args.backend is None else {b.strip() for b in args.backend.split(",")}
    missed = shown = skipped = 0
    for spec in KERNELS:
        if wanted is not None and spec.backend not in wanted:
            continue
        for bug in spec.bugs:
            if bug.example is None:
                continue
            usable, why = kernel_status(spec)
            if not usable:
                skipped += 1
                print(f"skipped  {spec.backend}:{spec.name} {bug.family} ({bug.example}): {why}")
                continue
            target = registry_target(spec, bug.family)
            failures = evaluate(target, known_example(bug.example)).failures
            props = sorted({f.property for f in failures})
            ok = bool(failures) and (bug.property is None or bug.property in props)
            shown += ok
            missed += not ok
            print(f"{'shows' if ok else 'MISSED':8} {spec.backend}:{spec.name} {bug.family} "
                  f"({bug.example}): expected {bug.property or 'any'}, failed {props or 'nothing'}")
    print(f"{shown} shown, {missed} missed, {skipped} skipped")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
