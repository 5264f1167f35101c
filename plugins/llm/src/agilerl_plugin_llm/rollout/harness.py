"""RolloutHarness: one text env turned into token ids the policy reads and writes.

The harness owns the turn loop's bookkeeping for one episode:

* it renders the conversation with the tokenizer's chat template (``apply_chat_template``,
  ``chat_template_kwargs``, ``chat_template_path``), or plain text when templates are off;
* it keeps the episode as one token sequence plus a *provenance mask*: 1 for tokens the policy
  generated, 0 for everything the env or the template wrote. Only mask-1 tokens receive loss;
* it stops the episode cleanly, marked ``truncated``, when the next turn would not fit in
  ``max_model_len``.

Policy tokens are appended exactly as generated (never decoded and re-tokenised), so the log-probs
computed at training time are of the very tokens that were sampled. Between turns only the
boundary (end of the assistant turn, the next user message, the next generation prompt) is
tokenised, from the chat template rendered around a placeholder reply.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError
from agilerl_plugin_llm.envs import TextEnv, check_reset, check_step, format_observation

_PLACEHOLDER = "\u2063AGILERL_REPLY\u2063"
#: Rendered chat templates per tokenizer (see ``RolloutHarness._render_key``).
_RENDERED: weakref.WeakKeyDictionary[Any, dict[Any, str]] = weakref.WeakKeyDictionary()


class NoRoomToGenerateError(AgileRLError):
    """Every prompt of a batch fills the context budget: the policy could write no token."""


def no_room_message(prompt_lens: list[int], max_model_len: int, max_output_tokens: int) -> str:
    longest, shortest = max(prompt_lens), min(prompt_lens)
    size = f"{longest} tokens" if longest == shortest else f"{shortest} to {longest} tokens"
    return (
        f"the prompt leaves no room to generate: it is {size} (system prompt, tools and the env's first "
        f"message as the chat template renders them) and network.max_context_length is {max_model_len}, so "
        f"every completion would have 0 tokens. Raise network.max_context_length to at least "
        f"{longest + max_output_tokens} (prompt + max_output_tokens {max_output_tokens}), or shorten the prompt"
    )


class ChatTemplateError(AgileRLError):
    """The tokenizer cannot render the conversation (no chat template, or a broken one)."""


@dataclass
class Trajectory:
    """One finished episode, ready for a loss."""

    token_ids: list[int]
    #: 1 where the policy generated the token (trained on), 0 for prompt/env/template tokens.
    policy_mask: list[int]
    #: Turn index of each policy token (-1 for the others): per-turn credit assignment.
    turn_index: list[int]
    rewards: list[float]
    prompt_len: int
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)
    #: Whether a reply was cut at the token budget (it ended without a stop token).
    cut_off: bool = False
    #: The engine's log-prob of each policy token when it was sampled (in order; NaN where the engine
    #: gave none), for ``vllm_importance_sampling_correction``; None when not recorded.
    sampling_logprobs: list[float] | None = None

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def num_policy_tokens(self) -> int:
        return int(sum(self.policy_mask))


def load_chat_template(path: str | None) -> str | None:
    if not path:
        return None
    p = Path(path)
    if not p.is_file():
        raise ChatTemplateError(f"environment.chat_template_path: file not found: {p}")
    return p.read_text(encoding="utf-8")


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Token ids that end a reply: eos plus the chat end-of-turn markers the vocabulary has."""
    ids: list[int] = []
    eos = tokenizer.eos_token_id
    for tok in [eos] if not isinstance(eos, list) else eos:
        if tok is not None:
            ids.append(int(tok))
    unk = getattr(tokenizer, "unk_token_id", None)
    for marker in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>"):
        tid = tokenizer.convert_tokens_to_ids(marker)
        if isinstance(tid, int) and tid >= 0 and tid != unk and tid not in ids:
            ids.append(tid)
    return ids


class RolloutHarness:
    """Plays one :class:`~agilerl_plugin_llm.envs.TextEnv` episode at a time, in tokens.

    Use: ``ids = h.reset(seed)``; while not ``h.done``: generate up to ``h.generation_budget()`` new
    tokens from ``h.context()`` and pass them to ``h.step(new_ids)``; then ``h.trajectory()``.

    :param env: the text env (reset/step on strings).
    :param tokenizer: a Hugging Face tokenizer (shared between harnesses; not modified).
    :param max_turns: replies per episode; the episode is truncated after the last one.
    :param max_model_len: context budget (prompt + every turn) in tokens.
    :param max_output_tokens: new tokens per reply.
    :param apply_chat_template: render with the chat template; False joins plain text.
    :param chat_template: a Jinja template replacing the tokenizer's (from ``chat_template_path``).
    :param chat_template_kwargs: extra variables for the template (``enable_thinking``, ...).
    :param stop_ids: token ids that end a reply (default: from the tokenizer).
    :param encode_cache: a dict shared by harnesses to memoise tokenisation of rendered text.
    """

    def __init__(
        self,
        env: TextEnv,
        tokenizer: Any,
        *,
        max_turns: int = 1,
        max_model_len: int = 1024,
        max_output_tokens: int = 64,
        apply_chat_template: bool = True,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        stop_ids: list[int] | None = None,
        encode_cache: dict[str, list[int]] | None = None,
    ) -> None:
        self.env = env
        self.tokenizer = tokenizer
        self.max_turns = max(1, int(max_turns))
        self.max_model_len = int(max_model_len)
        self.max_output_tokens = int(max_output_tokens)
        self.apply_chat_template = apply_chat_template
        self.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.stop_ids = set(stop_ids if stop_ids is not None else stop_token_ids(tokenizer))
        # Harnesses of one factory share prompt tokenisations (a GRPO group renders one prompt).
        self._encode_cache = encode_cache
        if apply_chat_template and not (chat_template or getattr(tokenizer, "chat_template", None)):
            raise ChatTemplateError(
                "the tokenizer has no chat template: set environment.chat_template_path to a Jinja template "
                "file, or apply_chat_template: false for plain-text prompts"
            )
        self._reset_state()

    # --- episode state ------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self.messages: list[dict[str, str]] = []
        self.token_ids: list[int] = []
        self.policy_mask: list[int] = []
        self.turn_index: list[int] = []
        self.rewards: list[float] = []
        self.turn = 0
        self.prompt_len = 0
        self.cut_off = False
        self.terminated = False
        self.truncated = False
        self._ended_with_stop = False
        self.sampling_logprobs: list[float] | None = None
        #: The prompt alone filled ``max_model_len``: the episode ended before the policy wrote a token.
        self.no_room = False
        self.info: dict[str, Any] = {}

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def _append(self, ids: list[int], *, policy: bool) -> None:
        self.token_ids.extend(ids)
        self.policy_mask.extend([1 if policy else 0] * len(ids))
        self.turn_index.extend([self.turn if policy else -1] * len(ids))

    def _render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        # An env offering tools (``env.tools``, OpenAI function schemas) has them rendered the way the
        # model's own chat template announces tools, so it answers in its trained tool-call format.
        tools = getattr(self.env, "tools", None)
        extra = {"tools": tools} if tools and "tools" not in self.chat_template_kwargs else {}
        key = self._render_key(messages, add_generation_prompt, extra)
        cache = _RENDERED.setdefault(self.tokenizer, {}) if key is not None else None
        if cache is not None and key in cache:
            return cache[key]
        try:
            text = self.tokenizer.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                chat_template=self.chat_template,
                **self.chat_template_kwargs,
                **extra,
            )
        except Exception as exc:  # jinja errors, missing template
            raise ChatTemplateError(f"rendering the chat template failed: {type(exc).__name__}: {exc}") from exc
        if cache is not None and key is not None:
            if len(cache) > 4096:
                cache.clear()
            cache[key] = str(text)
        return str(text)

    def _render_key(self, messages: list[dict[str, str]], add_generation_prompt: bool, extra: dict[str, Any]) -> Any:
        """What a rendering depends on (a GRPO group renders one prompt group_size times), or None where it
        may not be a function of it: a template that is not one string, or one that reads the clock."""
        template = (
            self.chat_template if self.chat_template is not None else getattr(self.tokenizer, "chat_template", None)
        )
        if not isinstance(template, str) or "strftime" in template:
            return None
        try:
            return (json.dumps(messages), add_generation_prompt, template,
                    json.dumps([self.chat_template_kwargs, extra], sort_keys=True))  # fmt: skip
        except (TypeError, ValueError):  # values json cannot write: render every time
            return None

    def _encode(self, text: str) -> list[int]:
        cache = self._encode_cache
        if cache is not None and text in cache:
            return list(cache[text])
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if cache is not None:
            if len(cache) > 4096:
                cache.clear()
            cache[text] = ids
        return list(ids)

    # --- the episode ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> list[int]:
        """Start an episode; return the prompt ids."""
        return self.begin(self.env.reset(seed=seed))

    def begin(self, reset_result: Any) -> list[int]:
        """Start an episode from what ``env.reset`` returned (``reset`` = ``env.reset`` + this)."""
        self._reset_state()
        obs, info = check_reset(reset_result, self.env)
        self.info = dict(info)
        obs = format_observation(obs, info)
        system = getattr(self.env, "system_prompt", None)
        prefix = getattr(self.env, "assistant_prefix", None)
        conversation = getattr(self.env, "prompt_messages", None)  # a conversational row (TRL's form)
        if conversation:
            if not self.apply_chat_template:
                raise ChatTemplateError("the prompt is a list of messages, which only a chat template renders; "
                                        "remove environment.apply_chat_template: false")  # fmt: skip
            self.messages = [dict(m) for m in conversation]
        else:
            if system:
                self.messages.append({"role": "system", "content": str(system)})
            self.messages.append({"role": "user", "content": obs})
        if self.apply_chat_template:
            text = self._render(self.messages, add_generation_prompt=True)
        else:
            text = (f"{system}\n\n" if system else "") + obs
        if prefix:
            text += str(prefix)
        ids = self._encode(text)
        if not self.apply_chat_template and self.tokenizer.bos_token_id is not None:
            ids = [self.tokenizer.bos_token_id, *ids]
        self._append(ids, policy=False)
        self.prompt_len = len(ids)
        if self.generation_budget() < 1:
            self.truncated = True  # the prompt alone fills the context: nothing to generate
            self.no_room = True
        return list(ids)

    def context(self) -> list[int]:
        """Every token so far: what the policy conditions on for the next reply."""
        return list(self.token_ids)

    def generation_budget(self) -> int:
        """New tokens the next reply may have without overflowing ``max_model_len``."""
        return max(0, min(self.max_output_tokens, self.max_model_len - len(self.token_ids)))

    def step(self, new_ids: list[int]) -> float:
        """Record the policy's reply (token ids as generated), play it in the env; return the reward."""
        return self.finish_step(self.env.step(self.reply(new_ids)))

    def reply(self, new_ids: list[int], *, stopped: bool = False, logprobs: list[float] | None = None) -> str:
        """Record the policy's reply (token ids as generated); return it as the env's action text.

        ``step`` = ``reply`` + ``env.step`` + :meth:`finish_step`; split so that a batch of remote
        envs can be stepped concurrently while the tokenizer stays on one thread. ``stopped``: the
        reply was ended by a stop string (so it was not cut at the token budget). ``logprobs``: the
        sampling engine's log-prob of each new token (kept as ``Trajectory.sampling_logprobs``).
        """
        if self.done:
            raise RuntimeError("step() on a finished episode; call reset() first")
        new_ids = [int(t) for t in new_ids][: self.generation_budget()]
        if logprobs is not None or self.sampling_logprobs is not None:
            given = [float(x) for x in (logprobs or [])][: len(new_ids)]
            missing = [float("nan")] * (len(new_ids) - len(given))
            before = self.sampling_logprobs
            if before is None:  # the episode's earlier replies carried none
                before = [float("nan")] * sum(self.policy_mask)
            self.sampling_logprobs = before + given + missing
        self._append(new_ids, policy=True)
        self._ended_with_stop = bool(new_ids) and new_ids[-1] in self.stop_ids
        # ``stopped``: the reply ended at a stop string (a proper end, though not a stop token).
        self.cut_off = self.cut_off or not (self._ended_with_stop or stopped)
        reply = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        self.messages.append({"role": "assistant", "content": reply})
        return str(reply)

    def finish_step(self, step_result: Any) -> float:
        """Take in what ``env.step`` returned for the last :meth:`reply`; return the reward."""
        obs, reward, terminated, truncated, info = check_step(step_result, self.env)
        self.rewards.append(reward)
        self.info.update(info)
        self.turn += 1
        self.terminated = terminated
        self.truncated = truncated or (not terminated and self.turn >= self.max_turns)
        if self.done:
            return reward
        obs = format_observation(obs, info)
        boundary = self._boundary(obs, ended_with_stop=self._ended_with_stop)
        self.messages.append({"role": "user", "content": obs})
        # The next turn must have room for at least one new token; otherwise stop here, cleanly.
        if len(self.token_ids) + len(boundary) + 1 > self.max_model_len:
            self.truncated = True
            self.info["context_limit"] = True
            return reward
        self._append(boundary, policy=False)
        return reward

    def _boundary(self, obs: str, *, ended_with_stop: bool) -> list[int]:
        """Tokens between the policy's reply and its next reply: end of turn, user message, prompt."""
        if not self.apply_chat_template:
            return self._encode(f"\n{obs}\n")
        history = [
            *self.messages[:-1],
            {"role": "assistant", "content": _PLACEHOLDER},
            {"role": "user", "content": obs},
        ]
        text = self._render(history, add_generation_prompt=True)
        at = text.find(_PLACEHOLDER)
        if at < 0:
            raise ChatTemplateError(
                "the chat template drops earlier assistant replies, so multi-turn episodes cannot be rendered "
                "token-exactly; set environment.chat_template_path to a template that keeps them"
            )
        suffix = text[at + len(_PLACEHOLDER) :]
        if ended_with_stop:
            # The reply already ends with the end-of-turn token the template would write next.
            for tid in self.stop_ids:
                marker = self.tokenizer.convert_ids_to_tokens(tid)
                if isinstance(marker, str) and suffix.startswith(marker):
                    suffix = suffix[len(marker) :]
                    break
        return self._encode(suffix)

    def trajectory(self) -> Trajectory:
        return Trajectory(
            token_ids=list(self.token_ids),
            policy_mask=list(self.policy_mask),
            turn_index=list(self.turn_index),
            rewards=list(self.rewards) or [0.0],
            prompt_len=self.prompt_len,
            terminated=self.terminated,
            truncated=self.truncated,
            info=dict(self.info),
            cut_off=self.cut_off,
            sampling_logprobs=None if self.sampling_logprobs is None else list(self.sampling_logprobs),
        )

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


__all__ = ["ChatTemplateError", "RolloutHarness", "Trajectory", "load_chat_template", "stop_token_ids"]
