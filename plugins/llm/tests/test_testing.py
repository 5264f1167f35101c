"""The shipped tiny-model fixture: what plugin authors (and our own tests) rely on."""

from __future__ import annotations

from pathlib import Path

import torch

from agilerl_plugin_llm.testing import build_tiny_model, main


def test_tiny_model_roundtrip_and_assistant_mask(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert len(tok) <= 400 and model.config.vocab_size == len(tok)
    assert model.config.num_hidden_layers == 2 and model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) < 200_000
    assert {tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token} == {"<pad>", "<s>", "</s>", "<unk>"}
    msgs = [{"role": "user", "content": "what is red?"}, {"role": "assistant", "content": "the answer is blue."}]
    out = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == "the answer is blue.<|im_end|>"
    assert tok.decode(tok("hello world")["input_ids"]) == "hello world"
    logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok)) and torch.isfinite(logits).all()


def test_same_seed_same_weights_and_cli(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    a = build_tiny_model(tmp_path / "a", seed=3)
    assert main(["build-tiny-model", str(tmp_path / "b"), "--seed", "3"]) == 0
    c = build_tiny_model(tmp_path / "c", seed=4)
    wa, wb, wc = (load_file(p / "model.safetensors") for p in (a, tmp_path / "b", c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)


def test_build_tiny_model_from_the_shell_without_pytest(tmp_path: Path) -> None:
    import subprocess
    import sys

    # sys.modules["pytest"] = None makes `import pytest` fail, as on an install without it.
    code = (
        "import sys, runpy; sys.modules['pytest'] = None; "
        f"sys.argv = ['x', 'build-tiny-model', {str(tmp_path / 'm')!r}]; "
        "runpy.run_module('agilerl_plugin_llm.testing', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1",
                          "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / "tokenizer.json").is_file()
