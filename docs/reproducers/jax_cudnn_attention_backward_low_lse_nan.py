# jax.nn.dot_product_attention(implementation="cudnn"), bfloat16, with a mask: jax.vjp gives NaN
# gradients where every score of a row lies about 128 below zero (each row's log-sum-exp below
# -88.7, so exp(lse) underflows float32), at 320 keys (64 mod 128). Found by the registry hunt
# (jax.attention-cudnn.vjp-bf16 x low_lse, seeds 0 and 1, jax 0.11.2, an H100): B = 1, one head,
# 64 queries, 320 keys, head dim 64, scale 1/8, a mask keeping every key; "non-finite output nan
# where the exact result is 6.271e-16". The same pattern as PyTorch's cuDNN SDPA backward
# (pytorch#196678, torch_sdpa_cudnn_backward_nan.py) and cudnn-frontend#1072. The shift leaves the
# softmax unchanged: coordinate 0 of q is a and of k is -a, adding -scale a^2 to every score.
# This sweeps key lengths, shifts, the mask, and compares with the xla implementation.
import jax
import jax.numpy as jnp
import numpy as np

print("jax", jax.__version__, "on", jax.devices()[0].device_kind)
B, H, T, D = 1, 1, 64, 64
scale = 1 / 8
rng = np.random.default_rng(0)
for keys in (64, 128, 192, 256, 320):
    for shift in (0.0, -100.0, -128.0):
        for masked in (False, True):
            a = round((-shift / scale) ** 0.5)
            q = rng.standard_normal((B, T, H, D))
            k = rng.standard_normal((B, keys, H, D))
            v = rng.standard_normal((B, keys, H, D))
            dout = rng.standard_normal((B, T, H, D))
            q[..., 0], k[..., 0] = a, -a
            mask = jnp.ones((B, 1, T, keys), bool) if masked else None
            q, k, v, dout = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v, dout))
            line = f"keys {keys:3d} shift {shift:6.0f} mask {'yes' if masked else 'no '}:"
            for implementation in ("cudnn", "xla"):
                def out(q, k, v, implementation=implementation):
                    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale,
                                                        implementation=implementation)
                try:
                    _, pullback = jax.vjp(out, q, k, v)
                    nans = [int(jnp.isnan(g.astype(jnp.float32)).sum()) for g in pullback(dout)]
                    line += f"  {implementation}: NaNs in dq, dk, dv {nans}"
                except Exception as exc:  # cuDNN refuses some shapes loudly
                    line += f"  {implementation}: {type(exc).__name__}"
            print(line, flush=True)
