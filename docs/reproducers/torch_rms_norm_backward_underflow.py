# PyTorch's F.rms_norm backward on the CPU (autograd of x * rsqrt(mean(x^2) + eps) * w) forms
# rstd^3 * sum(dy * w * x): once that underflows, dx loses its projection term, although the
# forward and dx itself are far inside float32's range. A row of one column has dx = 0 exactly.
import torch
import torch.nn.functional as F

for x0, dy0 in ((1e3, 1.0), (1e13, 1.0), (1e14, 1.0), (1e17, 1.0), (1322.0, 3e-34)):
    x = torch.tensor([[x0]], requires_grad=True)
    w = torch.ones(1)
    y = F.rms_norm(x, (1,), w, 1.1920928955078125e-07)
    (dx,) = torch.autograd.grad(y, (x,), torch.tensor([[dy0]]))
    print(f"x {x0:.4g}, dy {dy0:.4g}: y {y.item():.6g}, dx {dx.item():.6g} (exact 0): "
          f"{abs(dx.item()) / (dy0 / x0):.2g} of dy * rstd, the terms that cancel")

x = torch.full((1, 8), 1e15, requires_grad=True)
x.data[0, 0] = 2e15
dy = torch.linspace(-1, 1, 8).reshape(1, 8)
(dx,) = torch.autograd.grad(F.rms_norm(x, (8,), torch.ones(8), 1e-6), (x,), dy)
x64, dy64 = x.detach().double(), dy.double()
r = (x64.pow(2).mean() + 1e-6).rsqrt()
exact = r * (dy64 - x64 * r * (dy64 * x64 * r).mean())
error = (dx.double() - exact).abs().max() / exact.abs().max()
print(f"8 columns at 1e15: dx off by {error.item():.2g} of its largest element")
