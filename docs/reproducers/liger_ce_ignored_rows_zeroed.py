# Liger-Kernel's cross-entropy writes zeros over an ignored row of its input logits, even when the
# logits take no gradient (requires_grad False: evaluation, or a loss computed for logging). The
# kernel stores 0 over a row whose target is ignore_index before it checks HAS_GRADIENTS; the rows
# it does not ignore are left as they were. A caller that reads the logits after the loss (metrics,
# sampling) finds that row zeroed.
# Seen with liger-kernel 0.8.5 on an H100 (torch 2.11) and on the CPU under TRITON_INTERPRET=1
# (torch 2.13, triton 3.9).
import torch
from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU needs TRITON_INTERPRET=1
print("torch", torch.__version__, "device", device)
logits = torch.tensor([[0.5, -1.0, 2.0], [1.0, 2.0, 3.0]], device=device)
target = torch.tensor([-100, 2], device=device)  # row 0 ignored
before = logits.clone()
# (input, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
#  return_z_loss, return_token_accuracy, return_predicted_tokens)
loss, *_ = LigerCrossEntropyFunction.apply(logits, target, None, -100, 0.0, 0.0, "none", None,
                                           False, False, False)
print("requires_grad:", logits.requires_grad, " loss per row:", loss.tolist())
print("logits before:", before.tolist())
print("logits after: ", logits.tolist())
print("row 0 zeroed in place:", bool((logits[0] == 0).all() and (before[0] != 0).any()))
