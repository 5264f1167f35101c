"""What every generation backend shares: the sampling settings, the backend protocol, stop rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from agilerl.errors import AgileRLError


class GenerationError(AgileRLError):
    """A generation backend cannot be used as configured."""


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens (the rollout spec's fields). ``temperature == 0`` is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    #: A reply ends after the first of these strings (kept, as in ``generate(stop_strings=...)``).
    stop_strings: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @classmethod
    def from_spec(cls, spec: Any, *, greedy: bool = False) -> SamplingConfig:
        return cls(
            temperature=0.0 if greedy else float(spec.temperature),
            top_p=float(spec.top_p),
            top_k=int(spec.top_k),
            min_p=float(spec.min_p),
            repetition_penalty=float(spec.repetition_penalty),
            min_new_tokens=int(spec.min_output_tokens or 0),
            stop_strings=tuple(getattr(spec, "stop_strings", None) or ()),
        )


def cut_at_stop_string(ids: list[int], tokenizer: Any, stop_strings: tuple[str, ...]) -> tuple[list[int], bool]:
    """``ids`` up to and including the token that completes the first stop string; whether one was found."""
    if not stop_strings:
        return ids, False
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:end], skip_special_tokens=False)
        if any(stop in text for stop in stop_strings):
            return ids[:end], True
    return ids, False


class GenerationBackend(Protocol):
    """What rollout collection needs from an engine."""

    name: str

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[int]]:
        """New token ids per prompt: at most ``max_new_tokens[i]``, ending at the first stop token."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the engine generate from ``model``'s current weights."""
        ...

    def close(self) -> None: ...


def _cut(ids: list[int], stop: set[int], limit: int) -> list[int]:
    """Up to and including the first stop token, at most ``limit`` tokens."""
    out: list[int] = []
    for tok in ids[:limit]:
        out.append(tok)
        if tok in stop:
            break
    return out
