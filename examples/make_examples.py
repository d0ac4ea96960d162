"""Regenerate the bundled example workloads (deterministic): ``python examples/make_examples.py``."""

from pathlib import Path

from cpplan.bench.synthetic import grpo, to_jsonl

HERE = Path(__file__).parent

if __name__ == "__main__":
    workload = grpo(
        num_prompts=6,
        group_size=4,
        system_tokens=512,
        prompt_tokens=(1024, 3072),
        completion_tokens=(128, 768),
        seed=7,
    )
    (HERE / "grpo.jsonl").write_text(to_jsonl(workload))
    print(
        f"examples/grpo.jsonl: {workload.num_items} items, {workload.num_requests} requests, "
        f"{workload.num_tokens:,} tokens"
    )
