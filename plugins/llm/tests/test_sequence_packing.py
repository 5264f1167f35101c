"""``use_sequence_packing`` (AgileRL's): the log-prob forwards run padding-free, the sequences of a
micro-batch packed into shared rows. Same per-token log-probs, losses and gradients as the padded
forward within :data:`TOLERANCE` (float32, sdpa and eager, with and without LoRA), on a tiny local
model with sequences of different lengths; optimizer steps of CISPO, LLMPPO, SFT and DPO agree with
their unpacked twins (:data:`STEP_TOLERANCE`); a model whose attention would mix packed sequences is
refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.models import load_manifest
from agilerl.strategies import select_strategy
from agilerl_plugin_llm.algorithms.base import sequence_logprobs
from agilerl_plugin_llm.model import load_model
from agilerl_plugin_llm.packing import PackingUnsupportedError, check_packing, pack_rows, packed_decoder_hidden
from agilerl_plugin_llm.rollout.base import pad_trajectories

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
TWO_TURN = f"{EXAMPLES / 'two_turn_env.py'}:TwoTurnEnv"

#: Largest |packed - padded| accepted on a log-prob or on the loss (a weighted sum of 57 log-probs),
#: float32. Measured here: 0 to 3e-6 (sdpa and eager, with and without LoRA; printed by the test).
TOLERANCE = 1e-5
#: Largest difference accepted in a gradient tensor, relative to its largest entry: the backward sums
#: the same terms in another order. Measured here: 3e-7 to 5e-7.
GRAD_TOLERANCE = 1e-4

#: After optimizer steps: AdamW divides each gradient element by its own running scale, so a 1e-6
#: difference in an element whose gradient is near zero becomes a step difference of up to lr.
#: Accepted: the packed and padded weights differ by at most this fraction of how far they moved
#: (measured here: CISPO 2.5e-3 after 4 steps of lr 0.01, LLMPPO 2e-4, SFT and DPO below 1e-3).
STEP_TOLERANCE = 1e-2

LENGTHS = [12, 3, 7, 20, 5, 9, 1]


def padded_batch(lengths: list[int], *, vocab: int = 300, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Right-padded rows of these lengths; the loss mask covers each row's second half (its "reply")."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    loss = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(6, vocab, (n,), generator=gen)
        mask[i, :n] = 1
        loss[i, n // 2 : n] = 1
    return ids, mask, loss


def test_pack_rows_places_every_real_token_once_in_rows_no_wider_than_the_batch() -> None:
    ids, mask, _ = padded_batch(LENGTHS)
    left = torch.zeros_like(ids)  # the same rows left-padded: packing reads the mask, either side
    left_mask = torch.zeros_like(mask)
    for i, n in enumerate(LENGTHS):
        left[i, ids.shape[1] - n :] = ids[i, :n]
        left_mask[i, ids.shape[1] - n :] = 1
    for batch, attention in ((ids, mask), (left, left_mask)):
        packed = pack_rows(batch, attention, pad_id=0)
        assert packed.input_ids.shape[1] == max(LENGTHS)  # never wider than the padded batch
        assert packed.computed_tokens < batch.numel()
        assert packed.input_ids.shape[0] == 3  # 57 real tokens in rows of 20: 20 | 12+7+1 | 9+5+3
        back = packed.gather(packed.input_ids)  # every real token where it came from, 0 at padding
        assert torch.equal(back, batch * attention)
        positions = packed.gather(packed.position_ids)
        assert torch.equal(positions[attention.bool()], ((attention.cumsum(-1) - 1) * attention)[attention.bool()])
        # Each row's sequences are disjoint spans: every real token occupies its own packed slot.
        slots = packed.row[attention.bool()] * 1000 + packed.col[attention.bool()]
        assert slots.unique().numel() == int(attention.sum())


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("lora", [False, True])
def test_packed_logprobs_loss_and_gradients_equal_the_padded_ones(tiny_model_dir: Path, attn: str, lora: bool) -> None:
    torch.manual_seed(0)  # LoRA's A matrices
    model = load_model(tiny_model_dir, attn_implementation=attn,
                       lora_config={"lora_r": 4, "lora_dropout": 0.0} if lora else None)  # fmt: skip
    if lora:  # LoRA's B starts at zero: give the adapter weight so its gradients are not trivially equal
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    ids, mask, loss_mask = padded_batch(LENGTHS)
    weights = torch.linspace(-1.0, 1.0, ids.numel()).view(ids.shape)  # a loss that weighs every token differently
    results = []
    for pack in (False, True):
        model.zero_grad()
        logp = sequence_logprobs(model, ids, mask, loss_mask, temperature=0.7, pack=pack)
        loss = (logp * weights).sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logp.detach(), loss.detach(), grads))
    (lp0, loss0, g0), (lp1, loss1, g1) = results
    values = max(float((lp0 - lp1).abs().max()), float((loss0 - loss1).abs()))
    # Each gradient tensor's largest difference, relative to its largest entry.
    grads = max(float((g0[n] - g1[n]).abs().max()) / max(float(g0[n].abs().max()), 1e-12) for n in g0)
    print(f"{attn}, lora={lora}: |packed - padded| log-probs and loss {values:.2e}, gradients {grads:.2e} (relative)")
    assert values <= TOLERANCE
    assert grads <= GRAD_TOLERANCE
    assert bool((lp0 != 0).any()) and torch.equal(lp0 != 0, lp1 != 0)  # the same tokens scored


def test_a_model_whose_masks_ignore_the_packing_is_refused(tiny_model_dir: Path) -> None:
    """A decoder that numbers every row 0..W-1 itself (dropping the packed positions) lets packed
    sequences see each other: the one-time check catches it instead of training on it."""

    class Renumbering(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *, input_ids: torch.Tensor, position_ids: torch.Tensor, **kwargs: Any) -> Any:
            del position_ids
            return self.inner(input_ids=input_ids, **kwargs)

    decoder = load_model(tiny_model_dir).model
    ids, mask, _ = padded_batch(LENGTHS)
    packed = pack_rows(ids, mask)
    packed_decoder_hidden(decoder, packed)  # the real decoder passes the check
    with pytest.raises(PackingUnsupportedError, match="use_sequence_packing: false"):
        packed_decoder_hidden(Renumbering(decoder), packed)
    with pytest.raises(PackingUnsupportedError):  # and the check is not skipped by the previous pass
        check_packing(Renumbering(decoder), lambda i, p: decoder(input_ids=i, use_cache=False).last_hidden_state)


# --- the algorithms: optimizer steps packed and padded ---------------------------------------------


def build(data: dict[str, Any]) -> tuple[Any, Any]:
    m = load_manifest(data)
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(m.algorithm, env=envs, manifest=m,
                                                      runtime=AlgorithmBuildRuntime(seed=0))  # fmt: skip
    return agent, envs


def rollout_manifest(model_dir: Path, run_dir: Path, name: str, **algo: Any) -> dict[str, Any]:
    algorithm: dict[str, Any] = {"name": name, "batch_size": 4, "max_output_tokens": 8, "temperature": 1.0,
                                 "gradient_checkpointing": False, "beta": 0.04, "update_epochs": 2,
                                 "mini_batch_size": 2, **algo}  # fmt: skip
    if name == "CISPO":
        algorithm.update(group_size=2, lr=0.01, mini_batch_size=1)  # mini-batches in prompts (2 rows each)
    if name == "LLMPPO":
        algorithm.update(lr_actor=0.01, lr_critic=0.01)
    return {
        "algorithm": algorithm,
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        # Prompts of different lengths: the episodes' lengths differ.
        "environment": {
            "env_type": "reasoning",
            "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
            "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"),
            "max_reward": 1.0,
        },
        "training": {"max_steps": 1, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }


def trainable(agent: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in agent.model.named_parameters() if p.requires_grad}


def largest_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.parametrize("name", ["CISPO", "LLMPPO"])
def test_rollout_updates_packed_equal_padded(name: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """The same batch of episodes (lengths differ), two epochs of mini-batch steps with a reference KL:
    the packed and padded agents end with the same weights and the same loss statistics."""
    plain, envs = build(rollout_manifest(tiny_model_dir, tmp_path / "a", name))
    packed, _ = build(rollout_manifest(tiny_model_dir, tmp_path / "b", name, use_sequence_packing=True))
    packed.load_state_dict(plain.state_dict())  # the same starting weights and optimizer
    seeds, repeats = plain.episodes_per_iteration()
    trajs = plain.rollout(envs.make_train, [s for s in seeds for _ in range(repeats)], generation_seed=0)
    lengths = {len(t.token_ids) for t in trajs}
    assert len(lengths) > 1, lengths  # padding to pack away
    for i, t in enumerate(trajs):  # an untrained model scores 0 everywhere: give the update a signal
        t.rewards = [float(i % 3 == 0)]
    start = trainable(plain)
    stats = []
    for agent in (plain, packed):
        batch = pad_trajectories(trajs, agent.pad_id)
        if repeats > 1:
            batch["prefix_len"] = torch.tensor([t.prompt_len for t in trajs])
            batch["group_id"] = torch.arange(len(trajs)) // repeats
        rewards = torch.tensor([t.total_reward for t in trajs])
        batch.update(agent.advantages(trajs, rewards, repeats))
        batch.pop("keep", None)
        stats.append(agent.update(batch))
    gap = largest_gap(trainable(plain), trainable(packed))
    moved = largest_gap(start, trainable(plain))
    print(f"{name}: weights moved {moved:.2e}; |packed - padded| after the update {gap:.2e}; "
          f"loss {stats[0]['loss']:.6f} vs {stats[1]['loss']:.6f}")  # fmt: skip
    assert moved > 1e-3  # the update did something
    assert gap <= STEP_TOLERANCE * moved
    assert stats[0]["loss"] == pytest.approx(stats[1]["loss"], rel=1e-4)
    assert stats[0]["optimizer_steps"] == stats[1]["optimizer_steps"] >= 2


@pytest.mark.parametrize("name", ["SFT", "DPO"])
def test_dataset_updates_packed_equal_padded(name: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    if name == "SFT":
        lines = [{"prompt": "what is " + "big " * i, "response": "the answer is " + "one " * (4 - i)} for i in range(4)]
    else:
        lines = [{"prompt": "say " + "a " * i, "chosen": "eight " * (i + 1), "rejected": "no"} for i in range(4)]
    rows.write_text("".join(json.dumps(r) + "\n" for r in lines))
    agents = []
    for pack in (False, True):
        data = {
            "algorithm": {"name": name, "batch_size": 4, "lr": 0.01, "gradient_checkpointing": False,
                          "use_sequence_packing": pack},
            "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 128},
            "environment": {"env_type": "dataset", "dataset_path": str(rows), "train_test_split": 1.0},
            "training": {"max_steps": 1, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": str(tmp_path / name)},
        }  # fmt: skip
        agent, envs = build(data)
        agents.append((agent, envs))
    (plain, envs), (packed, _) = agents
    packed.load_state_dict(plain.state_dict())
    batch = envs.next_batch(4)
    assert bool((batch["attention_mask"] == 0).any())  # rows of different lengths
    before = trainable(plain)
    losses = [plain.learn(batch)["loss"], packed.learn(batch)["loss"]]
    moved, gap = largest_gap(before, trainable(plain)), largest_gap(trainable(plain), trainable(packed))
    print(f"{name}: weights moved {moved:.2e}; |packed - padded| after the step {gap:.2e}; losses {losses}")
    assert moved > 1e-3
    assert gap <= STEP_TOLERANCE * moved
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


# --- training through agilerl train ----------------------------------------------------------------


def test_cispo_trains_with_packing_from_a_manifest(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    data = rollout_manifest(tiny_model_dir, tmp_path / "run", "CISPO", use_sequence_packing=True,
                            advantage_granularity="turn")  # fmt: skip
    # Two turns of replies: AgileRL's multi-turn CISPO manifests pack such episodes.
    data["environment"] = {"env_type": "multiturn", "entrypoint": TWO_TURN, "env_config": {"target": "eight"}}
    data["training"].update(max_steps=2, evo_steps=2)
    code, out, err = run_cli("train", write_manifest(data))
    assert code == 0, out + err
    assert (tmp_path / "run" / "last.pt").is_file()


def test_the_benchmark_packs_the_padding_away_with_the_same_logprobs() -> None:
    """``python -m agilerl_plugin_llm.packing_bench`` (docs/llm.md's figures), at a tiny size."""
    from agilerl_plugin_llm.packing_bench import measure

    r = measure(rows=6, shortest=8, longest=48, repeats=1, hidden=32, layers=1, vocab=500)
    assert r["real_tokens"] == sum(round(8 + 40 * i / 5) for i in range(6))
    assert r["padded_tokens"] == 6 * 48
    assert r["real_tokens"] <= r["packed_tokens"] < r["padded_tokens"]
    assert r["max_logprob_diff"] <= TOLERANCE


def test_flex_attention_trains_on_the_cpu_through_sdpa(tiny_model_dir: Path) -> None:
    """AgileRL's packing manifests ask for ``attn_implementation: flex_attention``; torch's FlexAttention
    has no backward on the CPU, so there the model loads with sdpa (the same attention) and trains."""
    model = load_model(tiny_model_dir, attn_implementation="flex_attention", device="cpu")
    assert model.config._attn_implementation == "sdpa"
    ids, mask, loss_mask = padded_batch(LENGTHS)
    logp = sequence_logprobs(model, ids, mask, loss_mask, pack=True)
    logp.sum().backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())
