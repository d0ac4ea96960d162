"""Why a trainer's plan stores a repeated prompt once per completion: the planner's own prices of the
plan's waves with every prompt shared against the waves it chose (:func:`unshared_reason`)."""

from __future__ import annotations

import logging

from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.workload import Workload


def repeats_a_prompt(workload: Workload) -> bool:
    """Whether some item holds more than one request (the TRL adapter's item: one prompt, its
    completions), so that full sharing would store a prompt once for several rows."""
    return any(len(item.requests) > 1 for item in workload.items)


def unshared_reason(planner, result, workload: Workload) -> str | None:
    """``None`` when the plan shares some prompt or no prompt repeats; else why it shares none, from
    the planner's prices: the plan's waves priced with every sharing decision taken (``full``) against
    the plan's own, in seconds, or that the shared waves exceed the memory budget."""
    plan = result.plan
    if plan.packed_tokens < plan.logical_tokens or not repeats_a_prompt(workload):
        return None
    problem = Problem.build(workload, planner.settings)
    shared_s = unshared_s = 0.0
    shared_tokens, over = 0, 0
    for wave in plan.waves:
        fitting, _ = best_wave(problem, wave.items, ["full"])
        if fitting is None:
            over += 1
            continue
        shared_s, unshared_s = shared_s + fitting.cost_s, unshared_s + wave.cost_s
        shared_tokens += fitting.packed_tokens
    fix = (
        "to change it, name a card measured on this model (card=...), or let Planner.observe correct "
        "the prices"
    )
    if over:
        return (
            f"{over} of {plan.num_waves} waves exceed the memory budget ({planner.memory_bytes} bytes) with "
            f"each prompt stored once; {fix}"
        )
    why = (
        "its extra segments cost more than the tokens it saves"
        if shared_s > unshared_s
        else "the planner's search did not reach the cheaper shared layout"
    )
    return (
        f"card {planner.settings.model.name} prices the waves with each prompt stored once "
        f"({shared_tokens} packed tokens) at {shared_s:.9f} s, against {unshared_s:.9f} s stored once per "
        f"completion ({plan.packed_tokens} tokens; sharing priced {(shared_s - unshared_s) * 1e9:+,.0f} ns: "
        f"{why}); {fix}"
    )


class UnsharedNote:
    """A trainer's note of why its plans share no repeated prompt: :meth:`check` logs
    :func:`unshared_reason` as a warning on ``log`` the first time it has one, and never again."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.logged = False

    def check(self, planner, result, workload: Workload) -> None:
        """Log why ``result`` shares nothing, the first time a plan does although prompts repeat."""
        if self.logged:
            return
        reason = unshared_reason(planner, result, workload)
        if reason is not None:
            self.logged = True
            self.log.warning("cpplan: the plan stores every repeated prompt once per completion: %s", reason)


__all__ = ["UnsharedNote", "repeats_a_prompt", "unshared_reason"]
