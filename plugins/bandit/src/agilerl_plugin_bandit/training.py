"""Builder (paradigm ``bandit``) and strategy (``bandit`` / ``online``) for the neural bandits.

The strategy plugs into core's evolutionary loop: ``learn`` runs the online bandit loop for a
generation's steps (act, pull, remember, learn every ``learn_step`` steps) and books cumulative
reward and regret; ``evaluate`` returns the fitness, the agent's mean reward over its most recent
steps, so the evolutionary HPO ranks agents by how well they are doing now.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from agilerl.builders import AlgorithmBuilder, AlgorithmBuildRuntime
from agilerl.models.base import AlgorithmSpec
from agilerl.strategies import TrainingStrategy
from agilerl_plugin_bandit.env import BanditDataError, check_bandit_env
from agilerl_plugin_bandit.neural_bandit import NeuralBandit
from agilerl_plugin_bandit.specs import DEFAULT_MEMORY_SIZE, BanditSpec
from agilerl_plugin_gym.sections import MlpSpec
from agilerl_plugin_gym.sections.training import rl_training

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.run import Run

#: Reward network when neither ``algorithm.net_config`` nor the manifest's ``network`` says otherwise.
DEFAULT_HIDDEN_SIZE = [128]


def network_config(spec: BanditSpec, manifest: TrainingManifest | None) -> tuple[list[int], str]:
    """Hidden sizes and activation: ``algorithm.net_config``, else ``network``, else the default.

    ``net_config`` takes ``{hidden_size, activation}`` or AgileRL's ``{encoder_config: {...},
    head_config: {...}}``; from the ``network`` section the encoder's (mlp) hidden layers come
    first, then ``latent_dim`` when the manifest gives it, then the head's.
    """
    cfg = dict(spec.net_config or {})
    hidden: list[int] = []
    activation = "ReLU"
    if cfg:
        for part in ("encoder_config", "head_config"):
            sub = cfg.get(part) or {}
            hidden += list(sub.get("hidden_size", []))
            activation = sub.get("activation", activation)
        hidden += list(cfg.get("hidden_size", []))
        activation = cfg.get("activation", activation)
    elif manifest is not None and manifest.network is not None:
        net = manifest.network
        if isinstance(net.encoder_config, MlpSpec):
            hidden += list(net.encoder_config.hidden_size)
            activation = net.encoder_config.activation
        # AgileRL's network is encoder -> latent_dim -> head: given explicitly, the latent layer is
        # one more hidden layer here (our default 64 is not AgileRL's 128, so it is not implied).
        if "latent_dim" in net.model_fields_set:
            hidden.append(net.latent_dim)
        if isinstance(net.head_config, MlpSpec):
            hidden += list(net.head_config.hidden_size)
            # One hidden activation: the head's only when written (its default must not override the
            # encoder's; validation refuses two different ones).
            if "activation" in net.head_config.model_fields_set or not isinstance(net.encoder_config, MlpSpec):
                activation = net.head_config.activation
    return (hidden or list(DEFAULT_HIDDEN_SIZE)), activation


def latent_limit(spec: BanditSpec, manifest: TrainingManifest | None) -> dict[int, int]:
    """``{latent layer index: max_latent_dim}`` when the ``network`` section gives ``latent_dim``
    and a latent range (AgileRL's default max 128 when only ``min_latent_dim`` is written)."""
    net = manifest.network if manifest is not None else None
    if spec.net_config or net is None or "latent_dim" not in net.model_fields_set:
        return {}
    if net.min_latent_dim is None and net.max_latent_dim is None:
        return {}
    index = len(net.encoder_config.hidden_size) if isinstance(net.encoder_config, MlpSpec) else 0
    return {index: net.max_latent_dim if net.max_latent_dim is not None else max(128, net.latent_dim)}


class BanditBuilder(AlgorithmBuilder):
    """Builds NeuralUCB / NeuralTS agents sized to the bandit env."""

    paradigm: ClassVar[str] = "bandit"

    @classmethod
    def build(
        cls,
        spec: BanditSpec,
        context_dim: int,
        arms: int,
        *,
        runtime: AlgorithmBuildRuntime | None = None,
        hidden_size: list[int] | None = None,
        activation: str | None = None,
        memory_size: int = DEFAULT_MEMORY_SIZE,
    ) -> NeuralBandit:
        """Build one agent for contexts of size ``context_dim`` and ``arms`` arms."""
        runtime = runtime or AlgorithmBuildRuntime()
        default_hidden, default_act = network_config(spec, runtime.manifest)
        algo_cls = cls.algo_class(spec)
        return algo_cls(  # type: ignore[no-any-return]
            spec,
            context_dim=context_dim,
            arms=arms,
            hidden_size=hidden_size or default_hidden,
            activation=activation or default_act,
            memory_size=memory_size,
            index=runtime.index,
            device=runtime.device,
            seed=runtime.seed,
            node_limits=latent_limit(spec, runtime.manifest) if hidden_size is None else None,
        )

    @classmethod
    def build_for_run(
        cls, spec: AlgorithmSpec, *, env: Any, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime
    ) -> NeuralBandit:
        if not isinstance(spec, BanditSpec):
            raise TypeError(f"BanditBuilder builds bandit algorithms, got {type(spec).__name__}")
        check_bandit_env(env, source="environment")
        buffer = manifest.replay_buffer
        memory = buffer.max_size if buffer is not None else DEFAULT_MEMORY_SIZE
        return cls.build(spec, int(env.context_dim), int(env.arms), runtime=runtime, memory_size=memory)


class BanditStrategy(TrainingStrategy):
    """Online contextual-bandit training (NeuralUCB, NeuralTS) inside core's evolutionary loop."""

    paradigm: ClassVar[str] = "bandit"
    regime: ClassVar[str] = "online"
    step_unit: ClassVar[str] = "step"

    def __init__(self) -> None:
        self._run: Run | None = None

    def setup(self, run: Run) -> None:
        check_bandit_env(run.env, source="environment")
        self._run = run

    def state_dict(self) -> dict[str, Any]:
        """The env's sampler state when it can give one, so resume replays the same contexts."""
        env = self._run.env if self._run is not None else None
        get_state = getattr(env, "state_dict", None)
        return {"env": get_state()} if callable(get_state) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        env = self._run.env if self._run is not None else None
        if "env" in state and callable(getattr(env, "load_state_dict", None)):
            env.load_state_dict(state["env"])  # type: ignore[union-attr]

    def learn(self, agent: NeuralBandit, run: Run, num_steps: int) -> dict[str, float]:
        """``num_steps`` online steps. With ``training.episode_steps`` (AgileRL's meaning for
        bandits), the steps run as episodes of that many steps: the env is reset at the start of
        each (counted on the agent's own steps, so episodes span generations and resumes alike), and
        each full episode's total reward is a training score;"""
        env = run.env
        optimal = getattr(env, "optimal_reward", None)
        episode_steps = rl_training(run.manifest).episode_steps
        context = env.reset()
        total_reward = 0.0
        total_regret = 0.0
        losses: list[torch.Tensor] = []
        episode_scores: list[float] = []
        episode_score = 0.0
        for i in range(num_steps):
            if episode_steps and i and i % episode_steps == 0:
                episode_scores.append(episode_score)
                episode_score = 0.0
                context = env.reset()  # a new episode (the first one was reset above)
            arm = agent.get_action(context)
            if not 0 <= arm < agent.arms:  # pragma: no cover - argmax over arms cannot leave the range
                raise BanditDataError(f"agent chose arm {arm} outside [0, {agent.arms})")
            # The best reward is a property of the context shown, so read it before stepping.
            best = float(optimal()) if optimal is not None else None
            next_context, reward = env.step(arm)
            reward = float(reward)
            agent.observe(context[arm], reward)
            regret = None if best is None else best - reward
            agent.record(reward, regret)
            total_reward += reward
            total_regret += regret or 0.0
            agent.steps += 1
            if agent.steps % agent.spec.learn_step == 0:
                losses.append(agent.learn())
            context = next_context
            episode_score += reward
        if episode_steps and num_steps % episode_steps == 0:
            episode_scores.append(episode_score)
        stats = {
            "mean_reward": total_reward / max(num_steps, 1),
            "recent_mean_reward": agent.recent_mean_reward(),
            "cumulative_reward": agent.cumulative_reward,
            "cumulative_regret": agent.cumulative_regret if agent.regret_known else math.nan,
            "regret": total_regret if agent.regret_known else math.nan,
        }
        if losses:
            stats["loss"] = float(torch.stack(losses).mean())
        if episode_scores:
            stats["train_return"] = sum(episode_scores) / len(episode_scores)
            stats["episodes"] = float(len(episode_scores))
        if getattr(run, "progress", False):
            regret_note = f"{agent.cumulative_regret:.0f}" if agent.regret_known else "n/a (env has no optimal_reward)"
            print(
                f"[agilerl] agent {agent.index}: steps {agent.steps} mean reward {stats['mean_reward']:.3f} "
                f"cumulative reward {agent.cumulative_reward:.0f} cumulative regret {regret_note}",
                flush=True,
            )
        return stats

    def evaluate(self, agent: NeuralBandit, run: Run) -> float:
        """Fitness on AgileRL's scale when ``training.eval_steps`` is set: the greedy policy's total
        reward over ``eval_steps`` steps, averaged over ``eval_loop`` runs (so AgileRL's
        ``target_score`` values mean the same here). Otherwise the mean reward over the agent's last
        ``fitness_window`` online steps."""
        t = run.manifest.training
        if t.eval_steps is not None:
            return agent.test(run.eval_env, max_steps=t.eval_steps, loop=t.eval_loop) * t.eval_steps
        return agent.recent_mean_reward()


__all__ = ["BanditBuilder", "BanditStrategy", "network_config"]
