"""Rollout environments: ``make_rollout_env_factory`` and the bundle the rollout strategy trains on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agilerl_plugin_llm.rollout.harness import RolloutHarness, load_chat_template, stop_token_ids
from agilerl_plugin_llm.rollout.sources import RolloutSourceError, RowsFactory, build_source

DEFAULT_MAX_OUTPUT_TOKENS = 64


def _factory(
    spec: Any,
    tokenizer: Any,
    *,
    max_model_len: int | None,
    max_output_tokens: int | None,
    seed: int | None,
    split: str,
) -> tuple[Callable[[], RolloutHarness], int, int | None]:
    make_env, source_turns, field = build_source(spec, seed=seed, split=split)
    spec_turns = getattr(spec, "max_turns", None)
    max_turns = int(spec_turns or source_turns or 1)
    if field == "env_url" and spec_turns is None and source_turns is None:
        raise RolloutSourceError("environment.max_turns: required with env_url (the service cannot be probed)")
    template = load_chat_template(getattr(spec, "chat_template_path", None))
    options: dict[str, Any] = {
        "max_turns": max_turns,
        "max_model_len": int(max_model_len or 1024),
        "max_output_tokens": int(max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS),
        "apply_chat_template": bool(getattr(spec, "apply_chat_template", True)),
        "chat_template": template,
        "chat_template_kwargs": dict(getattr(spec, "chat_template_kwargs", None) or {}),
        "stop_ids": stop_token_ids(tokenizer),
        "encode_cache": {},
    }
    # Fail now (no chat template, ...) rather than in the first rollout.
    RolloutHarness(_NullEnv(), tokenizer, **options)

    def factory() -> RolloutHarness:
        return RolloutHarness(make_env(), tokenizer, **options)

    # A dataset source knows how many rows its split holds; an env drawing its own episodes does not.
    rows = make_env.rows if isinstance(make_env, RowsFactory) else None
    return factory, max_turns, rows


def make_rollout_env_factory(
    spec: Any,
    tokenizer: Any,
    *,
    max_model_len: int | None = None,
    max_output_tokens: int | None = None,
    seed: int | None = None,
) -> tuple[Callable[[], RolloutHarness], int]:
    """A zero-argument factory of independent :class:`RolloutHarness` es, and the turn budget.

    The source is the one rollout source the spec names (dataset rows + rubric, ``entrypoint``, or
    a source another plugin registered, such as the OpenEnv plugin's ``env_url``). Each call of the
    factory makes a fresh env, so concurrent trajectories never share state.

    :param spec: an ``LLMEnvSpec`` with ``env_type: rollout``.
    :param tokenizer: the policy's tokenizer (shared by every harness).
    :param max_model_len: context budget per episode (default 1024).
    :param max_output_tokens: new tokens per turn (default 64).
    :param seed: seeds the dataset's train/test split and each env's row sampling.
    """
    factory, turns, _ = _factory(
        spec, tokenizer, max_model_len=max_model_len, max_output_tokens=max_output_tokens, seed=seed, split="train"
    )
    return factory, turns


class _NullEnv:
    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0, True, False, {}


@dataclass
class RolloutEnvs:
    """What the rollout strategy trains and evaluates on: harness factories for both splits."""

    spec: Any
    tokenizer: Any
    make_train: Callable[[], RolloutHarness]
    make_eval: Callable[[], RolloutHarness]
    max_turns: int
    stop_ids: list[int]
    #: Rows in the held-out split (a dataset source; None for an env drawing its own episodes): the
    #: held-out evaluation's default size (:func:`agilerl_plugin_llm.training_fields.eval_prompt_count`).
    eval_rows: int | None = None

    @property
    def label(self) -> str:
        return str(getattr(self.spec, "label", "rollout"))

    def close(self) -> None:
        pass


def load_tokenizer(path: str | None) -> Any:
    """The policy's tokenizer from a local directory or the local HF cache (no downloads)."""
    if not path:
        raise RolloutSourceError(
            "network.pretrained_model_name_or_path: required for LLM algorithms (a local model directory)"
        )
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise RolloutSourceError(
            f"network.pretrained_model_name_or_path: cannot load a tokenizer from {path!r} (a local directory or "
            f"the local Hugging Face cache; nothing is downloaded): {type(exc).__name__}: {exc}"
        ) from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def make_rollout_envs(
    spec: Any,
    tokenizer: Any,
    *,
    max_model_len: int | None = None,
    max_output_tokens: int | None = None,
    seed: int | None = None,
) -> RolloutEnvs:
    """Train and held-out harness factories (the dataset source splits rows; others reseed)."""
    train, turns, _ = _factory(
        spec, tokenizer, max_model_len=max_model_len, max_output_tokens=max_output_tokens, seed=seed, split="train"
    )
    evaluate, _, eval_rows = _factory(
        spec, tokenizer, max_model_len=max_model_len, max_output_tokens=max_output_tokens, seed=seed, split="test"
    )
    return RolloutEnvs(spec, tokenizer, train, evaluate, turns, stop_token_ids(tokenizer), eval_rows)


def make_rollout_env(spec: Any, *, tokenizer: Any = None, seed: int | None = None, **_: Any) -> RolloutEnvs:
    """The ``rollout`` env type's factory for :func:`agilerl.models.env.make_env`.

    Without ``tokenizer`` it cannot know the policy; pass the tokenizer (the strategy does).
    """
    if tokenizer is None:
        raise RolloutSourceError("make_env for env_type rollout needs tokenizer=<the policy's tokenizer>")
    return make_rollout_envs(spec, tokenizer, seed=seed)


__all__ = ["RolloutEnvs", "load_tokenizer", "make_rollout_env", "make_rollout_env_factory", "make_rollout_envs"]
