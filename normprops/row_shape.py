"""How a row is spread over a kernel's threads: the launch shapes of ``prod.cu``'s register path,
arithmetic on the row width alone, shared by the launcher (:mod:`normprops.cuda.prod`, through
:mod:`normprops.cuda.shape`) and the error bounds (:mod:`normprops.errormodel`), which must agree on
how many elements each thread adds and how deep the tree over the threads is. It lives below both,
so the error model depends on no CUDA module.

A row of ``cols`` elements is ``vecs = ceil(cols / W)`` 16-byte vectors (W elements each). The
register path gives it ``tpr`` threads (whole warps, at most :data:`MAX_ROW_THREADS`), each holding
``vpt`` vectors (thread t holds vectors ``j * tpr + t``), 1, 2, 4 or 8 of them and at most
``per_thread`` elements. A row that one warp can hold gets one warp (no barrier), with the fewest
vectors per thread that cover it. A wider row gets the most vectors per thread (the fewest threads:
the shortest tree, the most bytes in flight per thread) whose slots are within 1/8 of the fewest any
choice needs. Threads per row need not be a power of two: 5120 bfloat16 columns
take 160 threads of 4 vectors, every slot filled, where a power of two would leave 37% of 128 x 8
empty. Rows wider than the registers take the streaming
path (1024 threads, one row per block). The shape depends on the width only, never on the number of
rows: a row's bits do not depend on the batch it is in. Only the rows per block follow the batch
(:meth:`Shape.for_batch`), which moves no element between threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["VPTS", "ROW_THREADS", "MAX_ROW_THREADS", "STREAM_THREADS", "CLUSTER_SIZES", "PORTABLE_CLUSTER",
           "CLUSTER_VPT", "CLUSTER_THREADS", "CLUSTER_TREE_DEPTH", "Shape", "shape_for", "cluster_shape",
           "elements_per_thread"]

VPTS = (1, 2, 4, 8)  # vectors per thread with an entry point in prod.cu
ROW_THREADS = 256  # threads per block when rows are narrow (several rows per block)
MAX_ROW_THREADS = 512  # the register path's __launch_bounds__(512, 2)
STREAM_THREADS = 1024
# The cluster path (softmax on sm_90 and later): a cluster of 2 to 16 blocks holds one row,
# CLUSTER_VPT vectors per thread (the fewest blocks that hold it: the most bytes in flight per
# block, measured to matter). Blocks have CLUSTER_THREADS[W] threads for W-element vectors: 256 for
# 16-bit storage, 512 for float32 (measured on an H100, 1 GiB of rows: bfloat16 at 128256 columns
# ran at 94.5% of memcpy in 8 blocks of 256 against 85.5% in 4 of 512, and 151936 at 87.1% in 10
# of 256 against 81.0% in 5 of 512, and faster at one row too; float32 at 128256 at 89.6% in 8 of
# 512 against 84.9% in 16 of 256). A 16-bit row that 16 blocks of 256 cannot hold takes blocks of
# MAX_ROW_THREADS. The tree over the threads is log2(threads) levels in a block and
# ceil(log2(blocks)) across the cluster. Clusters of up to PORTABLE_CLUSTER blocks run on every GPU
# with clusters; larger ones are "non-portable" (CUDA's term): the launcher uses them only where
# the device accepts them (normprops.cuda.prod.largest_cluster), and the forced cluster path of the
# hunt takes PORTABLE_CLUSTER blocks, a tree at most CLUSTER_TREE_DEPTH deep.
CLUSTER_SIZES = (2, 3, 4, 5, 6, 8, 10, 12, 16)
PORTABLE_CLUSTER = 8
CLUSTER_VPT = 8
CLUSTER_THREADS = {4: MAX_ROW_THREADS, 8: 256}
CLUSTER_TREE_DEPTH = 9 + 3  # float32's 512-thread blocks; 16-bit storage's 256 are a level less


@dataclass(frozen=True)
class Shape:
    vpt: int  # 16-byte vectors per thread; 0: the streaming path
    tpr: int  # threads per row
    rpb: int  # rows per block
    cluster: int = 1  # blocks per row (the cluster path: CLUSTER_CTAS)

    def decode(self, rows: int, *, sms: int) -> bool:
        """Whether a batch of ``rows`` on the register path is too small to give each of a GPU's
        ``sms`` multiprocessors a block of ``rpb`` rows (decode: 1 to a few hundred rows)."""
        return self.vpt > 0 and self.cluster == 1 and rows < sms * self.rpb

    def for_batch(self, rows: int, *, sms: int) -> Shape:
        """The shape a batch of ``rows`` launches with on a GPU of ``sms`` multiprocessors: a decode
        batch (:meth:`decode`) takes one row per block, so its rows spread over as many
        multiprocessors as there are rows (measured on an H100: 0.46-0.76 us off a 4-5 us RMS or
        layer norm at 8 and 64 rows of 2048-8192 bfloat16 columns, less at 1 and 256). Only how rows
        share blocks changes: each row's threads, their elements and the order of every sum are the
        same, so the bits are too."""
        if self.rpb == 1 or not self.decode(rows, sms=sms):
            return self
        return Shape(self.vpt, self.tpr, 1, self.cluster)

    def grid(self, rows: int) -> tuple[int, int, int]:
        return (-(-rows // self.rpb) * self.cluster, 1, 1)

    def block(self) -> tuple[int, int, int]:
        return (self.tpr, self.rpb, 1)


def shape_for(cols: int, *, vector_width: int, per_thread: int) -> Shape:
    """The launch shape of a row of ``cols`` elements, ``vector_width`` to a 16-byte vector, at most
    ``per_thread`` elements per thread on the register path (see the module docstring)."""
    if cols < 1:
        raise ValueError(f"cols must be at least 1 but was {cols}")
    vecs = -(-cols // vector_width)
    # the most vectors per thread with an entry point that per_thread allows (at least one vector)
    vpt_max = max(v for v in VPTS if v <= max(1, per_thread // vector_width))
    if vecs <= 32 * vpt_max:  # one warp
        vpt = next(v for v in VPTS if 32 * v >= vecs)
        return Shape(vpt, 32, ROW_THREADS // 32)
    options = [(32 * -(-vecs // (32 * v)), v) for v in VPTS if v <= vpt_max]
    options = [(t, v) for t, v in options if t <= MAX_ROW_THREADS]
    if not options:
        return Shape(0, STREAM_THREADS, 1)
    fewest = min(t * v for t, v in options)
    tpr, vpt = max((o for o in options if 8 * o[0] * o[1] <= 9 * fewest), key=lambda o: o[1])
    return Shape(vpt, tpr, max(1, ROW_THREADS // tpr))


def cluster_shape(cols: int, *, vector_width: int, blocks: int | None = None,
                  largest: int = CLUSTER_SIZES[-1], threads: int | None = None) -> Shape | None:
    """The cluster path's shape for a row of ``cols`` elements: the fewest blocks of ``threads``
    threads (default: CLUSTER_THREADS for the vector width, then MAX_ROW_THREADS for a row those
    cannot hold), of CLUSTER_SIZES and at most ``largest``, that hold it (or exactly ``blocks``:
    the default threads only), None when they cannot."""
    if cols < 1:
        raise ValueError(f"cols must be at least 1 but was {cols}")
    vecs = -(-cols // vector_width)
    sizes = tuple(n for n in CLUSTER_SIZES if n <= largest) if blocks is None else (blocks,)
    if threads is None:
        threads = CLUSTER_THREADS.get(vector_width, MAX_ROW_THREADS)
        if blocks is None and sizes and sizes[-1] * threads * CLUSTER_VPT < vecs:
            threads = MAX_ROW_THREADS
    size = next((n for n in sizes if n * threads * CLUSTER_VPT >= vecs), None)
    return None if size is None else Shape(CLUSTER_VPT, threads, 1, size)


def elements_per_thread(cols: int, shape: Shape, *, vector_width: int) -> int:
    """The most elements one thread of ``shape`` adds sequentially: whole vectors on the register
    path (thread 0 holds vectors 0, tpr, 2 tpr, ...), every tpr-th element on the streaming path."""
    if shape.vpt == 0:
        return math.ceil(cols / shape.tpr)
    vecs = -(-cols // vector_width)
    return min(cols, -(-vecs // (shape.tpr * shape.cluster)) * vector_width)
