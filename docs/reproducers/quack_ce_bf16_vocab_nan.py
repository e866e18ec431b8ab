# QuACK's cross-entropy on bfloat16 logits returns a NaN loss (and NaN gradients) for one ordinary
# row of Qwen's vocabulary, 151936 columns of N(0, 1) logits, where float32 logits of the same
# values give the right loss. Found by the registry hunt (quack.ce-bf16 x vocab, and
# quack.ce.backward-bf16 x vocab, seeds 0 and 1, quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1,
# an H100): "non-finite output nan where the exact result is 12.467". Long rows are split over a
# cluster of thread blocks, as in QuACK's softmax (quack_softmax_long_row_nan.py), which gives NaN at
# some widths past 65536 in bfloat16. This sweeps the released vocabularies (even widths: QuACK's
# bfloat16 kernels refuse an odd one at compile time) at 1, 2 and 8 rows, forward and backward.
import torch
from quack.cross_entropy import cross_entropy

torch.manual_seed(0)
for vocab in (32000, 128256, 151936, 152064, 163840, 256000, 262144):
    for rows in (1, 2, 8):
        x32 = torch.randn(rows, vocab, device="cuda")
        target = torch.randint(0, vocab, (rows,), device="cuda")
        exact = torch.nn.functional.cross_entropy(x32.double(), target, reduction="none")
        line = f"V {vocab:6d} rows {rows}:"
        for dtype in (torch.bfloat16, torch.float32):
            x = x32.to(dtype).requires_grad_(True)
            loss = cross_entropy(x, target, reduction="none")
            (grad,) = torch.autograd.grad(loss.sum(), x)
            err = (loss.double() - exact).abs().max().item()
            line += (f"  {str(dtype)[6:]}: loss NaNs {torch.isnan(loss).sum().item()}, grad NaNs "
                     f"{torch.isnan(grad).sum().item():6d}, largest loss error {err:.3g}")
        print(line, flush=True)
