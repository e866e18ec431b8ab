# PyTorch's cuDNN attention backward (torch.nn.attention.SDPBackend.CUDNN_ATTENTION) returns NaN in
# every element of dq when an attention mask is given, the key length is 64 mod 128 and every
# row's log-sum-exp lies below -88.7 (here a float mask of -128 on every key: each softmax is the
# unmasked one, so the exact gradients are those of the unshifted call). dk and dv stay finite;
# the math backend's dq is finite. Reported upstream as pytorch/pytorch#196678 (a regression in
# torch 2.11 on H100 and H200, bfloat16 and float16).
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())
torch.manual_seed(0)
for lk in (128, 192, 256, 320):
    q, k, v = (torch.randn(1, 2, n, 64, device="cuda", dtype=torch.bfloat16) for n in (64, lk, lk))
    for shift in (0.0, -128.0):
        mask = torch.full((1, 1, 64, lk), shift, device="cuda", dtype=torch.bfloat16)
        grads = {}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)):
            qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).float().sum().backward()
            grads[name] = (qq.grad, kk.grad, vv.grad)
        nan = [int(g.isnan().sum()) for g in grads["cudnn"]]
        print(f"Lk {lk} ({lk % 128} mod 128), mask {shift:+.0f}: cuDNN NaN in dq/dk/dv {nan} of "
              f"{grads['cudnn'][0].numel()}; math NaN in dq {int(grads['math'][0].isnan().sum())}")
