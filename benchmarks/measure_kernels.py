"""Kernel time vs local tokens on one GPU (run on an H200); evidence for the card's kernel_half_tokens.
One 4-layer period of Qwen3.6-35B-A3B (3 GDN + 1 attention mixer projections, 4 MoE blocks: router,
256 experts top-8 as a batched GEMM with uniform routing, shared expert), forward + input gradients
(frozen base weights, as under LoRA), timed eagerly with CUDA events; fit t(T) = a*T + b."""

import json

import torch

F = torch.nn.functional
d, dev, bf = 2048, "cuda", torch.bfloat16


def W(*shape):
    """A random bf16 weight on the GPU."""
    return torch.randn(*shape, device=dev, dtype=bf) * 0.02


gdn_in, gdn_out = W(d, 12352), W(4096, d)
att_in, att_out = W(d, 9216), W(4096, d)
router, e1, e2, s1, s2 = W(d, 256), W(256, d, 1024), W(256, 512, d), W(d, 1024), W(512, d)


def moe(x):
    t = x.shape[0]
    (x @ router).float().softmax(-1)
    idx = torch.randint(0, t, (8 * t,), device=dev)
    h = torch.bmm(x[idx].view(256, -1, d), e1)
    y = torch.bmm(F.silu(h[..., :512]) * h[..., 512:], e2).view(-1, d)
    hs = x @ s1
    return x + (F.silu(hs[:, :512]) * hs[:, 512:]) @ s2 + torch.zeros_like(x).index_add(0, idx, y)


def period(x):
    for kind in ("g", "g", "g", "a"):
        w_in, w_out = (gdn_in, gdn_out) if kind == "g" else (att_in, att_out)
        x = x + (x @ w_in)[:, :4096] @ w_out
        x = moe(x)
    return x


def timed(fn, reps):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps / 1e3


def fwd_bwd(t):
    x = W(t, d).requires_grad_()
    return lambda: period(x).float().square().mean().backward()


out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "period": []}
big = torch.empty(2**30, device=dev, dtype=torch.float32)
out["copy_bytes_per_s"] = 2 * big.numel() * 4 / timed(lambda: big.clone(), 5)
for t in (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536):
    out["period"].append([t, timed(fwd_bwd(t), 20 if t <= 8192 else 5)])
    print(out["period"][-1], flush=True)
for t in (8192, 32768):
    q = W(1, 16, t, 256).requires_grad_()
    k, v = W(1, 2, t, 256), W(1, 2, t, 256)
    s = timed(
        lambda q=q, k=k, v=v: (
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
        ),
        5,
    )
    out.setdefault("attention_s_per_pair_fwd_bwd", []).append([t, s / (t * (t + 1) / 2)])
print(json.dumps(out))
