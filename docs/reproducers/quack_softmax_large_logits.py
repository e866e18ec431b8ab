# QuACK's softmax returns NaN for a finite row whose largest logit is about 3.6e9 (torch.softmax: 1.0),
# and its relative error grows with the logits' magnitude rather than with their spread.
import torch
from quack.softmax import softmax

for peak in (1e4, 1e6, 1e8, 3581925120.0):
    x = torch.tensor([[peak, -0.1321, 0.6404, 0.1049]], device="cuda")
    print(f"peak {peak:.3g}: quack {softmax(x)[0].tolist()}  torch {torch.softmax(x, -1)[0].tolist()}")

torch.manual_seed(0)
z = torch.randn(1, 4096, device="cuda") * 10  # logits spread over about +-40
for offset in (0.0, 1e2, 1e4, 1e6):
    x = z + offset  # float32 logits; the exact softmax of these very values, in float64:
    exact = torch.softmax(x.double(), -1)
    err = lambda y: ((y.double() - exact).abs() / exact).max().item()
    print(f"offset {offset:7.0e}: max relative error quack {err(softmax(x)):.1e}, "
          f"torch {err(torch.softmax(x, -1)):.1e}")
