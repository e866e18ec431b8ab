# PyTorch's CUDA RMS norm backward shares the layer norm's compute_gI
# (aten/src/ATen/native/cuda/layer_norm_kernel.cu): it forms N * gamma * dy for every element and
# multiplies by rstd / N at the end. Where N |dy gamma| passes FLT_MAX, dx is inf although the exact
# dx is far inside float32's range. One large dy in a row of 4096 columns is enough.
import torch
import torch.nn.functional as F

N = 4096
torch.manual_seed(0)
x = torch.randn(1, N, device="cuda", requires_grad=True)
gamma = torch.ones(N, device="cuda")
for big in (1e34, 1e35):  # N * 1e34 = 4.1e37 < FLT_MAX = 3.4e38 < N * 1e35 = 4.1e38
    dy = torch.ones(1, N, device="cuda")
    dy[0, 0] = big
    (dx,) = torch.autograd.grad(F.rms_norm(x, (N,), gamma, 1e-5), (x,), dy)
    x64 = x.detach().double().cpu().requires_grad_(True)
    (exact,) = torch.autograd.grad(F.rms_norm(x64, (N,), gamma.double().cpu(), 1e-5), (x64,),
                                   dy.double().cpu())
    print(f"dy[0, 0] = {big:g}: dx[0, 0] = {dx[0, 0].item():.6g}, exact {exact[0, 0].item():.6g}")
