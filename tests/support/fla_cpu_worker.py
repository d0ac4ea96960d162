"""Subprocess of tests/hf/test_hf_fla_cpu.py: fla's kernels on the CPU under Triton's interpreter.

Run as ``TRITON_INTERPRET=1 python -m tests.support.fla_cpu_worker``; prints one JSON line: either
``{"import_error": ...}`` when fla or triton does not import, or the measured differences between
the fla and pure-torch paths and how many times fla's kernel ran.
"""

from __future__ import annotations

import json
import os
import sys


def _max_diff(a, b) -> float:
    return float((a - b).detach().abs().max())


def _delta_rule(torch, gated_delta_rule) -> dict:
    """fla against pure torch on packed sequences with their own initial states, values and gradients."""
    gen = torch.Generator().manual_seed(0)
    tokens, key_heads, heads, dim = 40, 1, 2, 8
    inputs = [
        torch.randn(tokens, key_heads, dim, generator=gen),
        torch.randn(tokens, key_heads, dim, generator=gen),
        torch.randn(tokens, heads, dim, generator=gen),
        torch.nn.functional.logsigmoid(torch.randn(tokens, heads, generator=gen)),
        torch.rand(tokens, heads, generator=gen),
        torch.randn(3, heads, dim, dim, generator=gen),
    ]
    results = {}
    for kernels in ("fla", "torch"):
        xs = [x.clone().requires_grad_() for x in inputs]
        out, final = gated_delta_rule(
            *xs[:5], cu_seqlens=[0, 7, 25, 40], initial_state=xs[5], kernels=kernels
        )
        grads = torch.autograd.grad(out.sum() + (final**2).sum(), xs)
        results[kernels] = (out, final, grads)
    (o1, s1, g1), (o2, s2, g2) = results["fla"], results["torch"]
    scale = max(float(g.abs().max()) for g in g2)
    return {
        "out": _max_diff(o1, o2),
        "state": _max_diff(s1, s2),
        "grad": max(_max_diff(a, b) for a, b in zip(g1, g2, strict=True)) / scale,
    }


_FLA_LOGPROBS: dict = {}  # the fla runs' log-probs per mode, to compare the two modes


def _packed(torch, gdn_handoff: str = "rounds", *, slow: bool = False) -> dict:
    """``packed_logprobs`` of a one-layer Qwen3.5 (a GDN layer) on a CP-2 zigzag wave with shared
    prefixes, its states passed as ``gdn_handoff`` says (``slow``: decaying slowly enough to carry
    across pieces, :func:`~tests.support.hf_models.slow_decay`): fla against pure torch, log-probs and
    parameter gradients."""
    import cpplan
    from cpplan.hf import packed_logprobs
    from tests.support.hf_models import mixed_workload, plan, slow_decay, tiny_model, with_gdn_handoff, zigzag

    workload = mixed_workload(scale=0.15)  # 357 packed tokens: GRPO groups, a prefix chain, a duplicate
    model = tiny_model("qwen3_5", layers=1).float()
    if slow:
        slow_decay(model)
    result = with_gdn_handoff(zigzag(plan(workload, 2), 2), gdn_handoff)
    runs = {}
    for kernels in ("fla", "torch"):
        model.zero_grad()
        logprobs = packed_logprobs(model, result, workload, wave=0, kernels=kernels)
        sum(v.sum() for v in logprobs.values()).backward()
        runs[kernels] = (
            logprobs,
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        )
    (lp1, g1), (lp2, g2) = runs["fla"], runs["torch"]
    scale = max(float(g.abs().max()) for g in g2.values())
    _FLA_LOGPROBS[gdn_handoff, slow] = lp1
    return {
        "logprobs": max(_max_diff(lp1[k], lp2[k]) for k in lp2),
        "grad": max(_max_diff(g1[n], g2[n]) for n in g2) / scale,
        "sources_on_other_ranks": _sources_on_other_ranks(cpplan.materialize_wave(result, workload, wave=0)),
    }


def _sources_on_other_ranks(batches) -> int:
    """Pieces starting from a state computed on another rank."""
    return sum(int(((b.state_source_rank >= 0) & (b.state_source_rank != b.rank)).sum()) for b in batches)


def main() -> None:
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
        import triton
    except Exception as error:  # any import failure is reported: the test skips on it
        print(json.dumps({"import_error": f"{type(error).__name__}: {error}"}))
        return
    import torch

    from tests.support.triton_interpreter import enable

    enable()
    torch.set_num_threads(1)
    import cpplan.hf.delta_rule as delta_rule

    real = delta_rule._fla_function()
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    delta_rule._fla_function = lambda: counted
    report = {"versions": {"triton": triton.__version__, "torch": torch.__version__}}
    report["delta_rule"] = _delta_rule(torch, delta_rule.gated_delta_rule)
    report["delta_rule_calls"] = len(calls)
    report["packed"] = _packed(torch)
    report["packed_calls"] = len(calls) - report["delta_rule_calls"]
    before = len(calls)
    report["parallel"] = _packed(torch, "parallel", slow=True)
    report["parallel_calls"] = len(calls) - before
    _packed(torch, "rounds", slow=True)
    rounds, parallel = _FLA_LOGPROBS["rounds", True], _FLA_LOGPROBS["parallel", True]
    report["parallel"]["vs_rounds"] = max(_max_diff(parallel[k], rounds[k]) for k in rounds)
    print(json.dumps(report))


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    sys.exit(main())
