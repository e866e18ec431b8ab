# Cut Cross-Entropy's bfloat16 loss rounds each product of the target's logit to bfloat16.
# cut_cross_entropy/indexed_dot.py forms x_t = h . w_t as tl.sum((e * c).to(tl.float32)): e and c are
# bfloat16 blocks, so e * c is a bfloat16 block and each of the H products is rounded before the cast.
# The log-sum-exp keeps float32 dots (tl.dot), so the loss lse - x_t carries the target term's
# roundings alone: up to 2^-9 sum |h_k w_tk|, and all of x_t where the products cancel.
# This prints, for a cancelling pair and for random rows, CCE's loss beside the exact one (float64)
# and beside an emulation of exactly that rounding (products rounded to bfloat16, summed in float32).
# cut-cross-entropy 25.1.1; the CPU needs TRITON_INTERPRET=1, whose bfloat16 product is wrong
# (docs/hunting.md): run it on a GPU.
import torch
from cut_cross_entropy import linear_cross_entropy

device = "cuda" if torch.cuda.is_available() else "cpu"
print("torch", torch.__version__, "device", torch.cuda.get_device_name() if device == "cuda" else "cpu")


def exact_and_emulated(h: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
    logits = h.double() @ w.double().T
    exact = torch.logsumexp(logits, 1) - logits.gather(1, target[:, None])[:, 0]
    # The emulation: the same float64 lse, the target's products rounded to bfloat16 one by one.
    products = (h * w[target]).to(torch.bfloat16).float().double()
    emulated = torch.logsumexp(logits, 1) - products.sum(1)
    return exact, emulated


def cce(h: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return linear_cross_entropy(h, w, target, reduction="none", impl="cce", filter_eps=None).double()


# h . w_0 = 64.5 * 1.0078125 - 64 * 1.015625 = 65.00390625 - 65 = 2^-8; in bfloat16 the first
# product rounds to 65 and the target's logit to 0.
h = torch.tensor([[64.5, -64.0]], dtype=torch.bfloat16, device=device)
w = torch.tensor([[1.0078125, 1.015625], [0.0, 0.0]], dtype=torch.bfloat16, device=device)
target = torch.tensor([0], device=device)
exact, emulated = exact_and_emulated(h, w, target)
got = cce(h, w, target)
print(f"cancelling pair: exact {exact.item():.6f}  emulated {emulated.item():.6f}  CCE {got.item():.6f}")

# Random rows: 64 rows, H 256, V 4096, logits of every size up to about 100.
torch.manual_seed(0)
for scale in (0.1, 1.0, 4.0):
    h = (torch.randn(64, 256, device=device) * scale).to(torch.bfloat16)
    w = (torch.randn(4096, 256, device=device) * scale / 4).to(torch.bfloat16)
    target = torch.randint(0, 4096, (64,), device=device)
    exact, emulated = exact_and_emulated(h, w, target)
    got = cce(h, w, target)
    print(f"scale {scale:4}: largest |CCE - exact| {(got - exact).abs().max().item():.3g}, "
          f"largest |CCE - emulated| {(got - emulated).abs().max().item():.3g}, "
          f"largest |exact| {exact.abs().max().item():.3g}")
