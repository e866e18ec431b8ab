# QuACK's softmax returns NaN for a finite row whose largest logit is about 3.6e9 (torch.softmax: 1.0),
# and its relative error grows with the logits' magnitude rather than with their spread.
import torch
from quack.softmax import softmax

for peak in (1e4, 1e6, 1e8, 3581925120.0):
    x = torch.tensor([[peak, -0.1321, 0.6404, 0.1049]], device="cuda")
    print(f"peak {peak:.3g}: quack {softmax(x)[0].tolist()}  torch {torch.softmax(x, -1)[0].tolist()}")

torch.manual_seed(0)
z = torch.randn(1, 4096, device="cuda", dtype=torch.float64) * 100
for offset in (0.0, 1e4, 1e6):
    y = softmax((z + offset).float()).double()
    exact = torch.softmax(z, -1)  # shift-invariant: the same for every offset
    print(f"offset {offset:8.0e}: max relative error {((y - exact).abs() / exact).max().item():.2e}")
