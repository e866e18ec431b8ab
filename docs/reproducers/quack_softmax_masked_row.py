# QuACK's softmax returns NaN for a row that is masked (-inf) everywhere but one column, once the
# row is wide enough to be split over several thread blocks (torch.softmax: 1.0 at that column).
import torch
from quack.softmax import softmax

for cols in (1024, 3076, 8192, 32768):
    x = torch.full((1, cols), float("-inf"), device="cuda")
    x[0, 0] = 0.9
    y = softmax(x)
    print(f"cols {cols:6d}: quack y[0] = {y[0, 0].item()}, NaNs {torch.isnan(y).sum().item()}; "
          f"torch y[0] = {torch.softmax(x, -1)[0, 0].item()}")
