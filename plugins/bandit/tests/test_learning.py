"""Both algorithms learn, from a manifest, on iris and on a categorical table.

Regret is compared with a uniform-random policy actually run on the same env for the same number
of steps (not a formula), and the mean reward over the last 500 steps must reach 0.9 on iris.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agilerl.models import load_manifest, make_env
from agilerl.training.trainer import LocalTrainer

STEPS = 4000


def manifest(algo: str, environment: dict[str, Any], run_dir: Path, **training: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agilerl.com/v1",
        "algorithm": {"name": algo},
        "environment": {"env_type": "bandit", **environment},
        "training": {"max_steps": STEPS, "evo_steps": 500, "seed": 0, "progress": False, "run_dir": str(run_dir),
                     **training},
    }  # fmt: skip


def random_policy_regret(environment: dict[str, Any], steps: int, seed: int = 0) -> float:
    """Cumulative regret of pulling arms uniformly at random on the same env."""
    env = make_env(
        load_manifest({"algorithm": {"name": "NeuralUCB"}, "environment": environment}).environment, seed=seed
    )
    # A stream of its own: seeded like the env, its draws would replay the env's row draws.
    rng = np.random.default_rng([seed, 1])
    env.reset()
    regret = 0.0
    for _ in range(steps):
        best = env.optimal_reward()
        _, reward = env.step(int(rng.integers(env.arms)))
        regret += best - reward
    return regret


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["NeuralUCB", "NeuralTS"])
def test_learns_iris(algo: str, tmp_path: Path) -> None:
    environment = {"name": "iris"}
    result = LocalTrainer.from_manifest(manifest(algo, environment, tmp_path)).train()
    agent = result.population[0]
    assert agent.steps == STEPS
    last_500 = agent.recent_mean_reward()
    assert len(agent.recent_rewards) == 500
    assert last_500 >= 0.9, f"{algo}: mean reward over the last 500 steps {last_500:.3f}"
    random_regret = random_policy_regret(environment, STEPS)
    assert agent.cumulative_regret < 0.25 * random_regret, (agent.cumulative_regret, random_regret)
    # regret and reward are reported as metrics, per generation
    rows = result.history
    assert rows[-1]["cumulative_regret"] == pytest.approx(agent.cumulative_regret)
    assert rows[-1]["cumulative_reward"] + rows[-1]["cumulative_regret"] == pytest.approx(STEPS)
    assert rows[0]["mean_reward"] < rows[-1]["mean_reward"]
    # the greedy policy (no exploration) is at least as good as the exploring one
    eval_env = make_env(load_manifest({"algorithm": {"name": algo}, "environment": environment}).environment, seed=7)
    assert agent.test(eval_env, max_steps=300) >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["NeuralUCB", "NeuralTS"])
def test_learns_categorical_table(algo: str, tmp_path: Path, mushrooms: dict[str, str]) -> None:
    result = LocalTrainer.from_manifest(manifest(algo, mushrooms, tmp_path)).train()
    agent = result.population[0]
    random_regret = random_policy_regret(mushrooms, STEPS)
    assert agent.cumulative_regret < 0.25 * random_regret, (agent.cumulative_regret, random_regret)
    assert agent.recent_mean_reward() >= 0.9
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0].count("cumulative_regret") == 1


def test_example_manifests_validate_and_name_iris_without_a_path() -> None:
    repo = Path(__file__).resolve().parents[3]
    ucb = load_manifest(repo / "examples" / "neural_ucb_iris.yaml")
    assert ucb.algorithm.name == "NeuralUCB" and ucb.environment.builtin_dataset == "iris"
    ts = load_manifest(repo / "examples" / "neural_ts_mushrooms.yaml")
    assert ts.algorithm.name == "NeuralTS" and ts.algorithm.lr == 3e-3


def test_cli_train_reports_cumulative_regret(write_manifest, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = manifest("NeuralUCB", {"name": "wine"}, tmp_path / "run", max_steps=400, evo_steps=200, progress=True)
    code, out, _err = run_cli("train", write_manifest(data))
    assert code == 0
    assert "agent 0: steps 400" in out and "cumulative regret" in out
    assert (tmp_path / "run" / "elite.pt").exists()


def test_custom_entrypoint_env_trains_from_a_manifest(tmp_path: Path) -> None:
    """A user's env without optimal_reward: it trains, and regret is reported as unknown."""
    (tmp_path / "sign_bandit.py").write_text(
        "import numpy as np\n"
        "class SignBandit:\n"
        "    # arm 1 pays when the hidden feature is positive, arm 0 otherwise\n"
        "    def __init__(self, seed=0):\n"
        "        self.arms, self.context_dim, self.rng = 2, 2, np.random.default_rng(seed)\n"
        "    def _draw(self):\n"
        "        self.x = float(self.rng.normal())\n"
        "        return np.array([[self.x, 0.0], [0.0, self.x]], dtype='float32')\n"
        "    def reset(self):\n"
        "        return self._draw()\n"
        "    def step(self, arm):\n"
        "        reward = float((arm == 1) == (self.x > 0))\n"
        "        return self._draw(), reward\n"
    )
    data = manifest("NeuralUCB", {"entrypoint": "sign_bandit:SignBandit", "path": str(tmp_path),
                                  "env_config": {"seed": 1}}, tmp_path / "run", max_steps=1500)  # fmt: skip
    result = LocalTrainer.from_manifest(data).train()
    agent = result.population[0]
    assert agent.recent_mean_reward() > 0.8
    assert not agent.regret_known
    assert math.isnan(result.history[-1]["cumulative_regret"])
