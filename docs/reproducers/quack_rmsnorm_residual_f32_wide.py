# QuACK's RMS norm with a float32 residual fails to launch on an H200 for rows of 32767 columns
# (and 62015): "launch shared memory exceeds current GPU arch sm_90a allowed". Its Hopper
# configuration (quack/rmsnorm_config.py) keeps a float32 row of up to 32768 columns in one thread
# block and allows for a residual's row on sm_12x only. Without the residual the same width runs, and
# in bfloat16 an even width near it (odd bfloat16 widths fail to compile: a known bug of its own).
import torch
from quack.rmsnorm import rmsnorm

for dtype, residual, cols in ((torch.float32, True, 16384), (torch.float32, True, 32767),
                              (torch.float32, True, 62015), (torch.float32, False, 32767),
                              (torch.float32, True, 32768), (torch.bfloat16, True, 32768)):
    x = torch.randn(2, cols, device="cuda").to(dtype)
    gamma = torch.ones(cols, device="cuda", dtype=dtype)
    try:
        if residual:
            out, _ = rmsnorm(x, gamma, residual=torch.randn_like(x), eps=1e-6, prenorm=True)
        else:
            out = rmsnorm(x, gamma, eps=1e-6)
        torch.cuda.synchronize()
        what = f"ran, NaNs {torch.isnan(out).sum().item()}"
    except Exception as exc:  # the launch error (the DSL prints the shared memory it asked for first)
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        what = f"{type(exc).__name__}: {first[:150]}"
    print(f"{str(dtype):14s} residual {residual!s:5s} cols {cols:6d}: {what}", flush=True)
