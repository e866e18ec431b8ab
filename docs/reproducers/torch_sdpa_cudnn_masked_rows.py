# PyTorch's cuDNN attention (torch.nn.attention.SDPBackend.CUDNN_ATTENTION) gives a query row whose
# boolean mask keeps no key a nonzero output; the math and memory-efficient backends give that row
# zeros. Two ways to reach such a row: key padding that keeps no key of a query (here query 1), and
# a bottom-right causal mask with more queries than keys (the first Lq - Lk queries keep none).
# Seen with torch 2.11 (cuDNN 9.19) on H100 and H200, bfloat16 and float16.
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())
torch.manual_seed(0)
BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION))
for dtype in (torch.bfloat16, torch.float16):
    for lq, lk, how in ((4, 64, "key padding"), (6, 4, "causal, bottom-right")):
        q, k, v = (torch.randn(1, 2, n, 64, device="cuda", dtype=dtype) for n in (lq, lk, lk))
        if how == "key padding":
            mask = torch.ones(1, 1, lq, lk, dtype=torch.bool, device="cuda")
            mask[:, :, 1] = False
        else:  # query i keeps key j when j <= i - (lq - lk)
            mask = torch.ones(lq, lk, dtype=torch.bool, device="cuda").tril(diagonal=lk - lq)[None, None]
        empty = ~mask[0, 0].any(dim=-1)
        for name, backend in BACKENDS:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            rows = out[0, :, empty].float()
            where = empty.nonzero().flatten().tolist()
            print(f"{str(dtype):15} {how:22} {name:9}: rows with no kept key {where}, "
                  f"largest |out| there {rows.abs().max().item():.4g}")
