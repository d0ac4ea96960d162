"""The verifier's one-pass readings agree with its piece-by-piece ones: a well-formed wave's requests read
in one pass record what reading them one by one records (and a broken wave is left to the one-by-one
reading, with nothing recorded), and the GDN hand-off's path predecessors found at once where every
segment holds tokens are the ones found piece by piece in packed order."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import cpplan
from cpplan.bench import synthetic
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.verifier.chains import read_each_request, read_whole_wave
from cpplan.verifier.handoff_recount import _predecessors, _predecessors_in_order
from cpplan.verifier.owners import OwnerRuns
from cpplan.verifier.rank_prices import pieces_of
from cpplan.verifier.segments import read_segments, segment_offsets


@pytest.fixture(scope="module")
def masked_waves():
    """A CP2 plan of small GRPO groups whose requests mix gradients, outputs and loss masks: its waves
    and the workload's items by id."""
    plain = synthetic.grpo(
        num_prompts=3, group_size=4, system_tokens=100, prompt_tokens=300, completion_tokens=(50, 200)
    )
    workload = cpplan.Workload(
        items=tuple(
            cpplan.Item(
                id=item.id,
                requests=tuple(
                    cpplan.Request(
                        tokens=r.tokens,
                        grad=bool(k % 3),
                        output=("loss", "logits", "loss", "hidden")[k % 4],
                        loss_mask=(np.arange(r.num_tokens) >= 400).astype(int) if k % 2 else None,
                    )
                    for k, r in enumerate(item.requests)
                ),
            )
            for item in plain.items
        )
    )
    result = cpplan.plan(workload, topology=cpplan.Topology(cp=2), model="qwen3-8b", memory_bytes=80 * 2**30)
    return plan_to_dict(result.problem, result.plan)["waves"], {item.id: item for item in workload.items}


def _coverage_fields(coverage) -> tuple:
    masked = {s: m.tolist() for s, m in coverage.masked_loss.items()}
    tokens = [None if t is None else t.tolist() for t in coverage.tokens]
    return tokens, coverage.grad, coverage.loss, coverage.uses, masked, list(masked), coverage.logical_tokens


def test_a_well_formed_wave_read_in_one_pass_records_what_reading_each_request_records(masked_waves):
    """Every wave of a planner's plan is read in one pass, and its segments' tokens, flags, uses, masked
    logits and logical tokens, and the waves recorded for its requests, are those read one by one."""
    waves, by_id = masked_waves
    assert any(any(r.loss_mask is not None for r in item.requests) for item in by_id.values())
    for w, wave in enumerate(waves):
        segments = read_segments(wave)
        fast_seen, slow_seen, violations = {}, {}, []
        fast = read_whole_wave(w, wave, segments, by_id, fast_seen)
        slow = read_each_request(w, wave, segments, by_id, slow_seen, violations)
        assert fast is not None and violations == []
        assert _coverage_fields(fast) == _coverage_fields(slow)
        assert fast_seen == slow_seen


@pytest.mark.parametrize(
    "name",
    ["token", "chain", "duplicate", "unlisted item", "earlier wave", "short chain", "segment out of range"],
)
def test_a_broken_wave_is_left_to_reading_each_request(masked_waves, name):
    """A wave that reading request by request reports (a token that differs, a broken or short chain, a
    request listed twice or already in an earlier wave, an item not listed, a segment out of range) is
    not read in one pass, and nothing is recorded for its requests."""
    waves, by_id = masked_waves
    wave = copy.deepcopy(waves[0])
    segments = read_segments(wave)
    seen: dict = {}
    first = wave["requests"][0]
    if name == "token":
        second = wave["requests"][1]
        item = by_id[second["item"]]
        tokens = item.requests[second["request"]].tokens.copy()
        tokens[0] += 1  # in the root every request of the wave shares
        requests = list(item.requests)
        requests[second["request"]] = cpplan.Request(tokens=tokens)
        by_id = {**by_id, item.id: cpplan.Item(id=item.id, requests=tuple(requests))}
    elif name == "chain":
        first["segments"] = first["segments"][::-1]
    elif name == "duplicate":
        wave["requests"].append(copy.deepcopy(first))
    elif name == "unlisted item":
        wave["items"].remove(first["item"])
    elif name == "earlier wave":
        seen[(first["item"], first["request"])] = 7
    elif name == "short chain":
        first["segments"] = first["segments"][:-1]
    else:
        first["segments"][-1] = len(segments)
    before = dict(seen)
    assert read_whole_wave(0, wave, segments, by_id, seen) is None
    assert seen == before
    violations: list[str] = []
    read_each_request(0, wave, segments, by_id, dict(seen), violations)
    assert violations


def test_predecessors_at_once_are_the_ones_found_piece_by_piece():
    """On random segment trees (every segment holding tokens; some naming parents that come later, or
    none, as a broken plan may) cut by random ownership runs, each piece's path predecessor found at
    once equals the one found walking the pieces in packed order."""
    rng = np.random.default_rng(5)
    for trial in range(300):
        num_segments = int(rng.integers(1, 25))
        segments = []
        for s in range(num_segments):
            parent = int(rng.integers(-1, s)) if s else -1
            if trial % 3 == 0:
                parent = int(rng.integers(-3, num_segments + 3))
            segments.append((parent, int(rng.integers(0, 50)), int(rng.integers(1, 300))))
        offsets, packed = segment_offsets(segments)
        cuts = np.unique(np.concatenate([[0], rng.integers(0, packed, int(rng.integers(0, 10)))]))
        runs = OwnerRuns(start=cuts, end=np.append(cuts[1:], packed), owner=rng.integers(0, 4, cuts.size))
        pieces = pieces_of(segments, offsets, runs)
        at_once = _predecessors(segments, offsets, pieces)
        assert at_once.tolist() == _predecessors_in_order(segments, offsets, pieces).tolist()
        assert (at_once < np.arange(at_once.size)).all()
