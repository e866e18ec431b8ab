# torch.compile(flex_attention) on the CPU fails to compile its second call when the batch size
# changes and the mask_mod indexes a captured tensor: Dynamo makes the batch size dynamic, and the
# C++ that Inductor's CPU FlexAttention template generates reads an undeclared variable (g++:
# "'cur_kvSplitSize3' was not declared in this scope", the number varying). A change of the
# lengths alone compiles.
# Met with torch 2.13.0+cpu, gcc 12.2; normprops keeps the batch size static
# (torch._dynamo.mark_static(t, 0)), after which both calls compile and are correct.
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

print("torch", torch.__version__)
compiled = torch.compile(flex_attention)
for b in (1, 2):
    q, k, v = (torch.randn(b, 2, 16, 16) for _ in range(3))
    mask = torch.rand(b, 1, 16, 16) < 0.7

    def mask_mod(batch, head, q_idx, kv_idx):
        return mask[batch, 0, q_idx, kv_idx]

    block_mask = create_block_mask(mask_mod, b, None, 16, 16, device="cpu")
    try:
        with torch.no_grad():
            compiled(q, k, v, block_mask=block_mask)
        print(f"B={b}: compiled and ran")
    except Exception as exc:  # torch._inductor.exc.InductorError: CppCompileError
        line = next((s for s in str(exc).splitlines() if "error:" in s), str(exc).splitlines()[0])
        print(f"B={b}: {type(exc).__name__}: {line.strip()[:160]}")
