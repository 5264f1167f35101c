"""``activation_offload`` (AgileRL's): the training forward runs under ``torch.autograd.graph.save_on_cpu``,
so activations saved for the backward wait in host memory. On the CPU they are there already: the
step is the same (checked here); the GPU memory it saves is measured by the ``gpu`` test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.models import load_manifest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


def _agent(model_dir: Path, device: str = "cpu", **algo: Any) -> tuple[Any, Any]:
    from agilerl.strategies import select_strategy
    from agilerl_plugin_llm.rollout.grpo import GRPO

    m = load_manifest({
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 6, "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128,
                    "lora_config": {"lora_r": 4, "lora_dropout": 0.0}},
        "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py")},
    })  # fmt: skip
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    return GRPO(m.algorithm, tokenizer=envs.tokenizer, device=device), envs


def _stepped(agent: Any, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The trainable weights after one optimizer step on ``batch`` (loss: -sum of policy log-probs)."""

    def loss(micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return -(agent.logprobs(micro) * micro["loss_mask"]).sum(), {}

    agent.optimize(batch, loss)
    return [p.detach().clone() for p in agent.trainable_parameters()]


def test_on_cpu_the_offloaded_step_is_the_same_step(tiny_model_dir: Path) -> None:
    from agilerl_plugin_llm.rollout.base import pad_trajectories

    plain, envs = _agent(tiny_model_dir)
    offloaded, _ = _agent(tiny_model_dir, activation_offload=True)
    assert isinstance(offloaded.activation_offload(), torch.autograd.graph.save_on_cpu)
    assert not isinstance(plain.activation_offload(), torch.autograd.graph.save_on_cpu)
    offloaded.copy_policy_from(plain)
    start = [p.detach().clone() for p in plain.trainable_parameters()]
    batch = pad_trajectories(plain.rollout(envs.make_train, [0, 0, 1, 1]), plain.pad_id)
    after_plain, after_offloaded = _stepped(plain, batch), _stepped(offloaded, batch)
    assert any(not torch.equal(a, b) for a, b in zip(start, after_plain, strict=True))  # the step moved them
    for a, b in zip(after_plain, after_offloaded, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: on the CPU activations already live in host memory"
)
def test_on_cuda_offloading_lowers_the_peak_gpu_memory_of_a_step(tiny_model_factory: Any) -> None:
    from agilerl_plugin_llm.rollout.base import pad_trajectories

    model_dir = tiny_model_factory(num_hidden_layers=8, hidden_size=256)
    peaks = []
    for offload in (False, True):
        agent, envs = _agent(model_dir, device="cuda", activation_offload=offload, max_output_tokens=32)
        batch = pad_trajectories(agent.rollout(envs.make_train, [0, 0, 1, 1]), agent.pad_id)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        _stepped(agent, batch)
        peaks.append(torch.cuda.max_memory_allocated() - base)
        del agent
        torch.cuda.empty_cache()
    assert peaks[1] < peaks[0], peaks
