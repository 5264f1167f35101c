"""AgileRL's LLM manifest fields with AgileRL's meaning: each accepted field changes what runs (the
tests fail if it were ignored), each one that cannot work here is refused by name at validation;
and the outcome for every upstream LLM manifest in ``shared/agilerl-manifests``."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout.base import pad_trajectories
from agilerl_plugin_llm.rollout.grpo import normalised_loss_sum, policy_loss, pooled_log_ratio, turn_group_advantages
from agilerl_plugin_llm.rollout.harness import Trajectory

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "llm"
UPSTREAM = ROOT.parent / "shared" / "agilerl-manifests"
if not UPSTREAM.is_dir():  # a worktree's ../shared, or the main checkout's sibling
    UPSTREAM = Path("/work/shared/agilerl-manifests")
TWO_TURN = f"{EXAMPLES / 'two_turn_env.py'}:TwoTurnEnv"

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_GEM = importlib.util.find_spec("gem") is not None


def rollout_manifest(model_dir: Path, run_dir: Path, **algo: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 4, "temperature": 1.0, "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": 2, "evo_steps": 2, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifest(data)
    return [f"{p.path}: {p.message}" for p in info.value.problems]


# --- the upstream manifests --------------------------------------------------------------------------

#: Where gem-llm (the gem extra) is missing, GEM game manifests also get its install message.
GEM = [] if HAS_GEM else ["gem-llm"]


def hub(field: str, repo_id: str, *, dataset: bool = False) -> list[str]:
    """A Hub id the manifest names: refused where the local Hugging Face cache lacks it (no downloads)."""
    from agilerl_plugin_llm.hf_cache import dataset_cached, hub_snapshot

    cached = dataset_cached(repo_id) if dataset else hub_snapshot(repo_id) is not None
    return [] if cached else [f"{field}: '{repo_id}' is not a local path"]


DPO_ROWS = hub("environment.dataset", "HumanLLMs/Human-Like-DPO-Dataset", dataset=True)
QWEN = "network.pretrained_model_name_or_path"

#: file -> None (validates unchanged) or the substrings the refusal must contain (one per problem).
UPSTREAM_LLM: dict[str, list[str] | None] = {
    # its rubric, reward.py, is not among AgileRL's published files
    "configs/training/llm_finetuning/grpo.yaml": [
        *hub("environment.dataset", "Jiayi-Pan/Countdown-Tasks-3to4", dataset=True),
        "environment.rubric_file_path: no such file: reward.py",
        *hub(QWEN, "Qwen/Qwen2.5-0.5B-Instruct"),
    ],
    "configs/training/llm_finetuning/dpo.yaml": [*DPO_ROWS, *hub(QWEN, "Qwen/Qwen2.5-0.5B")] or None,
    "configs/training/sft.yaml": [*DPO_ROWS, *hub(QWEN, "Qwen/Qwen2.5-0.5B")] or None,
    "configs/training/llm_finetuning/cispo.yaml": ["use_vllm: true needs vLLM"],
    "configs/training/llm_finetuning/gspo.yaml": ["use_vllm: true needs vLLM"],
    "configs/training/llm_finetuning/reinforce_llm.yaml": ["use_vllm: true needs vLLM"],
    "configs/training/llm_finetuning/grpo_multiturn.yaml": ["use_vllm: true needs vLLM", *GEM],
    "configs/training/llm_finetuning/cispo_gemma4_group5.yaml": ["use_vllm: true needs vLLM", *GEM],
    "configs/training/llm_finetuning/cispo_quant_bench.yaml": ["use_vllm: true needs vLLM", *GEM],
    "configs/training/llm_finetuning/cispo_quant_bench_qwen.yaml": ["use_vllm: true needs vLLM", *GEM],
    "configs/training/llm_finetuning/reinforce_quant_bench.yaml": ["use_vllm: true needs vLLM", *GEM],
    "configs/training/llm_finetuning/ppo_llm.yaml": ["use_vllm: true needs vLLM"],
    "configs/training/llm_finetuning/ppo_llm_quant_bench.yaml": ["use_vllm: true needs vLLM"],
    "docs/_static/examples/gsm8k_grpo.yaml": [
        "environment.name: 'gsm8k' is the catalog's",
        *hub(QWEN, "Qwen/Qwen2.5-0.5B-Instruct"),
    ],
}


@pytest.mark.skipif(HAS_VLLM, reason="outcomes written for an install without vllm")
@pytest.mark.parametrize("relpath", sorted(UPSTREAM_LLM))
def test_upstream_llm_manifest_outcome(relpath: str) -> None:
    import yaml

    data = yaml.safe_load((UPSTREAM / relpath).read_text())
    expected = UPSTREAM_LLM[relpath]
    if expected is None:
        load_manifest(data)
        return
    found = problems_of(data)
    assert len(found) == len(expected), found
    for needle, problem in zip(expected, found, strict=True):
        assert needle in problem, found


def test_every_upstream_llm_manifest_is_in_the_table() -> None:
    files = {str(p.relative_to(UPSTREAM)) for p in (UPSTREAM / "configs/training/llm_finetuning").glob("*.yaml")}
    assert files <= set(UPSTREAM_LLM)


# --- env types and env_name --------------------------------------------------------------------------


def test_agilerl_env_types_mean_rollout_or_dataset_with_an_objective(tiny_model_dir: Path, tmp_path: Path) -> None:
    m = load_manifest(rollout_manifest(tiny_model_dir, tmp_path))
    assert m.environment.env_type == "rollout"  # reasoning
    sft_rows = tmp_path / "sft.jsonl"
    sft_rows.write_text('{"prompt": "p", "response": "r"}\n')
    rows = {"dataset_path": str(sft_rows)}
    pairs = tmp_path / "pairs.jsonl"  # validation reads the file: a preference env needs preference rows
    pairs.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    net = {"pretrained_model_name_or_path": str(tiny_model_dir)}
    dpo = load_manifest(
        {
            "algorithm": {"name": "DPO"},
            "network": net,
            "environment": {"env_type": "preference", "dataset_path": str(pairs)},
        }
    )
    assert (dpo.environment.env_type, dpo.environment.objective) == ("dataset", "preference")
    sft = load_manifest({"algorithm": {"name": "SFT"}, "network": net, "environment": {"env_type": "sft", **rows}})
    assert (sft.environment.env_type, sft.environment.objective) == ("dataset", "sft")
    # The env type names the objective: SFT on preference pairs is the same mistake as objective: preference.
    found = problems_of(
        {
            "algorithm": {"name": "SFT"},
            "network": net,
            "environment": {"env_type": "preference", "dataset_path": str(pairs)},
        }
    )
    assert any("objective" in p for p in found), found
    found = problems_of({"algorithm": {"name": "SFT"}, "network": net,
                         "environment": {"env_type": "sft", "objective": "preference", **rows}})  # fmt: skip
    assert any("env_type: sft trains with objective 'sft'" in p for p in found), found


def test_multiturn_env_name_is_built_by_its_factory(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    factory = tmp_path / "games.py"
    factory.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('two_turn_env', {str(EXAMPLES / 'two_turn_env.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "def make(env_name, **config):\n"
        "    assert env_name == 'game:SayIt-v0'\n"
        "    return mod.TwoTurnEnv(**config)\n"
    )
    data = rollout_manifest(tiny_model_dir, tmp_path)
    data["environment"] = {"env_type": "multiturn", "env_name": "game:SayIt-v0", "factory": f"{factory}:make",
                           "env_config": {"turns": 3}, "max_turns": 3}  # fmt: skip
    m = load_manifest(data)
    assert (m.environment.entrypoint, m.environment.env_type) == ("game:SayIt-v0", "rollout")
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=envs, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    trajs = agent.rollout(envs.make_train, [1, 1])
    assert [len(t.rewards) for t in trajs] == [3, 3]  # the factory's env, configured by env_config


@pytest.mark.skipif(HAS_GEM, reason="gem is installed")
def test_env_name_without_a_factory_needs_gem(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = rollout_manifest(tiny_model_dir, tmp_path)
    data["environment"] = {"env_type": "multiturn", "env_name": "game:GuessTheNumber-v0-easy"}
    (found,) = problems_of(data)
    assert "gem-llm" in found and "game:GuessTheNumber-v0-easy" in found


# --- generation: use_vllm and vllm_config ------------------------------------------------------------


def test_use_vllm_false_generates_with_hf_and_vllm_config_reaches_the_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agilerl_plugin_llm.rollout.generation import vllm_engine_kwargs

    vllm_config = {"gpu_memory_utilization": 0.6, "max_num_seqs": 8, "sleep_mode": False, "dtype": "bfloat16"}
    m = load_manifest(rollout_manifest(tiny_model_dir, tmp_path, use_vllm=False, vllm_config=vllm_config))
    algo = m.algorithm
    assert algo.generation_backend == "hf"  # type: ignore[attr-defined]
    assert (algo.vllm_gpu_memory_utilization, algo.vllm_sleep_mode) == (0.6, False)  # type: ignore[attr-defined]
    kwargs = vllm_engine_kwargs(
        str(tiny_model_dir), max_model_len=128, lora_rank=None, gpu_memory_utilization=0.6, sleep_mode=False,
        engine_args=algo.vllm_engine_args, seed=0,
    )  # fmt: skip
    assert (kwargs["max_num_seqs"], kwargs["dtype"], kwargs["enable_sleep_mode"]) == (8, "bfloat16", False)
    found = problems_of(rollout_manifest(tiny_model_dir, tmp_path, use_vllm=False, generation_backend="vllm"))
    assert any("contradicts generation_backend" in p for p in found), found
    found = problems_of(rollout_manifest(tiny_model_dir, tmp_path, vllm_config={"tensor_parallel_size": 2}))
    assert any("tensor_parallel_size" in p for p in found), found
    # Server mode names where generation runs, so with use_vllm unset it is taken, not ignored (it
    # validates without LoRA too: full-weight sync, test_vllm_server.py runs it).
    m = load_manifest(rollout_manifest(tiny_model_dir, tmp_path, vllm_config={"mode": "server"}))
    assert m.algorithm.generation_backend == "vllm_server"  # type: ignore[attr-defined]


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed")
def test_use_vllm_true_is_refused_without_vllm(tiny_model_dir: Path, tmp_path: Path) -> None:
    (found,) = problems_of(rollout_manifest(tiny_model_dir, tmp_path, use_vllm=True))
    assert "use_vllm: true needs vLLM" in found and "bash scripts/install.sh --vllm" in found


def test_quantization_none_is_full_precision_and_nf4_needs_lora(tiny_model_dir: Path, tmp_path: Path) -> None:
    load_manifest(rollout_manifest(tiny_model_dir, tmp_path, quantization="none"))
    (found,) = problems_of(rollout_manifest(tiny_model_dir, tmp_path, quantization="nf4"))
    assert "QLoRA" in found  # no lora_config (or, without bitsandbytes, the qlora extra to install)
    assert ("network.lora_config" in found) if importlib.util.find_spec("bitsandbytes") else ("[qlora]" in found)


# --- the ratio: importance_sampling_level and clip_coef pairs ---------------------------------------


def test_importance_sampling_level_pools_the_ratio() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0]])
    turn = torch.tensor([[-1, 0, 0, 1, 1]])
    log_ratio = torch.tensor([[0.0, 0.1, 0.3, -0.2, 0.0]])
    assert torch.equal(pooled_log_ratio(log_ratio, mask, "token", turn), log_ratio)
    traj = pooled_log_ratio(log_ratio, mask, "trajectory", turn)
    assert torch.allclose(traj[0, 1:], torch.full((4,), 0.05))
    per_turn = pooled_log_ratio(log_ratio, mask, "turn", turn)
    assert torch.allclose(per_turn[0, 1:], torch.tensor([0.2, 0.2, -0.1, -0.1]))
    logp = log_ratio.clone().requires_grad_(True)
    old = torch.zeros_like(logp)
    values = {
        level: policy_loss(logp, old, torch.tensor([1.0]), mask, clip_coef=0.5, level=level, turn_index=turn)[0]
        for level in ("token", "turn", "trajectory")
    }
    assert torch.allclose(values["turn"][0, 1:], -torch.exp(per_turn[0, 1:]))
    assert torch.allclose(values["trajectory"][0, 1:], -torch.exp(traj[0, 1:]))
    assert not torch.allclose(values["token"], values["turn"])


def test_clip_coef_pair_gives_asymmetric_ratio_bounds(tiny_model_dir: Path, tmp_path: Path) -> None:
    mask = torch.ones(1, 3)
    logp = torch.log(torch.tensor([[0.5, 1.5, 3.0]]))
    old = torch.zeros(1, 3)
    pos, _ = policy_loss(logp, old, torch.tensor([1.0]), mask, clip_coef=(0.8, 2.0))
    assert torch.allclose(pos, torch.tensor([[-0.5, -1.5, -2.0]]))  # gain capped at the high bound 2.0
    neg, _ = policy_loss(logp, old, torch.tensor([-1.0]), mask, clip_coef=(0.8, 2.0))
    assert torch.allclose(neg, torch.tensor([[0.8, 1.5, 3.0]]))  # below 0.8 the bound counts
    m = load_manifest(rollout_manifest(tiny_model_dir, tmp_path, name="CISPO", clip_coef=[0.8, 2.0]))
    assert m.algorithm.clip_coef == (0.8, 2.0)  # type: ignore[attr-defined]
    found = problems_of(rollout_manifest(tiny_model_dir, tmp_path, clip_coef=[1.2, 2.0]))
    assert any("low <= 1 <= high" in p for p in found), found


# --- advantages: advantage_granularity (and action_granularity) --------------------------------------


def traj(rewards: list[float], tokens_per_turn: int = 2) -> Trajectory:
    turns = len(rewards)
    ids = [1] + [2] * (turns * tokens_per_turn)
    turn_index = [-1] + [k for k in range(turns) for _ in range(tokens_per_turn)]
    return Trajectory(ids, [0] + [1] * (turns * tokens_per_turn), turn_index, rewards, 1, True, False)


def test_grpo_turn_granularity_credits_each_turn_with_its_return() -> None:
    group = [traj([1.0, 0.0]), traj([0.0, 1.0]), traj([0.0])]  # one group of 3; the last has one turn
    turn_index = pad_trajectories(group, 0)["turn_index"]
    adv = turn_group_advantages(group, turn_index, 3, norm="mean_only", fallback=True)
    # Turn 0 returns: 1, 1, 0 (mean 2/3); turn 1 returns: 0, 1 (mean 1/2), the third never got there.
    assert torch.allclose(adv[0, 1:5], torch.tensor([1 / 3, 1 / 3, -0.5, -0.5]))
    assert torch.allclose(adv[1, 1:5], torch.tensor([1 / 3, 1 / 3, 0.5, 0.5]))
    assert torch.allclose(adv[2, 1:3], torch.tensor([-2 / 3, -2 / 3]))
    # A turn that only one completion reached: the trajectory advantage (fallback) or nothing.
    lone = [traj([1.0, 1.0]), traj([0.0])]
    lone_index = pad_trajectories(lone, 0)["turn_index"]
    with_fallback = turn_group_advantages(lone, lone_index, 2, norm="mean_only", fallback=True)
    assert torch.allclose(with_fallback[0, 3:5], torch.tensor([1.0, 1.0]))  # (2 - 0) - mean(2, 0)
    without = turn_group_advantages(lone, lone_index, 2, norm="mean_only", fallback=False)
    assert torch.all(without[0, 3:5] == 0)


@pytest.mark.parametrize("field", ["advantage_granularity", "action_granularity"])
def test_reinforce_trajectory_granularity_credits_every_turn_with_the_episode_return(
    field: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agilerl_plugin_llm.rollout.reinforce import LLMREINFORCE
    from agilerl_plugin_llm.testing import build_tiny_model  # noqa: F401  (the fixture's builder)

    base = rollout_manifest(tiny_model_dir, tmp_path, name="LLMREINFORCE", baseline="none")
    base["algorithm"].pop("group_size")
    episodes = [traj([1.0, 2.0])]
    out = {}
    for granularity in ("turn", "trajectory"):
        data = json.loads(json.dumps(base))
        data["algorithm"][field] = granularity
        m = load_manifest(data)
        from agilerl_plugin_llm.model import load_tokenizer

        agent = LLMREINFORCE(m.algorithm, tokenizer=load_tokenizer(tiny_model_dir))
        out[granularity] = agent.advantages(episodes, torch.tensor([3.0]), 1)["advantages"]
    assert torch.allclose(out["turn"][0, 1:5], torch.tensor([3.0, 3.0, 2.0, 2.0]))  # return from each turn on
    assert torch.allclose(out["trajectory"][0, 1:5], torch.tensor([3.0, 3.0, 3.0, 3.0]))


# --- the loss's normalisation: loss_norm (Dr. GRPO / DAPO) -------------------------------------------


def test_loss_norm_averages_over_sequences_micro_batch_tokens_or_the_window() -> None:
    per_token = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 4.0, 0.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    batch: dict[str, torch.Tensor] = {}
    assert float(normalised_loss_sum(per_token, mask, batch, "sequence")) == pytest.approx(1.0 + 4.0)
    assert float(normalised_loss_sum(per_token, mask, batch, "micro_batch")) == pytest.approx(7.0 / 4 * 2)
    assert float(normalised_loss_sum(per_token, mask, batch, "accumulation_window")) == pytest.approx(7.0)
    # Dr. GRPO: token sums over a constant, so a long completion is not diluted by its own length.
    assert float(normalised_loss_sum(per_token, mask, batch, "max_tokens", 4)) == pytest.approx(7.0 / 4)


# --- reduce_memory_peak ------------------------------------------------------------------------------


def first_step(algo: str, model_dir: Path, tmp_path: Path, *, low_memory: bool) -> tuple[list[int], list[torch.Tensor]]:
    """Rows of every training forward pass and the first optimizer step's gradients."""
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy
    from agilerl_plugin_llm.algorithms.base import _decoder

    torch.manual_seed(0)
    if algo == "GRPO":
        data = rollout_manifest(model_dir, tmp_path, reduce_memory_peak=low_memory, update_epochs=2)
    else:
        data = {"algorithm": {"name": "SFT", "batch_size": 4, "lr": 0.01, "reduce_memory_peak": low_memory,
                              "gradient_checkpointing": False},
                "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
                "environment": {"env_type": "sft", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                                "columns": {"prompt": "question"}, "response_column": "answer"},
                "training": {"seed": 0}}  # fmt: skip
    m = load_manifest(data)
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    rows: list[int] = []
    counting = [algo != "GRPO"]  # GRPO: count the training passes, not generation's

    def count(_mod: Any, args: Any, kwargs: Any) -> None:
        if counting[0]:
            rows.append(int(kwargs["input_ids"].shape[0]))

    # The decoder runs the forward when the plugin projects only the selected positions.
    for module in (agent.model, _decoder(agent.model)):
        module.register_forward_pre_hook(count, with_kwargs=True)
    if algo == "GRPO":
        update = agent.update

        def counted_update(batch: Any) -> Any:
            counting[0] = True
            return update(batch)

        agent.update = counted_update
    grads: list[list[torch.Tensor]] = []
    agent.optimizer.register_step_pre_hook(
        lambda _opt, _a, _k: grads.append([p.grad.detach().clone() for p in agent.trainable_parameters()])
    )
    torch.manual_seed(1)
    if algo == "GRPO":
        agent.learn_iteration(env)
    else:
        agent.learn(env.next_batch(4))
    return rows, grads[0]


@pytest.mark.parametrize("algo", ["GRPO", "SFT"])
def test_reduce_memory_peak_runs_one_row_per_forward_pass_with_the_same_result(
    algo: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    rows, grads = first_step(algo, tiny_model_dir, tmp_path, low_memory=False)
    low_rows, low_grads = first_step(algo, tiny_model_dir, tmp_path, low_memory=True)
    assert max(rows) > 1
    assert set(low_rows) == {1}  # every forward pass: one row
    for a, b in zip(grads, low_grads, strict=True):  # the same first gradient
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


# --- GSPO and CISPO as algorithm names ---------------------------------------------------------------


@pytest.mark.parametrize(("name", "loss_type"), [("GSPO", "gspo"), ("CISPO", "cispo")])
def test_gspo_and_cispo_train_from_a_manifest(
    name: str,
    loss_type: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:
    """Smoke test on "say eight": the names pick their loss and a run of 2 iterations completes. It
    asserts nothing about learning (that answer ignores the prompt)."""
    data = rollout_manifest(tiny_model_dir, tmp_path / "run", name=name, update_epochs=2)
    m = load_manifest(data)
    assert m.algorithm.loss_type == loss_type  # type: ignore[attr-defined]
    if name == "GSPO":
        assert m.algorithm.ratio_level == "trajectory"  # type: ignore[attr-defined]
    found = problems_of(rollout_manifest(tiny_model_dir, tmp_path, name=name, loss_type="grpo"))
    assert any("loss_type" in p for p in found), found
    code, out, err = run_cli("train", write_manifest(data))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["steps"] == 2


# --- learning-rate schedule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"lr_scheduler": "cosine", "warmup_ratio": 0.25, "lr_min_ratio": 0.1},
        {"cosine_lr_schedule_config": {"warmup_proportion": 0.25, "min_lr_ratio": 0.1}},  # AgileRL's spelling
    ],
)
def test_lr_schedule_warms_up_then_decays_over_the_run(
    fields: dict[str, Any], tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import math

    from agilerl_plugin_llm.dataset.sft import SFT

    seen: list[float] = []
    original = SFT.learn

    def spy(self: Any, batch: Any) -> Any:
        out = original(self, batch)
        seen.append(self.optimizer.param_groups[0]["lr"])
        return out

    monkeypatch.setattr(SFT, "learn", spy)
    data = {"algorithm": {"name": "SFT", "batch_size": 4, "lr": 0.01, "gradient_checkpointing": False, **fields},
            "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 128},
            "environment": {"env_type": "sft", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                            "columns": {"prompt": "question"}, "response_column": "answer"},
            "training": {"max_steps": 4, "evo_steps": 4, "seed": 0, "progress": False,
                         "run_dir": str(tmp_path / "run")}}  # fmt: skip
    code, out, err = run_cli("train", write_manifest(data))
    assert code == 0, out + err
    cos = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)) for p in (0.0, 1 / 3, 2 / 3)]
    assert seen == pytest.approx([0.01 * 0.5] + [0.01 * c for c in cos])  # 1 warmup iteration of 4, then cosine


# --- reference refresh: update_reference_every -------------------------------------------------------


def lora_reference(agent: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in agent.model.named_parameters() if ".reference." in n and "lora_" in n}


def lora_actor(agent: Any) -> dict[str, torch.Tensor]:
    return {n.replace(".actor.", ".reference."): p.detach().clone()
            for n, p in agent.model.named_parameters() if ".actor." in n and "lora_" in n}  # fmt: skip


def test_update_reference_every_copies_the_policy_into_this_agent_s_reference_only(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    data = rollout_manifest(tiny_model_dir, tmp_path, beta=0.04, update_reference_every=2)
    data["network"]["lora_config"] = {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}
    m = load_manifest(data)
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=envs, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    start = lora_reference(agent)
    twin = agent.clone(index=1)  # shares the frozen reference tensors with agent
    for _ in range(2):
        agent.learn_iteration(envs)
        agent.steps += 1
    assert all(torch.equal(start[n], t) for n, t in lora_reference(agent).items())  # not yet: steps 0 and 1
    policy_at_2 = lora_actor(agent)
    assert any(not torch.equal(start[n], t) for n, t in policy_at_2.items())  # the actor moved
    agent.learn_iteration(envs)  # iteration 2 starts with the refresh
    assert all(torch.equal(policy_at_2[n], t) for n, t in lora_reference(agent).items())
    assert all(torch.equal(start[n], t) for n, t in lora_reference(twin).items())  # the clone keeps its own
    # A checkpoint carries the refreshed reference.
    restored = agent.clone(index=2)
    restored.load_state_dict(twin.state_dict())
    assert all(torch.equal(start[n], t) for n, t in lora_reference(restored).items())
    restored.load_state_dict(agent.state_dict())
    assert all(torch.equal(policy_at_2[n], t) for n, t in lora_reference(restored).items())
    assert all(torch.equal(start[n], t) for n, t in lora_reference(twin).items())


def test_update_reference_every_full_fine_tuning_dpo_saves_its_reference(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "chosen": "eight", "rejected": w})
                               for w in ("one", "two", "three", "four")))  # fmt: skip
    m = load_manifest({"algorithm": {"name": "DPO", "batch_size": 2, "lr": 0.01, "update_reference_every": 1,
                                     "gradient_checkpointing": False},
                       "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 64},
                       "environment": {"env_type": "preference", "dataset_path": str(pairs)}})  # fmt: skip
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    agent.learn(env.next_batch(2))
    agent.steps += 1
    after_one = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    agent.learn(env.next_batch(2))  # refreshes first: the reference is the policy after iteration 1
    ref = dict(agent.reference_model.named_parameters())
    assert all(torch.equal(after_one[n], ref[n]) for n in after_one)
    state = agent.state_dict()
    fresh = agent.clone(index=1)
    fresh.reference_model = None  # what a resume starts from: no refreshed reference yet
    fresh.load_state_dict(state)
    assert all(torch.equal(ref[n], p) for n, p in fresh.reference_model.named_parameters())


def test_update_reference_every_is_refused_where_there_is_no_reference(tiny_model_dir: Path, tmp_path: Path) -> None:
    found = problems_of(rollout_manifest(tiny_model_dir, tmp_path, beta=0.0, update_reference_every=2))
    assert any("no reference policy" in p for p in found), found
    data = rollout_manifest(tiny_model_dir, tmp_path, beta=0.04, update_reference_every=2,
                            use_separate_reference_adapter=False)  # fmt: skip
    data["network"]["lora_config"] = {"lora_r": 4}
    found = problems_of(data)
    assert any("use_separate_reference_adapter: true" in p for p in found), found


# --- several reward functions with weights -----------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"rubric_name": ["length", "is_answer"], "reward_weights": [0.5, 2.0]},
        {"rubric_name": {"length": 0.5, "is_answer": 2.0}},
    ],
)
def test_several_reward_functions_are_summed_with_their_weights(fields: dict[str, Any], tmp_path: Path) -> None:
    from agilerl_plugin_llm.rollout.sources import build_dataset_source

    rubric = tmp_path / "rewards.py"
    rubric.write_text(
        "def length(completion, answer, question):\n    return float(len(completion))\n"
        "def is_answer(completion, answer, question):\n    return float(completion.strip() == answer)\n"
    )
    data = rollout_manifest(Path("unused"), tmp_path)["environment"]
    data.update(rubric_file_path=str(rubric), **fields)
    from agilerl_plugin_llm.specs import LLMEnvSpec

    spec = LLMEnvSpec.model_validate(data)
    make_env, _ = build_dataset_source(spec, seed=0)
    env = make_env()
    env.reset(seed=0)
    assert env.step("eight")[1] == pytest.approx(0.5 * 5 + 2.0)
    env.reset(seed=0)
    assert env.step("cat cat")[1] == pytest.approx(0.5 * 7)


def test_reward_weights_must_match_the_functions(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from agilerl_plugin_llm.specs import LLMEnvSpec

    base = rollout_manifest(Path("unused"), tmp_path)["environment"]
    with pytest.raises(ValidationError, match="2 weights for 1 reward"):
        LLMEnvSpec.model_validate({**base, "rubric_name": "reward_fn", "reward_weights": [1.0, 2.0]})
    with pytest.raises(ValidationError, match="already gives the weights"):
        LLMEnvSpec.model_validate({**base, "rubric_name": {"a": 1.0}, "reward_weights": [1.0]})


# --- generation config: eos_token_id and stop_strings ------------------------------------------------


def greedy_replies(model_dir: Path, tmp_path: Path, **algo: Any) -> tuple[Any, list[Trajectory]]:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    m = load_manifest(rollout_manifest(model_dir, tmp_path, max_output_tokens=8, **algo))
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=envs, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    return agent, agent.rollout(envs.make_eval, [0, 1], greedy=True)


def reply_ids(t: Trajectory) -> list[int]:
    return [tid for tid, m in zip(t.token_ids, t.policy_mask, strict=True) if m]


def test_eos_token_id_and_stop_strings_end_replies(tiny_model_dir: Path, tmp_path: Path) -> None:
    agent, free = greedy_replies(tiny_model_dir, tmp_path)
    first = reply_ids(free[0])
    assert len(first) == 8 and free[0].cut_off  # an untrained model runs to the budget
    # eos_token_id: the third token of the free reply now ends it.
    _, stopped = greedy_replies(tiny_model_dir, tmp_path, eos_token_id=first[2])
    assert reply_ids(stopped[0]) == first[: first.index(first[2]) + 1] and not stopped[0].cut_off
    # stop_strings: the reply ends with the token that completes the string, which is kept.
    text = agent.tokenizer.decode(first[:4])
    stop = text[-2:] if len(text.strip()) >= 2 else text
    _, by_string = greedy_replies(tiny_model_dir, tmp_path, stop_strings=[stop])
    ids = reply_ids(by_string[0])
    assert stop in agent.tokenizer.decode(ids) and stop not in agent.tokenizer.decode(ids[:-1])
    assert len(ids) <= 4 and ids == first[: len(ids)] and not by_string[0].cut_off
    found = problems_of(rollout_manifest(tiny_model_dir, tmp_path, stop_strings=[""]))
    assert any("empty string" in p for p in found), found


def test_the_model_s_generation_config_eos_ends_replies(tiny_model_dir: Path, tmp_path: Path) -> None:
    agent, free = greedy_replies(tiny_model_dir, tmp_path)
    first = reply_ids(free[0])
    fresh = agent.clone(index=1)
    fresh._stop_ids = None
    fresh.model.generation_config.eos_token_id = [agent.tokenizer.eos_token_id, first[1]]
    assert first[1] in fresh.stop_ids


def test_grpo_agents_use_their_ratio_level_and_advantage_granularity(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    def agent_for(**algo: Any) -> Any:
        data = rollout_manifest(tiny_model_dir, tmp_path, group_size=2, **algo)
        data["environment"] = {"env_type": "multiturn", "entrypoint": TWO_TURN, "env_config": {"target": "eight"}}
        m = load_manifest(data)
        envs = select_strategy(m.algorithm).make_env(m, seed=0)
        agent = select_builder(m.algorithm).build_for_run(
            m.algorithm, env=envs, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
        )
        return agent, envs

    token, envs = agent_for()
    trajs = token.rollout(envs.make_train, [1, 1, 2, 2])
    trajs[0].rewards = [1.0, 0.0]  # give the group different per-turn returns
    trajs[1].rewards = [0.0, 0.5]
    batch = pad_trajectories(trajs, token.pad_id)
    rewards = torch.tensor([t.total_reward for t in trajs])
    by_turn, _ = agent_for(advantage_granularity="turn")
    adv_traj = token.advantages(trajs, rewards, 2)["advantages"]
    adv_turn = by_turn.advantages(trajs, rewards, 2)["advantages"]
    assert adv_traj.dim() == 1 and adv_turn.dim() == 2  # one per completion vs one per token (by turn)
    assert adv_turn[0][batch["turn_index"][0] == 0].unique().numel() == 1
    assert not torch.equal(adv_turn[0][batch["turn_index"][0] == 0][:1], adv_turn[0][batch["turn_index"][0] == 1][:1])
    with torch.no_grad():
        logp = token.logprobs(batch)
    batch = {**batch, "advantages": adv_traj, "old_logprobs": logp + 0.3 * torch.randn_like(logp)}
    losses = {}
    for level in ("token", "turn", "trajectory"):
        agent, _ = agent_for(importance_sampling_level=level)
        agent.model.load_state_dict(token.model.state_dict())
        losses[level] = float(agent.loss(dict(batch))[0].detach())
    assert len({round(v, 6) for v in losses.values()}) == 3, losses


def test_a_clone_trains_with_its_own_adamw_moments(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Optimizer.load_state_dict keeps the tensors it is given: a clone must copy its parent's moments,
    or stepping one agent would move the other's (selection clones the elite every generation)."""
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    m = load_manifest(rollout_manifest(tiny_model_dir, tmp_path, beta=0.0))
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=envs, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    agent.learn_iteration(envs)
    twin = agent.clone(index=1)
    moments = {id(p): agent.optimizer.state[p]["exp_avg"].clone() for p in agent.trainable_parameters()}
    assert moments
    twin.learn_iteration(envs)
    assert all(torch.equal(agent.optimizer.state[p]["exp_avg"], moments[id(p)]) for p in agent.trainable_parameters())
    pairs = zip(agent.trainable_parameters(), twin.trainable_parameters(), strict=True)
    assert all(twin.optimizer.state[q]["exp_avg"].data_ptr() != agent.optimizer.state[p]["exp_avg"].data_ptr()
               for p, q in pairs)  # fmt: skip
