"""The manifest section of A2C (pydantic only: cheap to import, so ``agilerl validate`` needs no torch)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from agilerl.models import Mutable
from agilerl_plugin_gym.single_agent.specs import GymAlgorithmSpec
from agilerl_plugin_gym.spec_base import DISCRETE_ACTIONS, SpaceRules


class A2CSpec(GymAlgorithmSpec):
    """Advantage actor-critic (Mnih et al. 2016, synchronous): one gradient step per rollout.

    Inheriting :class:`GymAlgorithmSpec` brings the gym env checks (env type, gymnasium id, the
    env's spaces against A2C's rules) at validation time; ``paradigm`` and ``regime`` pick the gym
    plugin's ``single_agent`` builder and its on-policy strategy (rollouts, GAE, autoreset).
    """

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    # Discrete actions; vector, image and Dict/Tuple observations (checked on one env at validation).
    space_rules: ClassVar[SpaceRules | None] = DISCRETE_ACTIONS
    default_evo_steps: ClassVar[int] = 10_000
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "ent_coef")

    learn_step: Annotated[int, Field(ge=1, description="Env steps (all envs together) per rollout and update.")] = 40
    lr: Annotated[float, Field(gt=0, description="Adam learning rate of actor and critic."), Mutable(1e-4, 3e-2)] = 7e-3
    gae_lambda: Annotated[float, Field(ge=0, le=1, description="GAE lambda (1: n-step returns).")] = 1.0
    ent_coef: Annotated[float, Field(ge=0, description="Entropy bonus coefficient."), Mutable(0.0, 0.05)] = 0.0
    vf_coef: Annotated[float, Field(ge=0, description="Value loss coefficient.")] = 0.5
    max_grad_norm: Annotated[float, Field(gt=0, description="Global gradient-norm clip.")] = 0.5
    # A2C takes one gradient step on the whole rollout: a minibatch size would do nothing, so the
    # field GymAlgorithmSpec declares is refused here by name instead of silently ignored.
    batch_size: Any = Field(default=None, description="Not used by A2C (one gradient step per rollout): leave unset.")

    @field_validator("batch_size")
    @classmethod
    def _no_batch_size(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("A2C takes one gradient step per rollout and has no minibatches; remove batch_size")
        return None
