# QuACK's RMS norm with a float32 residual fails to launch on an H200 for rows of 32767 columns
# (and 62015): "launch shared memory exceeds current GPU arch sm_90a allowed". Its Hopper
# configuration (quack/rmsnorm_config.py) keeps a float32 row of up to 32768 columns in one thread
# block and allows for a residual's row on sm_12x only. Without the residual, or in bfloat16, the
# same widths run.
import torch
from quack.rmsnorm import rmsnorm

for dtype in (torch.float32, torch.bfloat16):
    for residual in (False, True):
        for cols in (16384, 24576, 28672, 32767, 32768, 49152, 62015, 65536):
            x = torch.randn(2, cols, device="cuda").to(dtype)
            gamma = torch.ones(cols, device="cuda", dtype=dtype)
            res = torch.randn_like(x) if residual else None
            try:
                out = rmsnorm(x, gamma, residual=res, eps=1e-6, prenorm=residual)
                out = out[0] if isinstance(out, tuple) else out
                torch.cuda.synchronize()
                what = f"ran, NaNs {torch.isnan(out).sum().item()}"
            except Exception as exc:  # the launch error, first line
                what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:110]}"
            print(f"{str(dtype):14s} residual {residual!s:5s} cols {cols:6d}: {what}")
