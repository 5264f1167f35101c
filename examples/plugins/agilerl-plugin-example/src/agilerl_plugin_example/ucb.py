"""UCB1 implementing agilerl's algorithm protocol through ``AlgorithmBase``."""

from __future__ import annotations

import math
from typing import Any

from agilerl.algorithm import AlgorithmBase
from agilerl.builders import AlgorithmBuilder, AlgorithmBuildRuntime
from agilerl.models import TrainingManifest
from agilerl.strategies import TrainingStrategy
from agilerl_plugin_example.env import KArmedBandit
from agilerl_plugin_example.specs import UCB1Spec


class UCB1(AlgorithmBase[UCB1Spec]):
    def __init__(self, spec: UCB1Spec, arms: int, *, index: int = 0) -> None:
        super().__init__(spec, index=index)
        self.counts = [0] * arms
        self.values = [0.0] * arms

    def act(self) -> int:
        for arm, n in enumerate(self.counts):
            if n == 0:
                return arm
        t = sum(self.counts)
        return max(
            range(len(self.counts)),
            key=lambda a: self.values[a] + self.spec.c * math.sqrt(math.log(t) / self.counts[a]),
        )

    def update(self, arm: int, reward: float) -> None:
        self.counts[arm] += 1
        self.values[arm] += (reward - self.values[arm]) / self.counts[arm]

    def best_arm(self) -> int:
        return max(range(len(self.values)), key=lambda a: self.values[a])

    def test(self, env: KArmedBandit, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        # Fitness: the true payout of the arm the agent currently believes best.
        return env.probs[self.best_arm()]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "counts": list(self.counts), "values": list(self.values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.counts = list(state["counts"])
        self.values = list(state["values"])


class BanditBuilder(AlgorithmBuilder):
    paradigm = "multi_armed_bandit"

    @classmethod
    def build_for_run(
        cls, spec: UCB1Spec, *, env: KArmedBandit, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime
    ) -> UCB1:
        return cls.algo_class(spec)(spec, env.arms, index=runtime.index)


class OnlineBanditStrategy(TrainingStrategy):
    paradigm = "multi_armed_bandit"
    regime = "online"
    step_unit = "pull"

    def learn(self, agent: UCB1, run: Any, num_steps: int) -> dict[str, float]:
        total = 0.0
        for _ in range(num_steps):
            arm = agent.act()
            reward = run.env.pull(arm)
            agent.update(arm, reward)
            total += reward
        agent.steps += num_steps
        return {"mean_reward": total / max(num_steps, 1)}
