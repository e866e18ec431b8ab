"""Launch-shape sweep for prod.cu on the GPU: % of the memcpy floor per op, storage type and width
for several elements-per-thread settings (which set threads per row). Usage on a GPU machine:
    python3 tools/sweep_prod.py [--per-thread 16,32,32p,64p] [--dtypes float32,bfloat16] [--json PATH]
        [--ops layernorm,rmsnorm] [--variants base,NP_A,NP_A+NP_B,src=PATH] [--widths 4097,5121]
        [--rows 1,8,64,256,gib]
A trailing "p" keeps 16-bit values packed in registers (prod.cu's _p entry points; ignored for
float32). --variants: prod.cu compiled with these -D macros ("base": none), or "src=PATH": another
copy of prod.cu (an older commit's, for an A/B in one run; --src-clusters: it has the cluster path),
or "tpr=N": the softmax cluster path with blocks of N threads (e.g. NP_A+tpr=256), or "rpb=N": at
most N rows per block on the register path. --rows: batch
sizes ("gib": 1 GiB each way, the default). Each configuration is timed like
normprops bench (spin, CUDA events, interleaved rounds, median)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import statistics
import sys

from normprops.bench.launchers import random_storage
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
from normprops.cuda.shape import PORTABLE_CLUSTER, cluster_shape
from normprops.dtypes import get_dtype


@functools.cache
def _variant_module(defines: tuple[str, ...], source: str = SOURCE):
    """``source`` (prod.cu, or a file built on it) on prod.cu or on the "src=" copy, with the -D
    macros."""
    paths = [d[4:] for d in defines if d.startswith("src=")]
    code = unit_text(source)
    if paths:
        base = open(paths[0]).read()
        code = base if source == SOURCE else f"#define NP_NO_ENTRY_POINTS\n{base}\n{source_text(source)}"
    macros = [d for d in defines if not d.startswith(("src=", "tpr=", "rpb="))]
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
        # what changes the compiled code (tpr= and rpb= change only the launch)
        self._compiled = tuple(d for d in defines if not d.startswith(("tpr=", "rpb=")))

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
        return super().launcher(*arrays, rows=rows, cols=cols, eps=eps, spread=spread)

    #: whether another copy of prod.cu (src=) has the off-grid kernels (<name>_sh, --src-shifts)
    src_shifts = False

    #: whether another copy of prod.cu (src=) has the cluster path; one that may predate it streams
    #: there (tools/ab_bits.py --src-clusters says it has)
    src_clusters = False

    def _cluster_shape(self, cols: int, blocks: int | None = None):
        threads = [int(d[4:]) for d in self.defines if d.startswith("tpr=")]
        if threads:  # "tpr=N": the cluster path with blocks of N threads (at most 512)
            if threads[0] % 32 or not 32 <= threads[0] <= 512:
                raise SystemExit(f"tpr={threads[0]}: blocks of whole warps, 32 to 512 threads")
            return cluster_shape(cols, vector_width=vector_width(self.dtype), blocks=blocks,
                                 largest=largest_cluster(), threads=threads[0])
        if any(d.startswith("src=") for d in self.defines):
            # another copy: no cluster path, or (older ones) clusters of at most 8 blocks
            if not self.src_clusters:
                return None
            return cluster_shape(cols, vector_width=vector_width(self.dtype), blocks=blocks,
                                 largest=min(PORTABLE_CLUSTER, largest_cluster()))
        return super()._cluster_shape(cols, blocks)


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
    args = ap.parse_args()
    import cupy  # after parsing: --help needs no GPU
    SweepKernel.src_clusters = args.src_clusters
    SweepKernel.spread = args.spread
    SweepKernel.src_shifts = args.src_shifts
    variants = [() if v == "base" else tuple(v.split("+")) for v in args.variants.split(",")]
    settings = [(int(v.rstrip("p")), "p" if v.endswith("p") else "") for v in args.per_thread.split(",")]
    spin = spin_wait(SPIN_CYCLES)
    results = []
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
            moved = {}
            for op in args.ops.split(","):
                for (pt, mode), defines in itertools.product(settings, variants):
                    if mode and dtype == "float32":
                        continue
                    k = SweepKernel(op, dtype=dtype, per_thread=pt, packed=bool(mode), defines=defines)
                    arrays = k.operands(x=x, out=out, residual=res, gamma=g, beta=b)
                    shape = k.shape(cols)
                    fn = k._function(shape.vpt, shifted=k.shifted(arrays, shape=shape, cols=cols))
                    # registers per thread and spilled (local) bytes, as compiled here
                    name = (f"{op} pt{pt}{mode} tpr{shape.tpr} vpt{shape.vpt} "
                            f"r{fn.num_regs} l{fn.local_size_bytes} {'+'.join(defines) or 'base'}")
                    launches[name] = k.launcher(*arrays, rows=rows, cols=cols, eps=1e-5)
                    moved[name] = 2 if op == "addrmsnorm" else 1
            for fn in launches.values():
                fn()
            times = {n: [] for n in launches}
            for _ in range(args.rounds):
                for n, fn in launches.items():
                    times[n].append(event_ms(fn, 10, spin))
            med = {n: statistics.median(t) for n, t in times.items()}
            for n, ms in med.items():
                pct = 100 * moved.get(n, 1) * med["memcpy"] / ms
                results.append({"dtype": dtype, "cols": cols, "rows": rows, "kernel": n, "ms": ms,
                                 "pct_memcpy": pct})
                print(f"{dtype:9s} {rows:7d}x{cols:<6d} {n:68s} {1000 * ms:9.2f} us {pct:6.1f}% of memcpy",
                      flush=True)
            del x, res, out, launches
            cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
