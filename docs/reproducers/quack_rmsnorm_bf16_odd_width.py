# QuACK's rmsnorm and layer norm fail to compile for some bfloat16 row widths (float32 is fine).
import torch
from quack.rmsnorm import layernorm_fwd, rmsnorm

for cols in (1, 2, 3, 4, 8, 4097, 4098):
    x = torch.randn(2, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(cols, device="cuda", dtype=torch.bfloat16)
    for name, call in (("rmsnorm", lambda: rmsnorm(x, w, eps=1e-6)),
                       ("layernorm", lambda: layernorm_fwd(x, w.float(), torch.zeros_like(w).float(), 1e-6))):
        try:
            call()
            print(f"{name} bf16 cols={cols}: ok")
        except Exception as exc:
            print(f"{name} bf16 cols={cols}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:120]}")
