"""The register path's launch shapes, as the CUDA launchers read them: the arithmetic lives in
:mod:`normprops.row_shape`, below the error model that shares it.
"""

from __future__ import annotations

from normprops.row_shape import (
    CLUSTER_SIZES,
    CLUSTER_THREADS,
    CLUSTER_TREE_DEPTH,
    CLUSTER_VPT,
    MAX_ROW_THREADS,
    PORTABLE_CLUSTER,
    ROW_THREADS,
    STREAM_THREADS,
    VPTS,
    Shape,
    cluster_shape,
    elements_per_thread,
    shape_for,
)

__all__ = ["VPTS", "ROW_THREADS", "MAX_ROW_THREADS", "STREAM_THREADS", "CLUSTER_SIZES", "PORTABLE_CLUSTER",
           "CLUSTER_VPT", "CLUSTER_THREADS", "CLUSTER_TREE_DEPTH", "Shape", "shape_for", "cluster_shape",
           "elements_per_thread"]
