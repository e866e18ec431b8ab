"""What ``normprops bench`` launches on a case: the floors (device memcpy, ``copyFloor``), the textbook
kernels, the production kernels, PyTorch's and the peer libraries' kernels, each a zero-argument
launch on the case's buffers (peers run on the very buffers ours do, zero-copy through DLPack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TextIO

import numpy as np

from normprops.bench.cases import BenchCase
from normprops.specs import KERNELS

__all__ = ["Launchers", "Note", "launchers_for", "random_storage", "device_storage", "one_line",
           "COPY_FLOOR", "MEMCPY", "PEERS", "PEER_LIBRARIES", "TORCH_ADD_RMS"]

COPY_FLOOR = "copyFloor"
MEMCPY = "memcpy"
TORCH_ADD_RMS = "x+r, F.rms_norm"  # PyTorch's eager add then RMS norm: the fused kernel's peer


@dataclass(frozen=True)
class Note:
    """Something the table's reader must know about one case and contender: a peer that cannot take
    the case, one that failed and was dropped, one that cannot be captured in a graph."""

    case: str
    kernel: str
    text: str

    def line(self) -> str:
        return f"{self.case}: {self.kernel}: {self.text}"


@dataclass
class Launchers:
    run: dict[str, Callable[[], None]]
    touches: dict[str, int]
    moved: dict[str, int]  # ask bytes where not one read + one write
    ops: dict[str, str] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)

    def add(self, name: str, launch: Callable[[], None], *, op: str, library: str, touches: int = 2,
            moved: int | None = None) -> None:
        self.run[name] = launch
        self.touches[name] = touches
        self.ops[name] = op
        self.libraries[name] = library
        if moved is not None:
            self.moved[name] = moved

    def drop(self, name: str) -> None:
        for table in (self.run, self.touches, self.moved, self.ops, self.libraries):
            table.pop(name, None)


def random_storage(rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """Standard normal values in the storage type (16-bit types as uint16 bits, truncated)."""
    import cupy

    return device_storage(rng.standard_normal(shape, dtype=cupy.float32), dtype)


def device_storage(x: Any, dtype: str) -> Any:
    """A CuPy float32 array in the storage type: bfloat16 truncated (a timing input needs no
    rounding), float16 rounded by CuPy; both as uint16 bits."""
    import cupy

    if dtype == "float32":
        return x
    if dtype == "bfloat16":
        return (x.view(cupy.uint32) >> 16).astype(cupy.uint16)
    return x.astype(cupy.float16).view(cupy.uint16)


#: Libraries timed beside ours when importable (PyTorch's kernels always are, when torch imports).
PEER_LIBRARIES = ("liger", "quack")
#: Each production op's PyTorch peer in the table.
PEERS = {"softmax": "torch.softmax", "layernorm": "F.layer_norm", "rmsnorm": "F.rms_norm",
         "addrmsnorm": TORCH_ADD_RMS}


def launchers_for(case: BenchCase, progress: TextIO | None = None, *,
               peers: Sequence[str] = ()) -> Launchers:
    """One zero-argument launch per kernel on this case's buffers: the floors, the textbook kernels
    (float32, textbook and l2 sets), the production kernels of the case's storage type, PyTorch's when
    importable, and the ``peers`` libraries' kernels that take the case (the others get a note)."""
    import cupy

    from normprops.cuda.build import module
    from normprops.cuda.layout import PROD_VARIANTS
    from normprops.cuda.prod import ProdKernel
    from normprops.cuda.textbook import THREADS

    rng = cupy.random.default_rng(0)
    shape = (case.rows, case.cols)
    x = random_storage(rng, shape, case.dtype)
    out = cupy.empty_like(x)
    residual = random_storage(rng, shape, case.dtype)
    gamma = random_storage(rng, (case.cols,), case.dtype)
    beta = random_storage(rng, (case.cols,), case.dtype)
    cols, eps = np.uint64(case.cols), np.float32(1e-5)
    nbytes = x.nbytes
    fused_bytes = 2 * 2 * nbytes  # x and residual read, out and residual written
    launchers = Launchers({MEMCPY: lambda: out.data.copy_from_device_async(x.data, nbytes)}, {MEMCPY: 2}, {})
    launchers.ops[MEMCPY] = launchers.libraries[MEMCPY] = ""
    if case.dtype == "float32":
        mod = module("default")
        grid, block = (case.rows,), (THREADS,)
        textbook_args = {"softmax": (x, out, cols), "layernorm": (x, out, gamma, beta, cols, eps),
                     "rmsnorm": (x, out, gamma, cols, eps)}

        def textbook(name: str, op_args: tuple[Any, ...]) -> Callable[[], None]:
            fn = mod.get_function(name)
            return lambda: fn(grid, block, op_args)

        launchers.add(COPY_FLOOR, textbook(COPY_FLOOR, (x, out, cols)), op="", library="")
        if case.set in ("textbook", "l2"):
            for spec in KERNELS:
                if spec.backend == "cuda" and spec.bench and case.runs(spec.op):
                    launchers.add(spec.name, textbook(spec.name, textbook_args[spec.op]), op=spec.op,
                                  library="normprops-textbook", touches=spec.touches)
    for spec in KERNELS:
        if spec.backend != "cuda-prod" or not spec.bench or spec.dtype != case.dtype:
            continue
        op = PROD_VARIANTS[spec.name][0]
        if not case.runs(op):
            continue
        kernel = ProdKernel(op, dtype=case.dtype)
        arrays = kernel.operands(x=x, out=out, residual=residual, gamma=gamma, beta=beta)
        launchers.add(spec.name, kernel.launcher(*arrays, rows=case.rows, cols=case.cols, eps=1e-5), op=op,
                      library="normprops", touches=spec.touches,
                      moved=fused_bytes if op == "addrmsnorm" else None)
    try:
        import torch
        import torch.nn.functional as F

        kind = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[case.dtype]
        tx, tr, tg, tb = (torch.from_dlpack(a).view(kind) for a in (x, residual, gamma, beta))
    except Exception as exc:  # torch is optional: its rows and the peers' are simply absent
        if progress is not None:
            print(f"  no PyTorch rows for {case.name}: {type(exc).__name__}: {exc}", file=progress)
        return launchers
    torch_launch = {"softmax": lambda: torch.softmax(tx, dim=-1),
                    "layernorm": lambda: F.layer_norm(tx, (case.cols,), tg, tb, 1e-5),
                    "rmsnorm": lambda: F.rms_norm(tx, (case.cols,), tg, 1e-5),
                    "addrmsnorm": lambda: F.rms_norm(tx + tr, (case.cols,), tg, 1e-5)}
    for op, launch in torch_launch.items():
        if case.runs(op):
            launchers.add(PEERS[op], launch, op=op, library="torch", touches=4 if op == "addrmsnorm" else 2,
                          moved=fused_bytes if op == "addrmsnorm" else None)
    _add_peers(case, launchers, peers, tx=tx, tr=tr, tg=tg, tb=tb, fused_bytes=fused_bytes)
    return launchers


def _add_peers(case: BenchCase, launchers: Launchers, peers: Sequence[str], *, tx: Any, tr: Any, tg: Any,
               tb: Any, fused_bytes: int) -> None:
    """The peer libraries' kernels for this case's ops; a kernel that cannot take the case, or whose
    binding fails, becomes a note instead of a row."""
    from normprops.backends import peers as peer_registry

    for library in peers:
        for peer in peer_registry.peer_ops(library=library):
            if not case.runs(peer.op):
                continue
            why = peer.unsupported(dtype=case.dtype, cols=case.cols)
            if why is not None:
                launchers.notes.append(Note(case.name, peer.name, f"not run: {why}"))
                continue
            try:
                launch = peer_registry.bind(peer, x=tx, gamma=tg, beta=tb, residual=tr, eps=1e-5)
            except Exception as exc:
                launchers.notes.append(Note(case.name, peer.name, f"not run: {one_line(exc)}"))
                continue
            fused = peer.op == "addrmsnorm"
            launchers.add(peer.name, launch, op=peer.op, library=library, touches=4 if fused else 2,
                          moved=fused_bytes if fused else None)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
