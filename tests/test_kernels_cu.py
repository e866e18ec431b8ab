"""The CUDA sources must build: nvcc to PTX for sm_75 and sm_90 (skipped where nvcc is absent), each
defining every kernel the Python side launches from it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from normprops.cuda.build import SOURCES, source_text, unit_text
from normprops.cuda.layout import PROD_VARIANTS
from normprops.cuda.prod import DTYPE_CODES, PACKED_VPTS, VPTS, decode_entry_points, off_grid_entry_points
from normprops.specs import KERNELS

NVCC = shutil.which("nvcc")


def _entries(source: str) -> set[str]:
    """The kernel names the Python side launches from ``source``."""
    if source == "kernels.cu":
        return {spec.name for spec in KERNELS if spec.backend == "cuda"} | {"copyFloor"}
    if source == "spin_wait.cu":
        return {"spinWait"}
    if source == "prod_decode.cu":
        return decode_entry_points()
    names = set()
    for op, dtype, _ in PROD_VARIANTS.values():
        if (op == "rmsnormbf16acc") != (source == "prod_kept_bad.cu"):
            continue
        vpts = VPTS if op == "rmsnormbf16acc" else (0, *VPTS)
        names |= {f"{op}_{DTYPE_CODES[dtype]}_v{v}" for v in vpts}
        if dtype != "float32" and op != "rmsnormbf16acc":
            names |= {f"{op}_{DTYPE_CODES[dtype]}_p{v}" for v in PACKED_VPTS}
    if source == "prod.cu":
        names |= off_grid_entry_points()
    return names


@pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("source", SOURCES)
def test_cuda_sources_compile_to_ptx(source: str, arch: str, tmp_path: Path) -> None:
    path = tmp_path / source
    path.write_text(unit_text(source))
    proc = subprocess.run([NVCC, "-std=c++17", "-ptx", f"-arch={arch}", "-o", str(tmp_path / "k.ptx"),
                           str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    for name in _entries(source):
        assert f".entry {name}(" in ptx, f"{name} missing from the PTX of {source}"


def test_registry_kernels_are_extern_c_in_kernels_cu() -> None:
    defined = set(re.findall(r'extern "C" __global__ void (\w+)\(', source_text()))
    wanted = _entries("kernels.cu")
    assert wanted <= defined, wanted - defined


@pytest.mark.parametrize("source", SOURCES)
def test_no_math_h_macros_or_headers_for_nvrtc(source: str) -> None:
    # NVRTC has no <math.h>: INFINITY / NAN would not compile there even though nvcc accepts them;
    # and no header is needed (cuda_fp16.h may not be on NVRTC's path).
    code = re.sub(r"//.*", "", source_text(source))
    assert not re.search(r"\b(INFINITY|NAN|HUGE_VALF)\b", code)
    assert "#include" not in code


# prod.cu's A/B candidates (tools/sweep_prod.py --variants): each set of macros must build the entry
# points it changes for sm_90 without spilling (a spill would decide the timing, not the design):
# every cluster softmax, the bfloat16 norms off the 16-byte grid (float16's layer norm at 8 vectors
# spills 40 bytes under NP_SHIFTED_WIDE: bfloat16 is the one measured), and the bfloat16 decode
# kernels.
def _cluster_entries() -> list[str]:
    from normprops.cuda.prod import entry_point
    from normprops.cuda.shape import CLUSTER_SIZES, CLUSTER_VPT

    return [entry_point("softmax", dtype, CLUSTER_VPT, packed=dtype != "float32", cluster=n)
            for dtype in DTYPE_CODES for n in CLUSTER_SIZES]


def _bf16_off_grid_entries() -> list[str]:
    return sorted(n for n in off_grid_entry_points() if "_bf16_" in n)


def _bf16_decode_entries() -> list[str]:
    return sorted(n for n in decode_entry_points() if "_bf16_" in n)


def _bf16_split_decode_entries() -> list[str]:
    """NP_DECODE_COLD's measured kernels: the unsplit 8-vector layer norm (no model width takes it at
    decode) saves registers around the out-of-line call, 86-92 bytes on its ordinary path."""
    return [n for n in _bf16_decode_entries() if not n.startswith("layernorm_bf16_p8_d")]


CANDIDATES = [(("NP_CLUSTER_PUSH",), "prod.cu", _cluster_entries),
              (("NP_CLUSTER_PUSH", "NP_CLUSTER_HELD16"), "prod.cu", _cluster_entries),
              (("NP_SHIFTED_WIDE",), "prod.cu", _bf16_off_grid_entries),
              (("NP_DECODE_HELD",), "prod_decode.cu", _bf16_decode_entries),
              (("NP_DECODE_FLAT", "NP_DECODE_HELD"), "prod_decode.cu", _bf16_decode_entries),
              (("NP_DECODE_COLD",), "prod_decode.cu", _bf16_split_decode_entries),
              (("NP_DECODE_COLD", "NP_DECODE_FLAT", "NP_DECODE_HELD"), "prod_decode.cu",
               _bf16_split_decode_entries)]


@pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH")
@pytest.mark.parametrize(("macros", "source", "entries"), CANDIDATES,
                         ids=["+".join(m) for m, _, _ in CANDIDATES])
def test_candidates_build_without_spills(macros: tuple[str, ...], source: str, entries,
                                         tmp_path: Path) -> None:
    path = tmp_path / source
    path.write_text(unit_text(source))
    ptx = tmp_path / "k.ptx"
    proc = subprocess.run([NVCC, "-std=c++17", "-ptx", "-arch=sm_90", *(f"-D{m}" for m in macros),
                           "-o", str(ptx), str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    names = entries()
    ptxas = Path(NVCC).with_name("ptxas")
    proc = subprocess.run([str(ptxas), "-arch=sm_90", "-v", *(f"--entry={n}" for n in names), "-o",
                           str(tmp_path / "k.cubin"), str(ptx)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # ptxas -v: "Compiling entry function 'NAME' for 'sm_90'", "Function properties for NAME", then
    # "N bytes stack frame, N bytes spill stores, N bytes spill loads"
    spills = dict(re.findall(r"entry function '(\w+)'[^\n]*\n[^\n]*\n[^\n]*?(\d+) bytes spill stores",
                             proc.stderr))
    assert set(spills) == set(names)
    assert {n: int(b) for n, b in spills.items() if int(b)} == {}
