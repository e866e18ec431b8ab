"""Judge registry kernels on one gradient case and keep what fails as fixtures: the way a case met
by a suite run becomes a known bug's example. The case is given by the parameters the run printed
(``drawn with ...``), as a JSON object of :func:`normprops.strategies.make_grad_case`'s
arguments given flat (:func:`normprops.strategies.grad_case_from_fields`). Usage on the machine
that runs the kernels:

    python tools/keep_case.py --case CASE.json --kernel torch-cuda:F.rms_norm.backward \\
        --known F.rms_norm.backward-cuda-tall.json --out DIR

Each kernel is hunted on the case's family with the case as its one explicit example; a failure
is written under ``DIR/<op>/`` (as ``--normprops-fixtures-dir`` writes them) and, with
``--known NAME`` (one per ``--kernel``, in order), copied to ``normprops/known/NAME`` too. Exit 0
when every kernel failed on the case, 1 when one passed or could not run (nothing is kept
for it)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from normprops.errors import UsageError
from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_spec
from normprops.regressions import save_fixture
from normprops.specs import KERNELS
from normprops.strategies import grad_case_from_fields

KNOWN = Path(__file__).resolve().parents[1] / "normprops" / "known"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", type=Path, required=True, help="JSON of make_grad_case's arguments, flat")
    ap.add_argument("--kernel", action="append", required=True, metavar="BACKEND:NAME")
    ap.add_argument("--known", action="append", default=[], metavar="NAME")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.known and len(args.known) != len(args.kernel):
        ap.error(f"--known must be given once per --kernel ({len(args.kernel)}) but was given "
                 f"{len(args.known)} times")
    case = grad_case_from_fields(json.loads(args.case.read_text()))
    specs = {(k.backend, k.name): k for k in KERNELS}
    status = 0
    for i, pair in enumerate(args.kernel):
        backend, _, name = pair.partition(":")
        if (backend, name) not in specs:
            ap.error(f"--kernel must name a registry entry as BACKEND:NAME but was {pair!r}")
        try:
            target = replace(target_from_spec(specs[backend, name]), examples=(case,))
        except UsageError as error:  # the backend is not usable here: say so, go on
            print(f"{pair}: not run: {error}")
            status = 1
            continue
        result = hunt(target, family=case.family, config=HuntConfig(max_examples=1, seed=0))
        if result.passed:
            print(f"{pair}: passed the case; nothing kept")
            status = 1
            continue
        for finding in result.findings:
            path = save_fixture(finding, target=target, directory=args.out)
            print(f"{pair}: {finding.message}\n  kept as {path}")
            if args.known and finding is result.findings[0]:
                shutil.copyfile(path, KNOWN / args.known[i])
                print(f"  and as normprops/known/{args.known[i]}")
    return status


if __name__ == "__main__":
    sys.exit(main())
