"""Model loading, LoRA adapters and the reference policy, and the LLMAlgorithm base (clone, state,
batching, log-probs) on a real tiny Llama with real peft adapters."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.builders import AlgorithmBuildRuntime
from agilerl_plugin_llm import model as llm_model
from agilerl_plugin_llm.algorithms.base import sequence_logprobs
from agilerl_plugin_llm.builder import LLMBuilder
from agilerl_plugin_llm.dataset.dpo import DPO
from agilerl_plugin_llm.dataset.sft import SFT
from agilerl_plugin_llm.dataset.specs import DPOSpec, SFTSpec

LORA = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return llm_model.load_tokenizer(tiny_model_dir)


def _batch(tokenizer: Any, n: int = 4) -> dict[str, torch.Tensor]:
    """A right-padded SFT batch of n rows with different lengths; the loss mask covers the answers."""
    rows = []
    for i in range(n):
        prompt = tokenizer(f"what is {i} + {i}?" + " the" * i)["input_ids"]
        answer = tokenizer(f" {2 * i}.", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((prompt + answer, [0] * len(prompt) + [1] * len(answer)))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((n, width), tokenizer.pad_token_id)
    attn, mask = torch.zeros(n, width, dtype=torch.long), torch.zeros(n, width, dtype=torch.long)
    for b, (row, m) in enumerate(rows):
        ids[b, : len(row)], attn[b, : len(row)], mask[b, : len(row)] = torch.tensor(row), 1, torch.tensor(m)
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": mask}


def _sft(model_dir: Path, tokenizer: Any, **fields: Any) -> SFT:
    spec = SFTSpec(pretrained_model_name_or_path=str(model_dir), gradient_checkpointing=False, lr=1e-2, **fields)
    return SFT(spec, tokenizer=tokenizer)


def test_missing_model_paths_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(llm_model.ModelLoadError, match=r"not a local directory.*never downloads"):
        llm_model.resolve_model_path(tmp_path / "nope")
    (tmp_path / "file.bin").write_text("x")
    with pytest.raises(llm_model.ModelLoadError, match="is a file"):
        llm_model.resolve_model_path(tmp_path / "file.bin")
    with pytest.raises(llm_model.ModelLoadError, match=r"no config\.json"):
        llm_model.resolve_model_path(tmp_path)
    with pytest.raises(llm_model.ModelLoadError, match="local Hugging Face cache"):
        llm_model.resolve_model_path("agilerl-tests/definitely-not-cached")


def test_lean_logprobs_match_full_logits(tiny_model_dir: Path, tokenizer: Any) -> None:
    model = llm_model.load_model(tiny_model_dir)
    batch = _batch(tokenizer)
    lean = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    full = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["loss_mask"][:, 1:].bool()
    assert torch.allclose(lean[:, 1:][mask], full[mask], atol=1e-5)
    assert (lean[:, 1:][~mask] == 0).all() and (lean[:, 0] == 0).all()


def test_lora_reference_adapter_and_disabled_base(tiny_model_dir: Path, tokenizer: Any) -> None:
    batch = _batch(tokenizer)
    base = llm_model.load_model(tiny_model_dir)
    base_lp = sequence_logprobs(base, batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    spec = DPOSpec(pretrained_model_name_or_path=str(tiny_model_dir), lora_config=LORA, gradient_checkpointing=False,
                   lr=1e-2, use_separate_reference_adapter=True)  # fmt: skip
    agent = DPO(spec, tokenizer=tokenizer)
    assert llm_model.adapter_names(agent.model) == ["actor", "reference"]
    trainable = [n for n, p in agent.model.named_parameters() if p.requires_grad]
    assert trainable and all(".actor." in n and "lora_" in n for n in trainable)

    def sft_loss(mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return -agent.logprobs(mb).sum(), {}

    for _ in range(5):
        agent.optimize(batch, sft_loss)
    policy, reference = agent.logprobs(batch), agent.logprobs(batch, reference=True)
    assert not torch.allclose(policy, base_lp, atol=1e-3)  # the actor moved
    assert torch.allclose(reference, base_lp, atol=1e-5)  # the reference adapter did not
    assert [n for n, p in agent.model.named_parameters() if p.requires_grad] == trainable  # still only the actor
    with agent.model.disable_adapter():
        disabled = sequence_logprobs(agent.model, batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    assert torch.allclose(disabled, base_lp, atol=1e-5)


def test_full_finetune_dpo_keeps_a_frozen_reference(tiny_model_dir: Path, tokenizer: Any) -> None:
    spec = DPOSpec(pretrained_model_name_or_path=str(tiny_model_dir), gradient_checkpointing=False, lr=1e-2)
    agent = DPO(spec, tokenizer=tokenizer)
    assert agent.reference_model is not None and not any(p.requires_grad for p in agent.reference_model.parameters())
    before = agent.logprobs(_batch(tokenizer), reference=True)
    agent.optimize(_batch(tokenizer), lambda mb: (-agent.logprobs(mb).sum(), {}))
    assert torch.equal(agent.logprobs(_batch(tokenizer), reference=True), before)


def test_micro_batches_accumulate_the_same_gradient(tiny_model_dir: Path, tokenizer: Any) -> None:
    batch = _batch(tokenizer)
    grads: dict[str, list[torch.Tensor]] = {}
    for label, micro in (("whole", None), ("micro", 1)):
        torch.manual_seed(0)  # same LoRA initialisation for both
        agent = _sft(tiny_model_dir, tokenizer, lora_config=LORA, micro_batch_size_per_gpu=micro)
        captured: list[torch.Tensor] = []
        agent.optimizer.step = lambda *a, _a=agent, _c=captured, **k: _c.extend(  # type: ignore[method-assign]
            p.grad.clone() for p in _a.trainable_parameters()
        )
        agent.learn(batch)
        grads[label] = captured
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(grads["whole"], grads["micro"], strict=True))
    agent = _sft(
        tiny_model_dir, tokenizer, lora_config=LORA, mini_batch_size=2, micro_batch_size_per_gpu=1, batch_size=4
    )
    assert agent.learn(batch)["optimizer_steps"] == 2


def test_gradient_checkpointing_same_loss(tiny_model_dir: Path, tokenizer: Any) -> None:
    batch = _batch(tokenizer)
    losses = []
    for checkpointing in (False, True):
        spec = SFTSpec(pretrained_model_name_or_path=str(tiny_model_dir), lora_config=LORA, lr=1e-2,
                       gradient_checkpointing=checkpointing)  # fmt: skip
        torch.manual_seed(0)
        agent = SFT(spec, tokenizer=tokenizer)
        losses.append([agent.learn(batch)["loss"] for _ in range(3)])
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_clone_shares_frozen_base_and_state_roundtrip(tiny_model_dir: Path, tokenizer: Any) -> None:
    batch = _batch(tokenizer)
    agent = _sft(tiny_model_dir, tokenizer, lora_config=LORA)
    agent.learn(batch)
    twin = agent.clone(index=7)
    assert twin.index == 7 and twin.tokenizer is agent.tokenizer
    shared = {id(p) for p in agent.model.parameters()} & {id(p) for p in twin.model.parameters()}
    frozen = {id(p) for p in agent.model.parameters() if not p.requires_grad}
    assert shared == frozen  # base weights shared, adapters copied
    before = agent.logprobs(batch)
    twin.learn(batch)
    assert torch.equal(agent.logprobs(batch), before)  # training the clone leaves the original alone
    # weights-only checkpoint: adapter + optimizer, restored exactly into a fresh agent
    buf = io.BytesIO()
    torch.save(twin.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = _sft(tiny_model_dir, tokenizer, lora_config=LORA)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.logprobs(batch), twin.logprobs(batch))
    assert fresh.index == 7 and len(fresh.optimizer.state) == len(twin.optimizer.state)
    # the next step is identical too (optimizer moments restored)
    assert fresh.learn(batch)["loss"] == pytest.approx(twin.learn(batch)["loss"], rel=1e-6)


def test_lr_change_rebuilds_optimizer_keeping_moments(tiny_model_dir: Path, tokenizer: Any) -> None:
    agent = _sft(tiny_model_dir, tokenizer, lora_config=LORA)
    agent.learn(_batch(tokenizer))
    old = agent.optimizer
    agent.set_hyperparameter("lr", 3e-4)
    assert agent.optimizer is not old and agent.optimizer.param_groups[0]["lr"] == 3e-4
    assert len(agent.optimizer.state) == len(old.state) > 0


def test_export_merged_matches_adapter_model(tiny_model_dir: Path, tokenizer: Any, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    batch = _batch(tokenizer)
    agent = _sft(tiny_model_dir, tokenizer, lora_config=LORA)
    for _ in range(3):
        agent.learn(batch)
    out = agent.export_merged(tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    lp = sequence_logprobs(merged, batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    assert torch.allclose(lp, agent.logprobs(batch), atol=1e-4)
    assert (out / "tokenizer.json").exists()


def test_builder_builds_from_spec_and_prebuilt_actor(tiny_model_dir: Path, tokenizer: Any) -> None:
    spec = SFTSpec(pretrained_model_name_or_path=str(tiny_model_dir), lora_config=LORA, gradient_checkpointing=False)
    agent = LLMBuilder.build(spec, tokenizer=tokenizer, runtime=AlgorithmBuildRuntime(index=3))
    assert isinstance(agent, SFT) and agent.index == 3
    again = LLMBuilder.build(spec, tokenizer=tokenizer, actor_network=agent.model)
    assert again.model is agent.model
    with pytest.raises(ValueError, match="tokenizer"):
        LLMBuilder.build(spec)


def test_registration_and_validation_import_no_torch(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    code = (
        "import sys\n"
        "from agilerl.cli import main\n"
        f"rc = main(['validate', {str(repo / 'examples' / 'dpo_tiny.yaml')!r}])\n"
        "heavy = [m for m in ('torch', 'transformers', 'peft', 'datasets') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    (tmp_path / "tiny-model").mkdir()
    (tmp_path / "tiny-model" / "config.json").write_text("{}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_population_members_share_the_frozen_base(tiny_model_dir: Path, tokenizer: Any) -> None:
    from types import SimpleNamespace

    from agilerl.models import load_manifest

    manifest = load_manifest({
        "algorithm": {"name": "SFT", "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "lora_config": LORA},
        # (validation reads the rows, so a real file; the builder reads only the env's tokenizer)
        "environment": {"env_type": "dataset",
                        "dataset_path": str(Path(__file__).resolve().parents[3] / "examples/data/llm/sft_tiny.jsonl")},
    })  # fmt: skip
    env = SimpleNamespace(tokenizer=tokenizer)
    agents = LLMBuilder.build_population(manifest.algorithm, env=env, manifest=manifest,
                                         runtimes=[AlgorithmBuildRuntime(index=i) for i in range(2)])  # fmt: skip
    first, second = ({id(p): p.requires_grad for p in a.model.parameters()} for a in agents)
    shared = first.keys() & second.keys()
    assert shared and shared == {k for k, trains in first.items() if not trains}
    assert agents[1].index == 1 and agents[1].optimizer is not agents[0].optimizer


def test_lean_logprobs_other_architecture(tokenizer: Any) -> None:
    """GPT-2 keeps its decoder under ``transformer``: found through ``get_decoder``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=2)
    model = GPT2LMHeadModel(config).eval()
    batch = _batch(tokenizer)
    lean = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    full = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["loss_mask"][:, 1:].bool()
    assert torch.allclose(lean[:, 1:][mask], full[mask], atol=1e-5)


def test_full_fine_tuning_keeps_fp32_master_weights_on_every_device(tiny_model_factory: Any) -> None:
    from agilerl_plugin_llm.model import load_model, training_dtype

    assert training_dtype("cuda", lora=False) is torch.float32  # no pure-bf16 full fine-tuning on GPU
    assert training_dtype("cuda", lora=True) is None  # a LoRA base keeps its checkpoint dtype
    assert training_dtype("cpu", lora=True) is torch.float32
    # A bf16 checkpoint trained in full: float32 weights, so float32 optimizer state.
    path = tiny_model_factory("bf16")
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).save_pretrained(path)
    model = load_model(path)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
