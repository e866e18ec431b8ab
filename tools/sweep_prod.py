"""Launch-shape sweep for prod.cu on the GPU: % of the memcpy floor per op, storage type and width
for several elements-per-thread settings (which set threads per row). Usage on a GPU machine:
    python3 tools/sweep_prod.py [--per-thread 16,32,32p,64p] [--dtypes float32,bfloat16] [--json PATH]
        [--ops layernorm,rmsnorm] [--variants base,NP_A,NP_A+NP_B,src=PATH] [--widths 4097,5121]
        [--rows 1,8,64,256,gib] [--peers torch,liger,quack] [--check]
A trailing "p" keeps 16-bit values packed in registers (prod.cu's _p entry points; ignored for
float32). --variants: prod.cu compiled with these -D macros ("base": none; prod.cu's A/B
candidates are NP_CLUSTER_PUSH, NP_CLUSTER_HELD16 and NP_SHIFTED_WIDE), or "src=PATH": another copy
of prod.cu (an older commit's, for an A/B in one run; --src-clusters: it has the cluster path), or
"tpr=N": the softmax cluster path with blocks of N threads (e.g. NP_A+tpr=256), or "ctas=N":
clusters of N blocks, or "cluster": softmax on the cluster path even where the row fits one block,
or "rpb=N": at most N rows per block on the register path, or "split=N": decode launches (--spread)
spread each prefill thread's vectors over N threads. --rows: batch sizes ("gib": 1 GiB each way,
the default).
--peers: PyTorch's, Liger's and QuACK's kernels for the same ops in the same rounds, with each
configuration's time over the fastest of them. --check: each softmax configuration's output on the
first rows against a float64 softmax of the same input. Each configuration is timed like normprops
bench (spin, CUDA events, interleaved rounds, median)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import statistics
import sys

import numpy as np

import normprops.cuda.prod as prod
from normprops.backends.peers import peer_status
from normprops.bench.cases import BenchCase
from normprops.bench.launchers import PEER_LIBRARIES, launchers_for, random_storage
from normprops.bench.timing import SPIN_CYCLES, event_ms, spin_wait
from normprops.cuda.build import BUILDS, compile_source, source_text, unit_text
from normprops.cuda.prod import (
    DECODE_SOURCE,
    KEPT_BAD_SOURCE,
    SOURCE,
    ProdKernel,
    largest_cluster,
    vector_width,
)
from normprops.cuda.shape import CLUSTER_SIZES, PORTABLE_CLUSTER, cluster_shape
from normprops.dtypes import get_dtype

#: Variant tokens that change only the launch, not the compiled code.
LAUNCH_ONLY = ("tpr=", "rpb=", "ctas=", "cluster", "split=")


@functools.cache
def _variant_module(defines: tuple[str, ...], source: str = SOURCE):
    """``source`` (prod.cu, or a file built on it) on prod.cu or on the "src=" copy, with the -D
    macros."""
    paths = [d[4:] for d in defines if d.startswith("src=")]
    code = unit_text(source)
    if paths:
        base = open(paths[0]).read()
        code = base if source == SOURCE else f"#define NP_NO_ENTRY_POINTS\n{base}\n{source_text(source)}"
    macros = [d for d in defines if not d.startswith(("src=", *LAUNCH_ONLY))]
    options = BUILDS["default"] + tuple(f"-D{d}" for d in macros)
    return compile_source(code, filename=SOURCE if paths else source, options=options)


class SweepKernel(ProdKernel):
    """A ProdKernel whose entry points come from a variant's module (defines: -D macros and at most
    one "src=PATH"; empty: the packaged prod.cu). Also used by tools/ab_bits.py."""

    def __init__(self, op: str, *, defines: tuple[str, ...], **kwargs) -> None:
        super().__init__(op, **kwargs)
        self.defines = defines
        if any(d.startswith("src=") for d in defines) and not self.src_shifts:
            self._shifts = False  # another copy of prod.cu may predate the off-grid kernels (_sh)
        # what changes the compiled code (LAUNCH_ONLY tokens change only the launch)
        self._compiled = tuple(d for d in defines if not d.startswith(LAUNCH_ONLY))

    def _module(self):
        if not self._compiled:
            return super()._module()
        return _variant_module(self._compiled, KEPT_BAD_SOURCE if self.op == "rmsnormbf16acc" else SOURCE)

    def _decode_module(self):
        """prod_decode.cu on the variant's prod.cu: decode batches (1-256 rows) compare too."""
        return _variant_module(self._compiled, DECODE_SOURCE) if self._compiled else super()._decode_module()

    def shape(self, cols: int):
        """"rpb=N": at most N rows per block on the register path (the arithmetic of a row is the
        same whatever the rows per block: only how rows share blocks changes)."""
        shape = super().shape(cols)
        rpb = [int(d[4:]) for d in self.defines if d.startswith("rpb=")]
        if rpb and shape.vpt and shape.cluster == 1:
            return dataclasses.replace(shape, rpb=max(1, min(rpb[0], shape.rpb)))
        return shape

    #: the product's launch of small batches (one row per block, the norms' decode kernels) for every
    #: launcher; the default keeps the width's rows per block (--spread)
    spread = False

    def launcher(self, *arrays, rows: int, cols: int, eps=None, spread: bool | None = None):
        """The width's rows per block unless "rpb=N" says otherwise (not the product's choice for
        small batches, so that "base" against "rpb=1" compares the two), or with --spread the
        product's launch (a row per block, the decode kernels)."""
        spread = self.spread if spread is None else spread
        split = [int(d[6:]) for d in self.defines if d.startswith("split=")]
        if not split:
            return super().launcher(*arrays, rows=rows, cols=cols, eps=eps, spread=spread)
        # "split=N": decode launches spread each prefill thread's vectors over N threads (prod.cu's
        # Split), on the dense kernel or the general one as the product picks, instead of the
        # product's decode_split
        shape = self.shape(cols)
        if split[0] not in (1, *prod.SPLITS) or split[0] > max(shape.vpt, 1) or split[0] * shape.tpr > 512:
            raise ValueError(f"split={split[0]}: one of 1, {prod.SPLITS} at most the {shape.vpt} vectors a "
                             f"thread, and at most 512 threads ({shape.tpr} a row)")
        chosen = prod.decode_split
        prod.decode_split = lambda shape, dense=False: split[0]
        try:
            return super().launcher(*arrays, rows=rows, cols=cols, eps=eps, spread=spread)
        finally:
            prod.decode_split = chosen

    #: whether another copy of prod.cu (src=) has the off-grid kernels (<name>_sh, --src-shifts)
    src_shifts = False

    #: whether another copy of prod.cu (src=) has the cluster path; one that may predate it streams
    #: there (tools/ab_bits.py --src-clusters says it has)
    src_clusters = False

    def _cluster_shape(self, cols: int, blocks: int | None = None):
        threads = [int(d[4:]) for d in self.defines if d.startswith("tpr=")]
        ctas = [int(d[5:]) for d in self.defines if d.startswith("ctas=")]
        if ctas:  # "ctas=N": clusters of exactly N blocks (where N blocks hold the row)
            if ctas[0] not in CLUSTER_SIZES or ctas[0] > largest_cluster():
                raise SystemExit(f"ctas={ctas[0]}: one of {CLUSTER_SIZES}, at most {largest_cluster()} here")
            blocks = ctas[0]
        if threads or ctas:  # "tpr=N": the cluster path with blocks of N threads (at most 512)
            if threads and (threads[0] % 32 or not 32 <= threads[0] <= 512):
                raise SystemExit(f"tpr={threads[0]}: blocks of whole warps, 32 to 512 threads")
            return cluster_shape(cols, vector_width=vector_width(self.dtype), blocks=blocks,
                                 largest=largest_cluster(), threads=threads[0] if threads else None)
        if any(d.startswith("src=") for d in self.defines):
            # another copy: no cluster path, or (older ones) clusters of at most 8 blocks
            if not self.src_clusters:
                return None
            return cluster_shape(cols, vector_width=vector_width(self.dtype), blocks=blocks,
                                 largest=min(PORTABLE_CLUSTER, largest_cluster()))
        return super()._cluster_shape(cols, blocks)


def _widened(a, dtype: str):
    """Device storage (16-bit types as uint16 bits) as float64."""
    import cupy

    if dtype == "bfloat16":
        return (a.astype(cupy.uint32) << 16).view(cupy.float32).astype(cupy.float64)
    if dtype == "float16":
        return a.view(cupy.float16).astype(cupy.float64)
    return a.astype(cupy.float64)


#: Rows of each batch that --check compares.
CHECK_ROWS = 8


def check_softmax(launches: dict, x, out, *, rows: int, cols: int, dtype: str) -> list[dict]:
    """Each softmax launch's first CHECK_ROWS rows against float64 softmax of the same input: the
    largest relative error over outputs above 1e-3 of their row's largest, and the largest |row sum -
    1|. A configuration whose error is over twice base's (and over one unit in the last place of the
    storage type) is marked WORSE: a different sum order moves the error, a wrong exchange moves it
    far."""
    import cupy

    k = min(rows, CHECK_ROWS)
    ref = _widened(x[:k], dtype)
    ref = cupy.exp(ref - ref.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    big = ref > 1e-3 * ref.max(axis=1, keepdims=True)
    found = []
    for name, launch in launches.items():
        out.fill(0)
        launch()
        y = _widened(out[:k], dtype)
        rel = float(cupy.max(cupy.abs(y - ref)[big] / ref[big]))
        total = float(cupy.max(cupy.abs(y.sum(axis=1) - 1)))
        found.append({"kernel": name, "max_rel_err": rel, "max_sum_err": total})
    ulp = float(np.finfo(np.float32).eps) if dtype == "float32" else 2.0 ** -8
    base = [f["max_rel_err"] for f in found if f["kernel"].endswith(" base")]
    limit = max(2 * base[0], ulp) if base else math.inf
    for f in found:
        f["worse"] = not f["max_rel_err"] <= limit  # NaN: worse
    return found


def peer_launches(*, rows: int, cols: int, dtype: str, ops: tuple[str, ...],
                  peers: tuple[str, ...]) -> tuple[dict, dict]:
    """PyTorch's ("torch") and the peer libraries' kernels for ``ops`` on a case of their own buffers
    (normprops bench's launchers), named "<op> <kernel>"; also each one's op."""
    libraries = tuple(p for p in peers if p != "torch")
    unknown = [p for p in libraries if p not in PEER_LIBRARIES]
    if unknown:
        raise SystemExit(f"--peers: {unknown} not among torch, {', '.join(PEER_LIBRARIES)}")
    usable = []
    for library in libraries:
        ok, why = peer_status(library)
        if ok:
            usable.append(library)
        else:
            print(f"peer {library} not run: {why}", file=sys.stderr)
    case = BenchCase(f"{rows}x{cols}", "sweep", rows, cols, dtype, ops)
    found = launchers_for(case, None, peers=usable)
    wanted = set(usable) | ({"torch"} if "torch" in peers else set())
    launches, op_of = {}, {}
    for name, launch in found.run.items():
        if found.libraries.get(name) in wanted:
            launches[f"{found.ops[name]} {name}"] = launch
            op_of[f"{found.ops[name]} {name}"] = found.ops[name]
    for note in found.notes:
        print(note.line(), file=sys.stderr)
    return launches, op_of


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-thread", default="16,32")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--ops", default="softmax,layernorm,rmsnorm,addrmsnorm")
    ap.add_argument("--variants", default="base")
    ap.add_argument("--widths", default="1024,4096,16384",
                    help="row widths (e.g. 4097,5121: rows that are not 16-byte aligned)")
    ap.add_argument("--rows", default="gib", help="rows per batch, e.g. 1,8,64,256,gib")
    ap.add_argument("--spread", action="store_true",
                    help="small batches as the product launches them: a row per block, the norms' "
                         "decode kernels (prod_decode.cu, on each variant's prod.cu)")
    ap.add_argument("--src-shifts", action="store_true",
                    help="the src= copies have the off-grid kernels (<name>_sh): rows off the 16-byte "
                         "grid take them there too")
    ap.add_argument("--src-clusters", action="store_true",
                    help="the src= copies have the cluster path (of at most 8 blocks)")
    ap.add_argument("--peers", default="",
                    help="time these beside ours in the same rounds: torch, liger, quack (comma-separated)")
    ap.add_argument("--check", action="store_true",
                    help="softmax configurations' first rows against a float64 softmax; exit 1 if one is "
                         "WORSE than base")
    args = ap.parse_args()
    import cupy  # after parsing: --help needs no GPU
    SweepKernel.src_clusters = args.src_clusters
    SweepKernel.spread = args.spread
    SweepKernel.src_shifts = args.src_shifts
    variants = [() if v == "base" else tuple(v.split("+")) for v in args.variants.split(",")]
    settings = [(int(v.rstrip("p")), "p" if v.endswith("p") else "") for v in args.per_thread.split(",")]
    peers = tuple(p for p in args.peers.split(",") if p)
    ops = tuple(args.ops.split(","))
    spin = spin_wait(SPIN_CYCLES)
    results = []
    worse = False
    for dtype in args.dtypes.split(","):
        itemsize = get_dtype(dtype).itemsize
        for cols, batch in itertools.product((int(w) for w in args.widths.split(",")),
                                             args.rows.split(",")):
            rows = (1 << 30) // itemsize // cols if batch == "gib" else int(batch)
            rng = cupy.random.default_rng(0)
            x = random_storage(rng, (rows, cols), dtype)
            res = random_storage(rng, (rows, cols), dtype)
            out = cupy.empty_like(x)
            g = random_storage(rng, (cols,), dtype)
            b = random_storage(rng, (cols,), dtype)
            # x and out bound now: the del below frees them once this round's launches are gone
            launches = {"memcpy": lambda x=x, out=out: out.data.copy_from_device_async(x.data, x.nbytes)}
            moved, op_of = {}, {}
            for op in ops:
                for (pt, mode), defines in itertools.product(settings, variants):
                    if mode and dtype == "float32":
                        continue
                    path = "cluster" if "cluster" in defines else "auto"
                    if path == "cluster" and op != "softmax":
                        continue
                    k = SweepKernel(op, dtype=dtype, per_thread=pt, packed=bool(mode), defines=defines,
                                    path=path)
                    arrays = k.operands(x=x, out=out, residual=res, gamma=g, beta=b)
                    try:
                        shape = k.shape(cols)
                        launch = k.launcher(*arrays, rows=rows, cols=cols, eps=1e-5)
                    except ValueError as exc:  # e.g. "cluster+ctas=2" on a row two blocks cannot hold
                        print(f"{dtype:9s} {rows:7d}x{cols:<6d} {op} {'+'.join(defines)}: not run: {exc}",
                              flush=True)
                        continue
                    shifted = k.shifted(arrays, shape=shape, cols=cols)
                    fn = k._function(shape.vpt, shape.cluster, shifted=shifted)
                    # registers per thread and spilled (local) bytes, as compiled here (the prefill
                    # kernel's: a decode launch takes prod_decode.cu's)
                    name = (f"{op} pt{pt}{mode} tpr{shape.tpr} vpt{shape.vpt} c{shape.cluster} "
                            f"r{fn.num_regs} l{fn.local_size_bytes} {'+'.join(defines) or 'base'}")
                    launches[name] = launch
                    moved[name] = 2 if op == "addrmsnorm" else 1
                    op_of[name] = op
            theirs = set()
            if peers:
                found, their_ops = peer_launches(rows=rows, cols=cols, dtype=dtype, ops=ops, peers=peers)
                theirs = set(found)
                launches.update(found)
                op_of.update(their_ops)
                moved.update({n: 2 if o == "addrmsnorm" else 1 for n, o in their_ops.items()})
            for fn in launches.values():
                fn()
            times = {n: [] for n in launches}
            for _ in range(args.rounds):
                for n, fn in launches.items():
                    times[n].append(event_ms(fn, 10, spin))
            med = {n: statistics.median(t) for n, t in times.items()}
            fastest = {}  # each op's fastest peer (with --peers)
            for n in theirs:
                fastest[op_of[n]] = min(fastest.get(op_of[n], math.inf), med[n])
            for n, ms in med.items():
                pct = 100 * moved.get(n, 1) * med["memcpy"] / ms
                lead = ms / fastest[op_of[n]] if op_of.get(n) in fastest else None
                results.append({"dtype": dtype, "cols": cols, "rows": rows, "kernel": n, "ms": ms,
                                 "pct_memcpy": pct, "vs_fastest_peer": lead})
                print(f"{dtype:9s} {rows:7d}x{cols:<6d} {n:68s} {1000 * ms:9.2f} us {pct:6.1f}% of memcpy"
                      + (f" {lead:6.3f}x the fastest peer" if lead is not None else ""), flush=True)
            if args.check and "softmax" in ops:
                ours = {n: launches[n] for n, o in op_of.items() if o == "softmax" and n not in theirs}
                for c in check_softmax(ours, x, out, rows=rows, cols=cols, dtype=dtype):
                    worse = worse or c["worse"]
                    results.append({"dtype": dtype, "cols": cols, "rows": rows, **c})
                    print(f"check {dtype:9s} {rows:7d}x{cols:<6d} {c['kernel']:68s} max rel err "
                          f"{c['max_rel_err']:.3e} |sum - 1| {c['max_sum_err']:.3e}"
                          f"{'  WORSE' if c['worse'] else ''}", flush=True)
            del x, res, out, launches
            cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
