"""The cases ``normprops bench`` times: the textbook's two 64 MiB shapes, L2-scaled ones, the
decode-sized 64 x 8192 and the model-shaped set; plain functions of the L2 size (no GPU needed to
list them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from normprops.dtypes import get_dtype

__all__ = ["BenchCase", "bench_cases", "l2_bytes_here", "SETS", "TIMED_OPS", "NORM_OPS", "L2_MULTIPLE",
           "DEFAULT_L2_BYTES", "DECODE_SHAPE", "MODEL_HIDDEN", "MODEL_ODD_HIDDEN", "MODEL_VOCAB",
           "MODEL_VOCAB_DTYPES", "MODEL_DECODE_ROWS"]

TEXTBOOK_CASE_BYTES = 64 << 20
#: The H200's L2 (60 MiB): the case sizes when no GPU can be asked (``--list-cases`` on a laptop).
DEFAULT_L2_BYTES = 60 << 20
L2_MULTIPLE = 16  # a case of at least 16x the L2 each way streams from DRAM: % of memcpy means something


#: Case sets: the textbook's two 64 MiB float32 cases; L2-scaled ones (float32, bfloat16, float16);
#: the decode-sized 64 x 8192 rows (float32 and bfloat16); model-shaped rows (``model``).
SETS = ("textbook", "l2", "l2-bf16", "l2-f16", "decode", "model")
DECODE_SHAPE = (64, 8192)
TIMED_OPS = ("softmax", "layernorm", "rmsnorm", "addrmsnorm")
NORM_OPS = ("layernorm", "rmsnorm", "addrmsnorm")
#: Hidden sizes of current models (Llama 3 8B 4096, 70B 8192; gpt-oss 2880; Mistral 5120; DeepSeek
#: V3 7168; ...), normalized in bfloat16.
MODEL_HIDDEN = (2048, 2880, 4096, 5120, 7168, 8192)
#: Widths no 16-byte vector divides: 4097 leaves a one-element tail, 5121 an odd tail on an odd width.
MODEL_ODD_HIDDEN = (4097, 5121)
#: Vocabularies (Llama 2 32000, Llama 3 128256, Qwen 2 151936): softmax over logits, the widest on
#: the streaming path; in bfloat16 and float32 (logits are often kept in float32 for sampling).
MODEL_VOCAB = (32000, 128256, 151936)
MODEL_VOCAB_DTYPES = ("bfloat16", "float32")
#: Rows at decode: one sequence, then batches.
MODEL_DECODE_ROWS = (1, 8, 64, 256)


@dataclass(frozen=True)
class BenchCase:
    name: str  # "16384x1024", "524288x1024 bf16"
    set: str  # one of SETS
    rows: int
    cols: int
    dtype: str = "float32"
    ops: tuple[str, ...] = ()  # the ops timed on it; () is every op
    decode: bool = False  # decode-sized (a few rows): launch cost matters, graphs are timed (--graphs)
    dram_bound: bool = False  # at least 16x the L2 each way: % of memcpy is a target

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def mib(self) -> float:
        return self.elements * get_dtype(self.dtype).itemsize / 2**20

    def runs(self, op: str) -> bool:
        return not self.ops or op in self.ops


_SUFFIX = {"float32": "", "bfloat16": " bf16", "float16": " f16"}


def _case(set_name: str, total_bytes: int, cols: int, dtype: str = "float32", **kw: Any) -> BenchCase:
    rows = total_bytes // get_dtype(dtype).itemsize // cols
    return BenchCase(f"{rows}x{cols}{_SUFFIX[dtype]}", set_name, rows, cols, dtype, **kw)


def _rows_case(set_name: str, rows: int, cols: int, dtype: str, ops: tuple[str, ...], *, l2_bytes: int,
               decode: bool) -> BenchCase:
    big = rows * cols * get_dtype(dtype).itemsize >= L2_MULTIPLE * l2_bytes
    return BenchCase(f"{rows}x{cols}{_SUFFIX[dtype]}", set_name, rows, cols, dtype, ops, decode=decode,
                     dram_bound=big)


def _model_cases(l2_bytes: int, scaled: int) -> list[BenchCase]:
    """Each width at the decode rows and at prefill: the fewest rows holding ``scaled`` bytes (the
    L2 sets' size, at least 16x the L2)."""
    out = []
    widths = [(c, "bfloat16", NORM_OPS) for c in (*MODEL_HIDDEN, *MODEL_ODD_HIDDEN)]
    widths += [(v, d, ("softmax",)) for d in MODEL_VOCAB_DTYPES for v in MODEL_VOCAB]
    for cols, dtype, ops in widths:
        for rows in MODEL_DECODE_ROWS:
            out.append(_rows_case("model", rows, cols, dtype, ops, l2_bytes=l2_bytes, decode=True))
        prefill = -(-scaled // (cols * get_dtype(dtype).itemsize))
        out.append(_rows_case("model", prefill, cols, dtype, ops, l2_bytes=l2_bytes, decode=False))
    return out


def bench_cases(*, l2_bytes: int, sets: Sequence[str] = ("textbook", "l2")) -> list[BenchCase]:
    """The textbook's two 64 MiB cases; cases of 1024, 4096 and 16384 columns whose size each way is the
    smallest power of two at least 16x the L2 (1 GiB for the H200's 60 MiB), in float32 ("l2"),
    bfloat16 ("l2-bf16") or float16 ("l2-f16"); the decode-sized 64 x 8192 ("decode", float32 and
    bfloat16); model-shaped cases ("model": :data:`MODEL_HIDDEN` and :data:`MODEL_ODD_HIDDEN` for the
    norms in bfloat16, :data:`MODEL_VOCAB` for softmax, each at :data:`MODEL_DECODE_ROWS` rows and at
    prefill, the fewest rows of at least that power of two). Every case of the textbook and L2 sets moves
    the same bytes. A case named twice (64x8192 bf16 is in "decode" and "model") is kept once, with
    the ops of both."""
    if l2_bytes < 1:
        raise ValueError(f"l2_bytes must be positive but was {l2_bytes}")
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise ValueError(f"sets must be among {SETS} but included {unknown}")
    out: list[BenchCase] = []
    scaled = 1 << math.ceil(math.log2(L2_MULTIPLE * l2_bytes))
    for name in sets:
        if name == "textbook":
            out += [_case("textbook", TEXTBOOK_CASE_BYTES, cols) for cols in (1024, 4096)]
        elif name.startswith("l2"):
            dtype = {"l2": "float32", "l2-bf16": "bfloat16", "l2-f16": "float16"}[name]
            out += [_case(name, scaled, c, dtype, dram_bound=True) for c in (1024, 4096, 16384)]
        elif name == "decode":
            rows, cols = DECODE_SHAPE
            out += [_case("decode", rows * cols * get_dtype(d).itemsize, cols, d, decode=True)
                    for d in ("float32", "bfloat16")]
        else:
            out += _model_cases(l2_bytes, scaled)
    kept: dict[str, BenchCase] = {}
    for case in out:
        if case.name in kept:  # the same rows, columns and type: time it once, with both sets' ops
            first = kept[case.name]
            ops = () if not first.ops or not case.ops else tuple(dict.fromkeys(first.ops + case.ops))
            kept[case.name] = BenchCase(first.name, first.set, first.rows, first.cols, first.dtype, ops,
                                        decode=first.decode or case.decode,
                                        dram_bound=first.dram_bound or case.dram_bound)
        else:
            kept[case.name] = case
    return list(kept.values())


def l2_bytes_here() -> tuple[int, str]:
    """The L2 size of this machine's GPU, or the H200's where none is usable, with where it came
    from. Never raises: cases can be listed on a machine without a GPU."""
    from normprops.cuda.build import cuda_status

    ok, why = cuda_status()
    if ok:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return int(props["l2CacheSize"]), f"the GPU's: {why}"
    return DEFAULT_L2_BYTES, f"no usable GPU here, so the H200's 60 MiB is assumed; {why}"
