# torch.compile's F.rms_norm backward (PyTorch's decomposition of _fused_rms_norm_backward, which
# Inductor compiles: dx = (g - (xhat / N) * sum(g * xhat)) * rstd, g = dy * w) divides xhat by N
# before the row's sum multiplies it. Where xhat_j / N falls below FLT_MIN, that quotient rounds
# absolutely (by up to half the smallest subnormal), and the sum scales the rounding into a dx_j
# that lies in float32's normal range. The same float32 arithmetic in another order keeps the digits.
import numpy as np
import torch
import torch.nn.functional as F

N = 65
x = torch.tensor([(-1.0) ** j * (8.0 + j % 5) for j in range(N)])
x[1], x[N - 1] = 2.0, torch.finfo(torch.float32).tiny  # the last x is FLT_MIN
w = torch.ones(N)
w[1] = 300000.0
dy = torch.zeros(1, N)
dy[0, 1] = 1.0
eps = 2.0**-23


def dx_of(fn, device):
    xd = x.reshape(1, N).to(device).requires_grad_(True)
    y = fn(xd, (N,), w.to(device), eps)
    (dx,) = torch.autograd.grad(y, (xd,), dy.to(device))
    return dx.cpu()[0].double()


x64, w64, dy64 = x.double(), w.double(), dy[0].double()
rstd = 1.0 / torch.sqrt((x64 * x64).mean() + eps)
xhat, g = x64 * rstd, dy64 * w64
exact = (g - xhat * (g * xhat).mean()) * rstd
device = "cuda" if torch.cuda.is_available() else "cpu"
compiled = torch.compile(F.rms_norm, dynamic=True)
for name, fn in (("eager", F.rms_norm), ("torch.compile", compiled)):
    dx = dx_of(fn, device)
    rel = abs(dx[N - 1] - exact[N - 1]) / abs(exact[N - 1])
    print(f"{name:13s} ({device}): dx[{N - 1}] = {dx[N - 1].item():.9g}, exact {exact[N - 1].item():.9g}, "
          f"relative error {rel.item():.2g} ({rel.item() / 2**-24:.0f} half-ulps)")
f32 = np.float32
xs, gs, r = x.numpy(), g.float().numpy(), f32(1) / np.sqrt(np.mean(x.numpy() ** 2, dtype=f32) + f32(eps))
xh = xs * r
s = np.sum(xh * gs, dtype=f32)
for name, v in (("(xhat / N) * sum", (gs - (xh / f32(N)) * s) * r),
                ("(xhat * sum) / N", (gs - (xh * s) / f32(N)) * r)):
    print(f"numpy float32, {name}: dx[{N - 1}] = {v[N - 1]:.9g}")
