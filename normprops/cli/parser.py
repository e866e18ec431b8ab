"""The ``normprops`` argument parser: every subcommand, its flags and their help.
"""

from __future__ import annotations

import argparse

from normprops import __version__
from normprops.cli.common import (
    DEFAULT_FIXTURES,
    EXIT_FOUND,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOTHING,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    _ignore_list,
    _opt_in_list,
    _Parser,
    _path,
    _positive_int,
    _positive_seconds,
    _shard,
)
from normprops.dtypes import DTYPES
from normprops.errormodel import REDUCTIONS, VARIANCES
from normprops.frameworks import FRAMEWORKS
from normprops.masking import MASK_KINDS
from normprops.ops import IGNORABLE, OPS, OPTIONAL, ROW_REDUCTIONS, OpSpec
from normprops.oracles import ORACLES, POLICIES

_FIXTURES_DIR = _path(str(DEFAULT_FIXTURES))



def _signatures() -> str:
    """Each op's call and what it returns, as --impl's help lists them: from the registry, so an
    op registered later is listed too."""
    def returns(op: OpSpec) -> str:
        if op.returns is not None:
            return f" -> {op.returns}"
        if op.outputs == ("y",):
            return ""
        return f" -> {op.outputs[0]}" if len(op.outputs) == 1 else f" -> ({', '.join(op.outputs)})"
    return ", ".join(f"{op.name} {op.signature}{returns(op)}" for op in OPS.values())

def _add_width_flags(p: argparse.ArgumentParser, *, replay: bool = False) -> None:
    shape = p.add_argument_group(
        "the widths your kernel accepts" + (" (fixtures of other widths are skipped)" if replay else ""))
    shape.add_argument("--cols-multiple-of", type=_positive_int, default=1, metavar="K",
                       help="widths that are a multiple of K, at most 262145 (e.g. 4 for 16-byte "
                            "float32 vectors)"
                            + ("" if replay else "; the ragged edges are counted in vectors of K"))
    shape.add_argument("--min-cols", type=_positive_int, metavar="N",
                       help="narrowest row it takes (at most 262145)")
    shape.add_argument("--max-cols", type=_positive_int, metavar="N", help="widest row it takes")


def _add_kernel_flags(p: argparse.ArgumentParser, *, replay: bool = False) -> None:
    """What a user's kernel takes and promises: shared by hunt and replay."""
    g = p.add_argument_group("your kernel (with --impl)")
    g.add_argument("--dtype", choices=tuple(DTYPES),
                   help="storage type it reads and writes (default float32)"
                        + ("; only the fixtures saved in it are replayed" if replay else ""))
    g.add_argument("--framework", choices=FRAMEWORKS, default="numpy",
                   help="the arrays it takes and returns (default numpy)")
    g.add_argument("--device", metavar="DEV",
                   help="where its arrays live: torch 'cuda' (default when available) or 'cpu'; "
                        "jax 'gpu' or 'cpu'; cupy 'cuda:N'")
    g.add_argument("--ignore", type=_ignore_list, default=frozenset(), metavar="P1,P2",
                   help="properties it does not promise, not judged (nor hunted): "
                        + ", ".join(sorted(IGNORABLE)))
    g.add_argument("--ftz", action="store_true",
                   help="it flushes subnormals to zero (FTZ/DAZ); without this it is judged as IEEE")
    g.add_argument("--threads", type=_positive_int, metavar="T",
                   help="threads cooperating on a row: the depth of the error bound (default 32); "
                        "with --cuda-source also the block size (default 256)")
    g.add_argument("--reduction", choices=REDUCTIONS, default="sequential",
                   help="how its sums run: each of T threads adds its share in turn, then they "
                        "meet in a tree (sequential, the default), or a pairwise tree over the row")
    g.add_argument("--row-reduction", choices=ROW_REDUCTIONS, default=None,
                   help="gradient ops: how it combines rows into dgamma and dbeta, the depth of "
                        "their bound: one running sum over the rows (sequential, the default: it "
                        "bounds every order, np.sum(axis=0)'s, torch.sum(dim=0)'s and "
                        "jnp.sum(axis=0)'s among them), per-block partials over --threads blocks "
                        "joined in a tree (blocks, a sharper bound), or a pairwise tree (tree)")
    g.add_argument("--arithmetic", choices=("float32", "bfloat16"), default="float32",
                   help="the type it computes in (default float32); bfloat16 when every operation "
                        "rounds to bfloat16 (bounds 65536 times wider; needs --dtype bfloat16: "
                        "with float32 storage it is a usage error)")
    g.add_argument("--variance", choices=VARIANCES, default="two_pass",
                   help="layer norm (and its gradient): how it forms the variance: around the mean "
                        "or by Welford's update (two_pass, the default), or as E[x^2] - E[x]^2 "
                        "(one_pass: judged with a bound that grows with kappa^2 instead of kappa, "
                        "kappa = mean|x| / sqrt(var + eps); rows past float32's reach are judged "
                        "finite only); for another op it is a usage error")
    g.add_argument("--check", type=_opt_in_list, default=frozenset(), metavar="P1,P2",
                   help="optional properties it promises too: " + ", ".join(sorted(OPTIONAL))
                        + " (exact_constant: a constant layer-norm row gives beta exactly, a zero "
                          "RMS-norm row 0; range_safety: right also on the rows where the declared "
                          "arithmetic must overflow, a norm's x*x past 1.8e19, a masked softmax's "
                          "scale * x past FLT_MAX; unchecked, findings there are information, not "
                          "failures)")
    g.add_argument("--mask", choices=MASK_KINDS, default=None,
                   help="masked_softmax: how it takes its mask: bool (default; True where the entry "
                        "takes part) or additive (a float array of 0 and --mask-fill, for "
                        "softmax(scale * x + mask))")
    g.add_argument("--mask-fill", metavar="V",
                   help="with --mask additive: the value at masked entries, -inf (default), lowest "
                        "(the storage type's lowest finite value) or a negative number (one past "
                        "the type's range is taken as lowest)")
    g.add_argument("--mask-layouts", metavar="L1,L2",
                   help="attention: the masks it takes, some of none, causal_top_left, "
                        "causal_bottom_right, key_padding, arbitrary (default: all); the hunt draws "
                        "only those")
    g.add_argument("--empty-rows", choices=("zero", "nan", "either"), default=None,
                   help="attention: what a query row with no kept key gives in out (default either; "
                        "never a mixture)")
    g.add_argument("--returns-lse", choices=("yes", "no"), default=None,
                   help="attention: yes, fn returns (out, lse); no, out alone (default: either, "
                        "judged as returned)")
    g.add_argument("--p-dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="attention: the type P = softmax(scores) is rounded to before P.V "
                        "(FlashAttention rounds it to the storage type; default float32)")
    g.add_argument("--online", choices=("yes", "no"), default=None,
                   help="attention: yes (default), a running max rescales the partial sums "
                        "(FlashAttention); no, two passes (a tighter P.V bound)")
    g.add_argument("--shape-pool", type=int, default=None, metavar="N",
                   help="attention and its backward: each family draws its cases in at most N "
                        "shapes, for a kernel that compiles for every new shape (jax.jit, "
                        "torch.compile): the examples go to values, not compiles (default: any shape)")
    g.add_argument("--softcap", type=float, default=None, metavar="C",
                   help="cross_entropy: the logits pass through C tanh(x / C) first (Gemma 2: 30)")
    g.add_argument("--z-loss", type=float, default=None, metavar="Z",
                   help="cross_entropy: Z lse^2 is added to each row's loss (default 0)")
    g.add_argument("--loss-reduction", choices=("none", "mean", "sum"), default=None,
                   help="cross_entropy: the loss per row (none, default), its sum, or its mean over "
                        "the rows not ignored")
    g.add_argument("--smoothing", choices=("yes", "no"), default=None,
                   help="cross_entropy: yes (default), it takes a label smoothing other than 0")
    g.add_argument("--call-timeout", type=_positive_seconds, default=60.0, metavar="SECONDS",
                   help="a call that does not return within SECONDS stops the run and is reported "
                        "(default 60)")


_OUTPUT_FILES = ("Output files (--json, --png, --csv, ...) go into a directory that exists: a file is "
                 "created and removed there before anything runs, and a missing or unwritable "
                 "directory is a usage error. --fixtures-dir is created with its parents. Reports "
                 "and fixtures are written atomically, with the mode the umask gives.")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="normprops",
                     description="Hunt numerical bugs in softmax, masked softmax, layer norm and RMS norm "
                                 "kernels.",
                     epilog=f"exit status: {EXIT_OK} nothing found; {EXIT_FOUND} counterexample(s) found; "
                            f"{EXIT_USAGE} usage error; {EXIT_UNREADABLE} replay: unreadable fixtures, "
                            f"report merge: the reports are not one whole; "
                            f"{EXIT_INTERNAL} internal error or an output not written; "
                            f"{EXIT_NOTHING} hunt, report merge: the time budget was spent before "
                            f"the first example, replay: nothing to replay; replay, fixtures "
                            f"list and prune: no --fixtures-dir folder (no fixture saved yet); "
                            f"{EXIT_INTERRUPTED} interrupted (Ctrl-C); {EXIT_TERMINATED} terminated "
                            f"(SIGTERM). " + _OUTPUT_FILES)
    parser.add_argument("--version", action="version", version=f"normprops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    h = sub.add_parser("hunt", help="hunt a kernel (or every registered kernel) for counterexamples")
    h.add_argument("--op", choices=sorted(OPS), help="the op (required with --impl)")
    what = h.add_mutually_exclusive_group()
    what.add_argument("--impl", metavar="MODULE:FUNC",
                      help=f"a Python function with the op's signature: {_signatures()}")
    what.add_argument("--cuda-source", type=_path("kernels.cu"), metavar="FILE",
                      help="a CUDA file holding an extern \"C\" kernel with the standard signature "
                           "(softmax (const float* in, float* out, size_t cols); layernorm adds "
                           "const float* gamma, const float* beta before cols and float eps after; "
                           "rmsnorm adds gamma and eps), launched one block per row")
    h.add_argument("--kernel", metavar="NAME",
                   help="with --cuda-source: the kernel's name in the file; without: hunt only "
                        "the registered kernel(s) of this name")
    h.add_argument("--families", metavar="A,B,...",
                   help="comma-separated families, or all (default: all; a registry hunt: the "
                        "families each entry names for a first hunt, every family for most, as "
                        "'normprops kernels --wide' shows)")
    h.add_argument("--max-examples", type=_positive_int, default=100, metavar="N",
                   help="examples per family and property (default 100)")
    h.add_argument("--seed", type=int, metavar="N",
                   help="Hypothesis seed, for a repeatable hunt (default: a fresh one, shown in the header; "
                        "0 on a CI service, where Hypothesis derandomizes)")
    h.add_argument("--json", type=_path("report.json"), metavar="PATH",
                   help="write a JSON report here (written on every exit but a usage error, Ctrl-C "
                        "included; a registry hunt rewrites it after every cell)")
    fx = h.add_mutually_exclusive_group()
    fx.add_argument("--fixtures-dir", type=_FIXTURES_DIR, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"where findings are saved, as DIR/<op>/*.json (default ./{DEFAULT_FIXTURES})")
    fx.add_argument("--no-fixtures", action="store_true", help="do not save findings")
    h.add_argument("--policy", choices=POLICIES, default="default",
                   help="tolerance policy: condition-aware default, or the flat rtol table gate")
    h.add_argument("--oracle", choices=ORACLES, default="float64", help="reference precision")
    h.add_argument("--backend", metavar="NAME[,NAME...]",
                   help="registry mode: hunt these backends' kernels (default: the best available; "
                        "normprops kernels lists them)")
    h.add_argument("--time-budget", type=_positive_seconds, metavar="SECONDS",
                   help="end the hunt cleanly once SECONDS have passed: what was found is reported, "
                        "each cell says how many examples it reached, the report is marked cut "
                        "short; the exit status still says whether anything was found (5: the budget was "
                        "spent before the first example was judged)")
    h.add_argument("--resume", type=_path("report.json"), metavar="REPORT",
                   help="registry hunts: take over the cells this earlier --json report of the same "
                        "hunt finished (same settings and --seed; only --time-budget may differ) and "
                        "hunt the rest; the new report holds both, so a hunt cut short by its time "
                        "budget goes on in the next job (--json may name REPORT itself)")
    h.add_argument("--shard", type=_shard, metavar="K/N",
                   help="hunt only the K-th of N deterministic slices of the (kernel, family) cells "
                        "(with --impl, of the families; a slice may be empty: its report merges); "
                        "merge the N reports with normprops report merge")
    _add_kernel_flags(h)
    _add_width_flags(h)

    r = sub.add_parser("replay", help="run stored regression fixtures against a function",
                       description="Replay the fixtures of --op saved in the kernel's storage type "
                                   "(--dtype, default float32) at the widths it accepts; the others "
                                   "are counted as skipped.")
    r.add_argument("--op", choices=sorted(OPS), required=True)
    r.add_argument("--impl", metavar="MODULE:FUNC", required=True)
    r.add_argument("--fixtures-dir", type=_FIXTURES_DIR, default=DEFAULT_FIXTURES, metavar="DIR",
                   help=f"the directory the hunt saved into (default ./{DEFAULT_FIXTURES})")
    r.add_argument("--all-dtypes", action="store_true",
                   help="replay the fixtures of every storage type, each in its own (not with --dtype)")
    r.add_argument("--policy", choices=POLICIES, default="default")
    r.add_argument("--json", type=_path("report.json"), metavar="PATH", help="write a JSON report here")
    _add_kernel_flags(r, replay=True)
    _add_width_flags(r, replay=True)

    fx = sub.add_parser("fixtures", help="list the saved fixtures, or prune them")
    fx_sub = fx.add_subparsers(dest="fixtures_command", required=True, parser_class=_Parser)
    ls = fx_sub.add_parser("list", help="one line per fixture: kernel, op, storage type, family, "
                                        "property, rows x cols, when saved, path (exit 3 if some "
                                        "cannot be read, 5 if the folder does not exist)")
    ls.add_argument("--fixtures-dir", type=_FIXTURES_DIR, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"the directory the hunts saved into (default ./{DEFAULT_FIXTURES})")
    ls.add_argument("--op", choices=sorted(OPS), help="only this op's fixtures")
    pr = fx_sub.add_parser(
        "prune", help="remove the fixtures of a kernel, or those a kernel no longer fails",
        description="Remove the fixtures saved by --kernel NAME, or, with --op and --impl, the "
                    "function's own fixtures that it passes when replayed (as normprops replay "
                    "selects and judges them); with both, NAME's fixtures that the function "
                    "passes (a kernel fixed under a new name). Another kernel's fixtures are "
                    "removed only when --kernel names it. Exit 0 "
                    "when done, 1 when the function stopped the replay (what passed before it "
                    "is removed, the rest kept), 3 when some fixtures cannot be read (kept), 5 "
                    "when no fixture matched (or the folder does not exist).")
    pr.add_argument("--fixtures-dir", type=_FIXTURES_DIR, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"the directory the hunts saved into (default ./{DEFAULT_FIXTURES})")
    pr.add_argument("--kernel", metavar="NAME",
                    help="the fixtures of this kernel: its name, backend:name as fixtures list shows it, "
                         "or MODULE:FUNC where kernels of one name are defined in several modules")
    pr.add_argument("--op", choices=sorted(OPS), help="only this op's fixtures (required with --impl)")
    pr.add_argument("--impl", metavar="MODULE:FUNC",
                    help="replay the function's own fixtures (or --kernel NAME's) on it and "
                         "remove those it passes")
    pr.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    pr.add_argument("--all-dtypes", action="store_true",
                    help="with --impl: replay the fixtures of every storage type, each in its own")
    pr.add_argument("--policy", choices=POLICIES, default="default")
    _add_kernel_flags(pr, replay=True)
    _add_width_flags(pr, replay=True)

    kl = sub.add_parser("kernels", help="list the registry and each backend's availability")
    kl.add_argument("--wide", action="store_true",
                    help="list each kernel's claimed families, known bugs, width limits and threads")

    rep = sub.add_parser("report", help="work with JSON reports")
    rep_sub = rep.add_subparsers(dest="report_command", required=True, parser_class=_Parser)
    m = rep_sub.add_parser(
        "merge", help="merge reports (e.g. the shards of one hunt) into one matrix",
        description="Merge JSON reports into one matrix: the shards of one hunt, or hunts of other "
                    "kernels. Each file must be given once, every run must have finished, and all "
                    "must come from the same normprops version. Reports of the same kernels (the "
                    "same --backend, --op and --kernel, or the same --impl, framework and storage "
                    "type) of which any is a shard (hunt --shard "
                    "K/N) must be the shards of one hunt: each of 1/N..N/N once, with the same seed "
                    "and settings. Otherwise each problem is one line and "
                    f"nothing is merged (exit {EXIT_UNREADABLE}; --json still written, with no cell "
                    "and the problems, unless it names one of the reports given); with "
                    "--allow-incomplete the merge goes on, its status is the cells' (0 or 1, or "
                    f"{EXIT_NOTHING} where nothing was judged), and the merged report says "
                    "\"complete\": false and why. A hunt cut short by its --time-budget finished: "
                    "it merges, and the merged report says \"cut_short\": true and names it.")
    m.add_argument("reports", nargs="+", type=_path("shard1.json", flag=False), metavar="REPORT.json")
    m.add_argument("--json", type=_path("merged.json"), metavar="PATH",
                   help="write the merged report here (into a directory that exists)")
    m.add_argument("--png", type=_path("matrix.png"), metavar="PATH", help="draw the matrix (needs [plot])")
    m.add_argument("--allow-incomplete", action="store_true",
                   help="merge even when shards are missing or differ, or a run did not finish; "
                        "the merged report is marked \"complete\": false, with the reasons")

    b = sub.add_parser("bench", help="the bandwidth table on the GPU: ours against PyTorch, Liger-Kernel and "
                                     "QuACK, the textbook kernels' predictions, the gates and the targets "
                                     "(exit 1 when a gate of the textbook kernels fails)")
    b.add_argument("--cases", default="textbook,l2,l2-bf16,decode", metavar="SETS",
                   help="comma-separated: textbook (the two 64 MiB cases), l2 / l2-bf16 / l2-f16 (16x "
                        "the L2, 1024/4096/16384 columns), decode (64 x 8192), model (hidden sizes "
                        "2048-8192 and 4097, 5121 in bf16 for the norms, vocabularies 32000, 128256, "
                        "151936 for softmax; 1, 8, 64, 256 rows and prefill of >= 16x the L2)")
    b.add_argument("--only", metavar="REGEX",
                   help="keep only the cases whose name matches REGEX (re.search), e.g. 'x(2048|4096) ' "
                        "or 'x151936' (see --list-cases): to split a long run")
    b.add_argument("--list-cases", action="store_true",
                   help="list the cases of --cases and exit (no GPU needed: without one the L2 is "
                        "taken as the H200's 60 MiB)")
    b.add_argument("--peers", default="liger,quack", metavar="LIBS",
                   help="peer libraries timed beside ours and PyTorch's when importable: comma-separated "
                        "among liger, quack, or none (default liger,quack)")
    b.add_argument("--graphs", action="store_true",
                   help="also time every contender at the decode cases host-paced and as CUDA graph "
                        "replays (the launch-cost notes under the lead table)")
    b.add_argument("--rounds", type=_positive_int, default=7, help="interleaved rounds (median)")
    b.add_argument("--reps", type=_positive_int, default=10, help="launches per timed round")
    b.add_argument("--json", type=_path("bench.json"), metavar="PATH")
    b.add_argument("--csv", type=_path("bench.csv"), metavar="PATH")
    b.add_argument("--png", type=_path("bench.png"), metavar="PATH",
                   help="bar chart of %% of memcpy (needs [plot])")
    b.add_argument("--lead-csv", type=_path("lead.csv"), metavar="PATH",
                   help="the lead table: per case and op, ours against the fastest peer, with the targets' "
                        "verdicts")
    b.add_argument("--lead-png", type=_path("lead.png"), metavar="PATH",
                   help="chart of the lead table: peer time / ours per case, one panel per op (needs [plot])")

    for writer in (h, r, m, b):
        writer.epilog = _OUTPUT_FILES
    c = sub.add_parser("census", help="worked numbers from the kernels: the eight values, the wide "
                                      "softmax row, the overflow row")
    c.add_argument("--backend", choices=("cuda", "numpy"),
                   help="default: the GPU when usable, else the numpy emulation")
    for subparsers in (sub, fx_sub, rep_sub):  # a missing command is named by its choices
        subparsers.metavar = "{" + ",".join(subparsers.choices) + "}"
    return parser

