# Liger-Kernel's RMS norm backward (liger_kernel/ops/rms_norm.py, _rms_norm_backward_kernel) forms
# sum(dy * w * x) over the row from x itself and multiplies it by rstd^2 / N only afterwards. Where
# that sum passes FLT_MAX (3.4e38), dx is inf or NaN although the exact dx is far inside float32's
# range. One row of 512 columns near 1e5, with w of 5e3 and dy near 3e28, is enough.
#
# LigerRMSNormFunction's backward writes dx over dy unless in_place=False (its documented option),
# so the float64 reference is taken first and the call passes in_place=False.
import torch
from liger_kernel.ops.rms_norm import LigerRMSNormFunction

N = 512
torch.manual_seed(0)
x = (1e5 + 1e3 * torch.randn(1, N, device="cuda")).requires_grad_(True)
w = torch.full((N,), 5e3, device="cuda")
for scale in (1e26, 3e28):  # N * 1e5 * 5e3 * 1e26 = 2.6e37 < FLT_MAX < N * 1e5 * 5e3 * 3e28
    dy = scale * (1 + 0.5 * torch.rand(1, N, device="cuda"))
    x64 = x.detach().double().cpu().requires_grad_(True)
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double().cpu()
    (exact,) = torch.autograd.grad(y64, (x64,), dy.double().cpu())
    y = LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    (dx,) = torch.autograd.grad(y, (x,), dy)
    print(f"dy ~ {scale:g}: dx[0, 0] = {dx[0, 0].item():.6g}, exact {exact[0, 0].item():.6g}, "
          f"non-finite dx: {(~dx.isfinite()).sum().item()} of {N}, exact |dx| at most "
          f"{exact.abs().max().item():.3g}")
