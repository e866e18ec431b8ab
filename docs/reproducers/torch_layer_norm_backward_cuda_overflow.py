# PyTorch's CUDA layer norm backward (compute_gI in aten/src/ATen/native/cuda/layer_norm_kernel.cu)
# forms N * gamma * dy for every element and multiplies by rstd / N at the end. Where N |dy gamma|
# passes FLT_MAX, dx is inf although the exact dx, about |dy gamma| rstd, is far inside float32's
# range. One large dy in a row of 4096 columns is enough. The backward that torch.compile generates
# shares it: PyTorch's decomposition of native_layer_norm_backward, which Inductor compiles, forms
# grad_x_hat * N too (torch/_decomp/decompositions.py).
import torch
import torch.nn.functional as F

N = 4096
torch.manual_seed(0)
x = torch.randn(1, N, device="cuda")
gamma, beta = torch.ones(N, device="cuda"), torch.zeros(N, device="cuda")
dy = torch.ones(1, N, device="cuda")
dy[0, 0] = 1e35  # N * 1e35 = 4.1e38 > FLT_MAX = 3.4e38

x64 = x.double().cpu().requires_grad_(True)
(exact,) = torch.autograd.grad(F.layer_norm(x64, (N,), gamma.double().cpu(), beta.double().cpu(), 1e-5),
                               (x64,), dy.double().cpu())

for name, layer_norm in (("eager", F.layer_norm), ("torch.compile", torch.compile(F.layer_norm))):
    xg = x.clone().requires_grad_(True)
    (dx,) = torch.autograd.grad(layer_norm(xg, (N,), gamma, beta, 1e-5), (xg,), dy)
    print(f"{name}: dx[0, 0] = {dx[0, 0].item():.6g}, exact {exact[0, 0].item():.6g}")
