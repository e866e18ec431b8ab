# PyTorch's CUDA RMS norm backward (compute_gI in aten/src/ATen/native/cuda/layer_norm_kernel.cu)
# adds dy * gamma * x * rstd into the projection's row sum, multiplied left to right: dy gamma x is
# formed before rstd scales it. Where that product passes FLT_MAX (3.4e38), the sum is inf and dx
# is inf or NaN, although each term dy gamma x rstd, and the exact dx, are far inside float32's
# range. One row of 64 columns near 1e6, gamma 3e3 and dy near 1e29 is enough.
import torch
import torch.nn.functional as F

N = 64
torch.manual_seed(0)
x = (1e6 + 1e3 * torch.randn(1, N, device="cuda")).requires_grad_(True)
gamma = torch.full((N,), 3e3, device="cuda")
for scale in (1e28, 1e29):  # |dy gamma x|: 3e37 to 4.5e37, then 3e38 to 4.5e38 (FLT_MAX 3.4e38)
    dy = scale * (1 + 0.5 * torch.rand(1, N, device="cuda"))
    (dx,) = torch.autograd.grad(F.rms_norm(x, (N,), gamma, 1e-6), (x,), dy)
    x64 = x.detach().double().cpu().requires_grad_(True)
    (exact,) = torch.autograd.grad(F.rms_norm(x64, (N,), gamma.double().cpu(), 1e-6), (x64,),
                                   dy.double().cpu())
    print(f"dy ~ {scale:g}: dx[0, 0] = {dx[0, 0].item():.6g}, exact {exact[0, 0].item():.6g}, "
          f"non-finite dx: {(~dx.isfinite()).sum().item()} of {N}, exact |dx| at most "
          f"{exact.abs().max().item():.3g}")
