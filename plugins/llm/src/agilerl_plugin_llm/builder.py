"""``LLMBuilder``: turns any LLM algorithm spec of this plugin (SFT, DPO, GRPO, LLMREINFORCE, ...) into
a live algorithm. The algorithm class comes from the registry (``AlgorithmBuilder.algo_class``),
so a third-party spec registered with its own algorithm class builds through here too."""

from __future__ import annotations

import copy
import inspect
from typing import Any

from agilerl.builders import AlgorithmBuilder, AlgorithmBuildRuntime
from agilerl.models.manifest import TrainingManifest
from agilerl_plugin_llm.model import load_tokenizer
from agilerl_plugin_llm.spec_base import LLMAlgorithmSpec
from agilerl_plugin_llm.training_fields import llm_training


def share_frozen_copy(model: Any) -> Any:
    """A deep copy of ``model`` whose frozen parameters are the original's (shared, not copied)."""
    memo = {id(p): p for p in model.parameters() if not p.requires_grad}
    return copy.deepcopy(model, memo)


class LLMBuilder(AlgorithmBuilder):
    """LLM fine-tuning."""

    paradigm = "llm"

    @classmethod
    def build_for_run(
        cls, spec: LLMAlgorithmSpec, *, env: Any, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime
    ) -> Any:
        """Build population member ``runtime.index`` for a run on ``env`` (which carries the tokenizer)."""
        tokenizer = getattr(env, "tokenizer", None)
        if tokenizer is None:
            if not spec.pretrained_model_name_or_path:
                raise ValueError("network.pretrained_model_name_or_path is required")
            tokenizer = load_tokenizer(spec.pretrained_model_name_or_path)
        return cls.build(
            spec,
            tokenizer=tokenizer,
            runtime=runtime,
            rollout_mode=llm_training(manifest).rollout_mode if manifest else "",
        )

    @classmethod
    def build_population(
        cls, spec: LLMAlgorithmSpec, *, env: Any, manifest: TrainingManifest, runtimes: list[AlgorithmBuildRuntime]
    ) -> list[Any]:
        """Member 0 is loaded from disk; the others start from its policy, so a population costs one base model."""
        if not runtimes:
            return []
        first = cls.build_for_run(spec, env=env, manifest=manifest, runtime=runtimes[0])
        return [first, *(cls.build_from(first, spec, manifest=manifest, runtime=r) for r in runtimes[1:])]

    @classmethod
    def build_from(
        cls, first: Any, spec: LLMAlgorithmSpec, *, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime
    ) -> Any:
        """Member ``runtime.index``, starting from ``first``'s policy (as AgileRL clones the actor).

        Every frozen tensor is shared with ``first``; each member is still constructed normally,
        so per-agent state (seeds, optimizer) is its own. An FSDP-sharded policy cannot be copied:
        then the member loads and shards its own and copies ``first``'s trainable weights.
        """
        rollout_mode = llm_training(manifest).rollout_mode if manifest else ""
        if not getattr(first, "sharded", False):
            return cls.build(
                spec,
                tokenizer=first.tokenizer,
                runtime=runtime,
                actor_network=share_frozen_copy(first.model),
                reference_model=getattr(first, "reference_model", None),
                rollout_mode=rollout_mode,
            )
        import torch

        with torch.random.fork_rng(devices=[]):  # as the copy above: the run's RNG does not move
            agent = cls.build(spec, tokenizer=first.tokenizer, runtime=runtime, rollout_mode=rollout_mode)
        agent.copy_policy_from(first)  # every member starts from agent 0's policy (its LoRA init)
        return agent

    @classmethod
    def build(
        cls,
        spec: LLMAlgorithmSpec,
        *,
        tokenizer: Any = None,
        runtime: AlgorithmBuildRuntime | None = None,
        actor_network: Any = None,
        rollout_mode: str = "",
        reference_model: Any = None,
    ) -> Any:
        """Build an LLM algorithm.

        :param spec: The algorithm spec.
        :param tokenizer: The tokenizer (required).
        :param runtime: Population slot and device (index 0, CPU when omitted).
        :param actor_network: A pre-built (or cloned) policy used instead of loading
            ``pretrained_model_name_or_path``.
        :param rollout_mode: ``training.rollout_mode``, for rollout algorithms that take it.
        :param reference_model: A frozen reference policy to share (full fine-tuning populations).
        :raises ValueError: if ``tokenizer`` is None.
        """
        if tokenizer is None:
            raise ValueError("LLMBuilder.build needs a tokenizer")
        runtime = runtime or AlgorithmBuildRuntime()
        algo_cls = cls.algo_class(spec)
        kwargs: dict[str, Any] = {
            "tokenizer": tokenizer,
            "model": actor_network,
            "reference_model": reference_model,
            "index": runtime.index,
            "device": runtime.device,
            "rollout_mode": rollout_mode,
            "seed": runtime.seed,
        }
        params = inspect.signature(algo_cls).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        agent = algo_cls(spec, **kwargs)
        manifest = getattr(runtime, "manifest", None)
        if manifest is not None:
            agent.lr_schedule_total = int(manifest.training.max_steps)  # the lr schedule spans the run
        return agent


__all__ = ["LLMBuilder", "share_frozen_copy"]
