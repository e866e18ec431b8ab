"""Whether two versions of a CUDA source compile to the same machine code, kernel by kernel, without
a GPU: both are compiled by nvcc for one architecture with the IEEE build's options, and the
``.text.<kernel>`` sections of the two cubins are compared byte for byte. A change meant to touch
only names, comments or layout (renamed template parameters, entry points spelled out) must give
"identical" for every kernel; then every measurement of the older code still holds. Usage:
    git show COMMIT:normprops/cuda/prod.cu > /tmp/old_prod.cu
    python tools/same_code.py /tmp/old_prod.cu normprops/cuda/prod.cu [--arch sm_90]
Exit status 0 when every kernel's code is identical, 1 otherwise."""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# nvcc's spelling of the NVRTC options of normprops.cuda.build.OPTIONS["default"].
NVCC_OPTIONS = ("-std=c++17", "-ftz=false", "-prec-div=true", "-prec-sqrt=true")


def cubin(source: Path, arch: str, workdir: Path) -> bytes:
    out = workdir / (source.stem + f".{len(list(workdir.iterdir()))}.cubin")
    subprocess.run(["nvcc", *NVCC_OPTIONS, f"-arch={arch}", "-cubin", "-o", str(out), str(source)],
                   check=True)
    return out.read_bytes()


def text_sections(elf: bytes) -> dict[str, bytes]:
    """The ``.text.*`` sections of a 64-bit little-endian ELF image, by kernel name."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]

    def name(offset: int) -> str:
        start = names_at + offset
        return elf[start:elf.index(b"\0", start)].decode()

    return {name(h[0])[len(".text."):]: elf[h[4]:h[4] + h[5]] for h in headers
            if name(h[0]).startswith(".text.")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    if shutil.which("nvcc") is None:
        print("same_code: nvcc is not on PATH; install the CUDA toolkit", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        old = text_sections(cubin(args.old, args.arch, Path(tmp)))
        new = text_sections(cubin(args.new, args.arch, Path(tmp)))
    only_old, only_new = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    same = len(old.keys() & new.keys()) - len(changed)
    print(f"{same} kernels identical, {len(changed)} changed, {len(only_old)} only in {args.old}, "
          f"{len(only_new)} only in {args.new}")
    for label, names in (("changed", changed), ("only old", only_old), ("only new", only_new)):
        if names:
            print(f"  {label}: {', '.join(names)}")
    return 0 if not (changed or only_old or only_new) else 1


if __name__ == "__main__":
    sys.exit(main())
