"""DAPO's dynamic sampling as AgileRL spells it: ``filter_zero_adv`` (with ``adv_filter_eps``) drops the
completions whose advantage carries no signal (every member of a group whose rewards are equal)
before the update; ``whiten_advantages`` and ``adv_clip_range`` post-process the advantages in
AgileRL's order. The GRPO runs here use a real tiny model and a real text env whose rewards are
constant for even seeds (a zero-variance group) and alternate between members for odd seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout.grpo import group_advantages, postprocess_advantages
from agilerl_plugin_llm.rollout.specs import GRPOSpec


class SeedParityEnv:
    """One turn. Even seeds: reward 1 for every reply (no signal). Odd seeds: 0 or 1 by env instance,
    so a group (consecutive instances) always holds both."""

    max_turns = 1
    created = 0

    def __init__(self, constant: bool = False) -> None:
        SeedParityEnv.created += 1
        self.instance = SeedParityEnv.created
        self.constant = constant
        self.seed = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.seed = int(seed or 0)
        return "Say a word.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.constant or self.seed % 2 == 0:
            return "", 1.0, True, False, {}
        return "", float(self.instance % 2), True, False, {}


def spec(**fields: Any) -> GRPOSpec:
    return GRPOSpec.model_validate({"group_size": 4, **fields})


def test_filter_drops_zero_variance_groups_and_small_advantages() -> None:
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    adv = group_advantages(rewards, 4, norm="mean_std")
    mask = torch.ones(8, 3)
    out = postprocess_advantages(adv, mask, spec(filter_zero_adv=True))
    assert out["keep"].tolist() == [False] * 4 + [True] * 4
    assert "keep" not in postprocess_advantages(adv, mask, spec())  # off: nothing is dropped
    # adv_filter_eps: |advantage| <= eps goes too (mean_only: 0.1 - 0.15 = -0.05, 0.2 - 0.15 = 0.05).
    small = group_advantages(torch.tensor([0.1, 0.2, 0.1, 0.2, 0.0, 1.0, 0.0, 1.0]), 4, norm="mean_only")
    out = postprocess_advantages(small, mask, spec(filter_zero_adv=True, adv_filter_eps=0.1))
    assert out["keep"].tolist() == [False] * 4 + [True] * 4


def test_whitening_and_clipping_of_advantages() -> None:
    adv = torch.tensor([3.0, -1.0, 0.0, 0.0])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    clipped = postprocess_advantages(adv, mask, spec(adv_clip_range=0.5))["advantages"]
    assert clipped.tolist() == [0.5, -0.5, 0.0, 0.0]
    # Whitening over the kept rows' policy tokens (the dropped rows 2 and 3 do not count).
    out = postprocess_advantages(adv, mask, spec(filter_zero_adv=True, whiten_advantages=True))
    kept = out["advantages"][:2, 1:]
    assert float(kept.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(kept.std()) == pytest.approx(1.0, abs=1e-5)
    assert torch.all(out["advantages"][:, 0] == 0)  # prompt tokens get nothing


def test_negative_eps_and_clip_range_are_refused() -> None:
    with pytest.raises(ValueError, match="adv_filter_eps"):
        spec(adv_filter_eps=-0.1)
    with pytest.raises(ValueError, match="adv_clip_range"):
        spec(adv_clip_range=0.0)


def build_agent(model_dir: Path, run_dir: Path, **algo: Any) -> tuple[Any, Any]:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    env_config = algo.pop("env_config", {})
    data = {
        "algorithm": {"name": "GRPO", "batch_size": 4, "group_size": 4, "lr": 0.01, "beta": 0.0,
                      "max_grad_norm": 0.0, "max_output_tokens": 3, "temperature": 1.0,
                      "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 64},
        "environment": {"env_type": "rollout", "entrypoint": f"{Path(__file__).resolve()}:SeedParityEnv",
                        "env_config": env_config},
        "training": {"max_steps": 1, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip
    m = load_manifest(data)
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    return agent, env


def one_iteration(agent: Any, env: Any) -> tuple[dict[str, float], list[int], list[list[torch.Tensor]]]:
    """One learn_iteration; the rows that reached the update and the gradients at each optimizer step."""
    rows: list[int] = []
    update = agent.update

    def counted(batch: dict[str, torch.Tensor]) -> dict[str, float]:
        rows.append(len(batch["input_ids"]))
        return update(batch)  # type: ignore[no-any-return]

    agent.update = counted
    grads: list[list[torch.Tensor]] = []
    agent.optimizer.register_step_pre_hook(
        lambda _o, _a, _k: grads.append([p.grad.detach().clone() for p in agent.trainable_parameters()])
    )
    torch.manual_seed(0)
    stats = agent.learn_iteration(env)
    return stats, rows, grads


def test_grpo_drops_groups_with_identical_rewards_and_averages_over_the_rest(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    off, env_off = build_agent(tiny_model_dir, tmp_path / "off")
    on, env_on = build_agent(tiny_model_dir, tmp_path / "on", filter_zero_adv=True)
    seeds = on._iteration_seeds(4)
    constant_groups = sum(s % 2 == 0 for s in seeds)
    assert 0 < constant_groups < 4, seeds  # the run seed gives both kinds of group
    stats_off, rows_off, grads_off = one_iteration(off, env_off)
    stats_on, rows_on, grads_on = one_iteration(on, env_on)
    assert rows_off == [16]
    assert rows_on == [16 - 4 * constant_groups]  # the zero-variance groups never reach the loss
    assert stats_on["filtered"] == pytest.approx(constant_groups / 4)
    assert stats_on["reward"] == pytest.approx(stats_off["reward"])  # same rollouts
    # The dropped rows had zero advantage: the gradient is the same sum, averaged over the kept rows.
    scale = 16 / (16 - 4 * constant_groups)
    for a, b in zip(grads_off[0], grads_on[0], strict=True):
        assert torch.allclose(a * scale, b, atol=1e-6, rtol=1e-4)
    assert any(float((a - b).abs().max()) > 1e-6 for a, b in zip(grads_off[0], grads_on[0], strict=True))


def test_an_iteration_with_only_constant_groups_takes_no_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    agent, env = build_agent(tiny_model_dir, tmp_path, filter_zero_adv=True, env_config={"constant": True})
    before = [p.detach().clone() for p in agent.trainable_parameters()]
    stats, rows, grads = one_iteration(agent, env)
    assert (rows, grads, stats["filtered"], stats["optimizer_steps"]) == ([], [], 1.0, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(before, agent.trainable_parameters(), strict=True))
