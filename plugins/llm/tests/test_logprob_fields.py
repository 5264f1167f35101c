"""AgileRL's log-prob fields with their effect: ``calc_position_embeddings`` scores a left-padded row
at the positions of its real tokens; ``cast_logprobs_to_fp32: false`` (nothing here would honour it)
is refused by name. ``use_liger_loss`` is tested in test_fused_logprobs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.algorithms.base import sequence_logprobs

torch.set_num_threads(1)


def _rows() -> tuple[torch.Tensor, ...]:
    ids = torch.tensor([[5, 9, 12, 7, 3]])
    pad = 3  # left padding: the same row shifted right, masked out in front
    padded = torch.cat([torch.zeros(1, pad, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones_like(ids)], dim=1)
    loss = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.tensor([[0, 0, 1, 1, 1]])], dim=1)
    return ids, padded, mask, loss


def test_calc_position_embeddings_scores_a_left_padded_row_like_the_unpadded_one() -> None:
    # Absolute position embeddings (GPT-2): where positions start matters. (Rotary models such as the
    # tiny Llama see only relative positions, so a uniform shift from left padding changes nothing.)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=32, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config).eval()
    ids, padded, mask, loss = _rows()
    with torch.no_grad():
        plain = sequence_logprobs(model, ids, torch.ones_like(ids), loss[:, 3:])[:, 2:]
        counted = sequence_logprobs(model, padded, mask, loss, position_ids_from_mask=True)[:, 5:]
        numbered = sequence_logprobs(model, padded, mask, loss, position_ids_from_mask=False)[:, 5:]
    assert torch.allclose(counted, plain, atol=1e-5)
    assert not torch.allclose(numbered, plain, atol=1e-3)  # the field changes what is computed


def _sft(tiny_model_dir: Path, tmp_path: Path, **algo: Any) -> dict[str, Any]:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "p", "response": "r"}\n')
    return {
        "algorithm": {"name": "SFT", **algo},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
        "environment": {"env_type": "sft", "dataset_path": str(rows)},
    }


def test_fields_nothing_here_would_honour_are_refused_by_name(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cast_logprobs_to_fp32: false is not supported"):
        load_manifest(_sft(tiny_model_dir, tmp_path, cast_logprobs_to_fp32=False))
    assert load_manifest(_sft(tiny_model_dir, tmp_path, use_liger_loss=True)).algorithm.use_liger_loss  # type: ignore[attr-defined]  # chunked log-probs: test_fused_logprobs.py
    ok = load_manifest(_sft(tiny_model_dir, tmp_path, use_liger_loss=False, calc_position_embeddings=False))
    assert ok.algorithm.calc_position_embeddings is False  # type: ignore[attr-defined]
