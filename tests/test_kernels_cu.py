"""kernels.cu must build: nvcc to PTX for sm_75 and sm_90 (skipped where nvcc is absent), and every
kernel the registry names must be defined there."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from normprops._cuda import source_text
from normprops.specs import KERNELS

NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_kernels_cu_compiles_to_ptx(arch: str, tmp_path: Path) -> None:
    source = tmp_path / "kernels.cu"
    source.write_text(source_text())
    proc = subprocess.run([NVCC, "-std=c++17", "-ptx", f"-arch={arch}", "-o", str(tmp_path / "k.ptx"),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    for spec in KERNELS:
        if spec.backend == "cuda":
            assert f".entry {spec.name}(" in ptx, f"{spec.name} missing from the PTX"


def test_registry_kernels_are_extern_c_in_kernels_cu() -> None:
    defined = set(re.findall(r'extern "C" __global__ void (\w+)\(', source_text()))
    wanted = {spec.name for spec in KERNELS if spec.backend == "cuda"} | {"copyFloor"}
    assert wanted <= defined, wanted - defined


def test_no_math_h_macros_for_nvrtc() -> None:
    # NVRTC has no <math.h>: INFINITY / NAN would not compile there even though nvcc accepts them.
    code = re.sub(r"//.*", "", source_text())
    assert not re.search(r"\b(INFINITY|NAN|HUGE_VALF)\b", code)
