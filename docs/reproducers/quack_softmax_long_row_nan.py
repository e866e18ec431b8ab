# QuACK's bfloat16 softmax returns NaN for ordinary rows (values about N(0, 1)) of some widths past
# 65536 columns, where it splits a row over a cluster of 8 or 16 thread blocks; the hunt's shrunk
# counterexamples were 65544, 81928, 131080 and 163848 columns, each 8 (one 16-byte vector) past a
# multiple of 16384. torch.softmax of the same rows is finite.
import torch
from quack.softmax import softmax

torch.manual_seed(0)
for dtype, widths in ((torch.bfloat16, (65536, 65544, 81928, 131072, 131080)), (torch.float32, (65544,))):
    for cols in widths:
        x = torch.randn(2, cols, device="cuda").to(dtype)
        y = softmax(x)
        print(f"{str(dtype):14s} cols {cols:6d}: quack NaNs {torch.isnan(y).sum().item():6d}; "
              f"torch NaNs {torch.isnan(torch.softmax(x, -1)).sum().item()}", flush=True)
