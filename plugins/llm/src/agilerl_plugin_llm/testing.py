"""Test helpers for LLM plugin authors: a tiny causal LM and tokenizer, built offline in milliseconds.

Use as a pytest plugin (``pytest_plugins = ["agilerl_plugin_llm.testing"]``) to get the fixture
``tiny_model_dir``, or call :func:`build_tiny_model` yourself. From a shell::

    python -m agilerl_plugin_llm.testing build-tiny-model ./tiny-model
    python -m agilerl_plugin_llm.testing build-tiny-model ./tiny-model --vllm   # head_dim 32, for vLLM on CPU
    python -m agilerl_plugin_llm.testing build-tiny-model ./plain --no-chat-template  # a tokenizer without one

:func:`build_tiny_multimodal_model` builds a tiny Gemma 4 (text decoder, vision and audio towers) the same
way (``vllm=True``: head sizes vLLM's CPU attention serves).

What gets built (and why):

* a byte-level BPE tokenizer trained in memory with ``tokenizers`` (~400 tokens) on a small corpus,
  wrapped as a fast tokenizer with ``<pad>``/``<s>``/``</s>``/``<unk>`` and the ChatML markers
  ``<|im_start|>``/``<|im_end|>``, and a ChatML chat template whose assistant turns sit inside a
  ``{% generation %}`` block, so ``apply_chat_template(..., return_assistant_tokens_mask=True)`` marks
  the tokens an SFT loss trains on;
* a 2-layer ``LlamaConfig`` model (hidden 64, 4 heads, 2 KV heads, tied embeddings, ~100k
  parameters; head_dim 16). ``vllm=True`` (``--vllm``) builds 2 heads of 32 instead, which vLLM's CPU
  attention serves (it refuses head_dim 16). ``initializer_range`` is 0.2 rather than the usual 0.02: with tiny random tied
  embeddings a LoRA adapter alone cannot move the output distribution, so LoRA runs would not learn.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

#: Head size of ``build_tiny_model(vllm=True)``: vLLM's CPU attention refuses 16, serves 32 and 64.
VLLM_HEAD_DIM = 32

#: Special tokens of the tiny tokenizer, in id order (ids 0..5).
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>"]

#: ChatML; the assistant's content and its closing marker are the "generation" the mask selects.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "the a an one two three four five six seven eight nine ten red blue green yellow black white "
    "cat dog bird fish cow horse sheep apple pear plum bread milk tea water sun moon star sky sea "
    "yes no true false good bad big small hot cold up down left right zero answer question say "
    "word number color animal food please thank you hello hi what is are which who how many and or"
).split()


def default_corpus() -> list[str]:
    """~120 short sentences over a small vocabulary (enough for a ~400-token BPE)."""
    lines: list[str] = []
    for i, w in enumerate(_WORDS):
        nxt = _WORDS[(i * 7 + 3) % len(_WORDS)]
        lines.append(f"what is {w}? the answer is {nxt}.")
        lines.append(f"Say {w} {nxt} {i} times, please.")
    lines += [f"{a} + {b} = {a + b}" for a in range(10) for b in range(0, 10, 3)]
    return lines


def build_tokenizer(vocab_corpus: Iterable[str] | None = None, *, vocab_size: int = 400) -> Any:
    """A fast byte-level BPE tokenizer with special tokens and a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = list(vocab_corpus) if vocab_corpus is not None else default_corpus()
    tok.train_from_iterator([*corpus, "\n".join(corpus[:8])], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "right"
    return fast


def build_tiny_model(
    path: str | Path,
    *,
    vocab_corpus: Iterable[str] | None = None,
    seed: int = 0,
    initializer_range: float = 0.2,
    num_hidden_layers: int = 2,
    hidden_size: int = 64,
    max_position_embeddings: int = 2048,
    chat_template: str | None = CHAT_TEMPLATE,
    vllm: bool = False,
) -> Path:
    """Build a tiny Llama causal LM and its tokenizer and ``save_pretrained`` both into ``path``.

    :param path: Directory to write (created if missing).
    :param vocab_corpus: Sentences to train the BPE tokenizer on (default: :func:`default_corpus`).
    :param seed: Seed for the model's random weights (same seed, same weights).
    :param initializer_range: Std of the random weights; keep ~0.2 when LoRA must learn.
    :param chat_template: The tokenizer's chat template; ``None`` saves a tokenizer without one
        (for testing the "chat template missing" error).
    :param vllm: Heads of size 32 (``hidden_size // 32`` heads, as many KV heads) instead of 4 heads
        (2 KV heads) of ``hidden_size // 4``: vLLM's CPU attention serves head sizes 32 and up.
    :returns: ``path`` as a :class:`~pathlib.Path`.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_corpus)
    if chat_template is None:
        tokenizer.chat_template = None
    else:
        tokenizer.chat_template = chat_template
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=max(1, hidden_size // VLLM_HEAD_DIM) if vllm else 4,
        num_key_value_heads=max(1, hidden_size // VLLM_HEAD_DIM) if vllm else 2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    # Seed only this build: fork the RNG so callers' torch random state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_multimodal_model(
    path: str | Path,
    *,
    seed: int = 0,
    initializer_range: float = 0.2,
    max_position_embeddings: int = 2048,
    vllm: bool = False,
) -> Path:
    """A tiny multimodal causal LM (Gemma 4 layout: a text decoder under ``model.language_model``, a
    vision tower and an audio tower whose projections are ClippableLinear-wrapped, and their
    embedders) with the tiny tokenizer, ``save_pretrained`` into ``path``. ~2-layer, 64-wide text
    model; one-layer 32-wide towers. ``AutoModelForCausalLM`` loads it as
    ``Gemma4ForConditionalGeneration``, as it loads ``google/gemma-4-E4B-it``.

    :param vllm: head sizes 32 (sliding-attention layers) and 64 (the full-attention layer), which vLLM's
        CPU attention serves, instead of 16 and 32. Either way the per-layer input width is 64: bitsandbytes'
        CPU kernels for an nf4-quantized copy (QLoRA) need each linear's input to hold a whole 64-value
        block and its output a multiple of 32.
    :param max_position_embeddings: the text model's context (AgileRL's Gemma 4 manifests ask for 32k).
    """
    import torch
    from transformers import (
        AutoModelForCausalLM,
        Gemma4AudioConfig,
        Gemma4Config,
        Gemma4TextConfig,
        Gemma4VisionConfig,
    )

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    vocab = len(tokenizer)
    # (sliding-attention, full-attention) head sizes: Gemma 4's full-attention layers have their own,
    # twice as wide (256 and 512 in gemma-4-E4B).
    heads = (VLLM_HEAD_DIM, 2 * VLLM_HEAD_DIM) if vllm else (16, 32)
    full_attention: dict[str, Any] = {"global_head_dim": heads[1]}  # a keyword the config's __post_init__ reads
    text = Gemma4TextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=heads[0], **full_attention,
        hidden_size_per_layer_input=64, sliding_window=64, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=max_position_embeddings, initializer_range=initializer_range,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    vision = Gemma4VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        head_dim=16, position_embedding_size=64,
    )  # fmt: skip
    audio = Gemma4AudioConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[8, 4],
        output_proj_dims=32,
    )  # fmt: skip
    # The image/audio marker ids only need to exist in the vocabulary (text-only runs never emit them).
    markers: dict[str, Any] = {"boi_token_id": 1, "eoi_token_id": 2, "image_token_id": 3, "video_token_id": 3,
               "boa_token_id": 1, "eoa_token_index": 2, "audio_token_id": 3}  # fmt: skip
    config = Gemma4Config(
        text_config=text.to_dict(), vision_config=vision.to_dict(), audio_config=audio.to_dict(),
        tie_word_embeddings=True, **markers,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a tiny causal LM + tokenizer (ChatML template), built once per session.

    Treat it as read-only; build your own with :func:`build_tiny_model` to change it.
    """
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llm") / "model")


def _tiny_model_factory(tmp_path: Path) -> Iterator[Any]:
    """``tiny_model_factory(name="m", **kwargs)`` builds a fresh tiny model dir under ``tmp_path``."""

    def _build(name: str = "model", **kwargs: Any) -> Path:
        return build_tiny_model(tmp_path / name, **kwargs)

    yield _build


try:  # The fixtures need pytest; building a model from the shell does not.
    import pytest as _pytest
except ImportError:  # pragma: no cover - exercised by a subprocess test with pytest blocked
    pass
else:
    tiny_model_dir = _pytest.fixture(scope="session", name="tiny_model_dir")(_tiny_model_dir)
    tiny_model_factory = _pytest.fixture(name="tiny_model_factory")(_tiny_model_factory)


def main(argv: list[str] | None = None) -> int:
    """``python -m agilerl_plugin_llm.testing build-tiny-model DIR [--seed N] [--vllm] [--no-chat-template]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agilerl_plugin_llm.testing")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-tiny-model", help="write a tiny causal LM + tokenizer to DIR")
    build.add_argument("dir")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument(
        "--vllm", action="store_true", help=f"head_dim {VLLM_HEAD_DIM} (2 heads), which vLLM's CPU attention serves"
    )
    build.add_argument(
        "--no-chat-template", action="store_true", help="save the tokenizer without a chat template (to see that error)"
    )
    args = parser.parse_args(argv)
    template = None if args.no_chat_template else CHAT_TEMPLATE
    path = build_tiny_model(args.dir, seed=args.seed, vllm=args.vllm, chat_template=template)
    print(f"tiny model written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
