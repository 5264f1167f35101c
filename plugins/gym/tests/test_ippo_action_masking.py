"""Action masking for IPPO (``action_masking: true``): each agent's mask from the ``action_mask``
key of its Dict observation (PettingZoo's ``{"observation", "action_mask"}``) or from
``infos[agent]["action_mask"]``, carried by the PettingZoo vector env (sync and async); masked
logits in rollouts, in the update (the stored masks), greedy actions, evaluation, ``run_episodes``
and ``predict``; a masked env and an unmasked algorithm (or the reverse) is an error naming
``algorithm.action_masking``, at validation and at run time; MADDPG and MATD3 refuse masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from masked_pz_env import EPISODE, N_ACTIONS

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.errors import AgileRLError, ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_gym.engine.on_policy import MultiAgentOnPolicyEngine
from agilerl_plugin_gym.multi_agent.builder import MultiAgentBuilder
from agilerl_plugin_gym.multi_agent.vec_env import make_pz_env

HERE = Path(__file__).resolve().parent
AGENTS = ["player_0", "player_1"]
#: Both players always choosing allowed actions for a whole episode (the score sums the agents).
PERFECT = 2.0 * EPISODE


def _env_spec(source: str | None, num_envs: int = 4, sync: bool = True, best_first: bool = False) -> dict[str, Any]:
    return {"name": "masked_choice", "entrypoint": "masked_pz_env:MaskedChoiceParallelEnv", "path": str(HERE),
            "env_config": {"source": source or "none", "best_first": best_first}, "num_envs": num_envs,
            "sync": sync}  # fmt: skip


def _manifest(source: str | None, algo: str = "IPPO", best_first: bool = False, **fields: Any) -> Any:
    """A manifest on the masked env (``source`` None: no masks), validated as a user's would be."""
    defaults = {"learn_step": 256, "batch_size": 64, "update_epochs": 4, "lr": 3e-3} if algo == "IPPO" else {}
    env = _env_spec(source, best_first=best_first)
    return load_manifest({"algorithm": {"name": algo, **defaults, **fields}, "environment": env})


def _ippo(env: Any, source: str | None, best_first: bool = False, **fields: Any) -> Any:
    """IPPO built for ``env`` from a manifest validated on the env ``source`` names."""
    manifest = _manifest(source, best_first=best_first, **fields)
    torch.manual_seed(0)
    return MultiAgentBuilder.build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest)
    )


def _random_masks(rng: np.random.Generator, n: int) -> np.ndarray:
    masks = rng.random((n, N_ACTIONS)) < rng.random((n, 1))
    masks[np.arange(n), rng.integers(0, N_ACTIONS, n)] = True  # at least one allowed
    return masks


@pytest.mark.parametrize("source", ["obs", "info"])
def test_the_vector_env_carries_each_agents_mask(source: str) -> None:
    """The mask rides out of the observation (the policy sees the ``observation`` part alone) and
    reaches ``infos["action_mask"]``; sync and async envs agree."""
    with make_pz_env(_manifest(source, action_masking=True).environment, sync=True) as env:
        assert env.observation_spaces["player_0"].shape == (N_ACTIONS,)
        obs, infos = env.reset(seed=3)
        assert env.mask_kind == source
        for a in AGENTS:
            mask = infos["action_mask"][a]
            assert mask.shape == (4, N_ACTIONS) and mask.dtype == bool
            np.testing.assert_array_equal(obs[a], mask.astype(np.float32))  # the env shows the mask too
        _, _, _, _, step_infos = env.step({a: np.zeros(4, np.int64) for a in AGENTS})
        sync_masks = step_infos["action_mask"]
    with make_pz_env(_manifest(source, action_masking=True).environment, sync=False, context="fork") as async_env:
        _, async_infos = async_env.reset(seed=3)
        assert async_env.mask_kind == source
        np.testing.assert_array_equal(async_infos["action_mask"]["player_1"], infos["action_mask"]["player_1"])
        _, _, _, _, step_infos = async_env.step({a: np.zeros(4, np.int64) for a in AGENTS})
        for a in AGENTS:
            np.testing.assert_array_equal(step_infos["action_mask"][a], sync_masks[a])
    with make_pz_env(_manifest(None).environment, sync=True) as plain:
        _, plain_infos = plain.reset(seed=0)
        assert plain.mask_kind is None and "action_mask" not in plain_infos


def test_masked_actions_are_never_taken_over_random_masks() -> None:
    """A property over 2,000 random masks per agent (one to all actions allowed, seeded): sampled
    rollout actions, greedy actions and predict (batch, one env, masks in the observation) pick
    allowed actions only, and the update's probabilities of the allowed actions sum to one with
    finite entropy."""
    with make_pz_env(_manifest("obs", action_masking=True).environment, sync=True) as env:
        agent = _ippo(env, "obs", action_masking=True)
    rng = np.random.default_rng(0)
    n = 2000
    rows = np.arange(n)
    obs = {a: rng.random((n, N_ACTIONS)).astype(np.float32) for a in AGENTS}
    masks = {a: _random_masks(rng, n) for a in AGENTS}
    for _ in range(3):
        out, env_actions = agent.act_for_rollout(obs, masks)
        for a in AGENTS:
            assert masks[a][rows, out[a]["action"]].all() and masks[a][rows, env_actions[a]].all()
    for deterministic in (True, False):
        predicted, _ = agent.predict(obs, action_masks=masks, deterministic=deterministic)
        for a in AGENTS:
            assert masks[a][rows, predicted[a]].all()
    for i in range(200):  # one env's raw observations, PettingZoo style: the mask inside each
        one = {a: {"observation": obs[a][i], "action_mask": masks[a][i].astype(np.int8)} for a in AGENTS}
        actions, _ = agent.predict(one)
        assert all(masks[a][i, actions[a]] for a in AGENTS)
    key = agent.keys["player_0"]
    x, m = torch.as_tensor(obs["player_0"]), torch.as_tensor(masks["player_0"])
    logp = torch.stack([agent.evaluate_actions(key, "player_0", x, torch.full((n,), k), m)[0]
                        for k in range(N_ACTIONS)], -1)  # fmt: skip
    torch.testing.assert_close((logp.exp() * m).sum(-1), torch.ones(n))
    assert torch.isfinite(agent.evaluate_actions(key, "player_0", x, torch.zeros(n, dtype=torch.long), m)[1]).all()


@pytest.mark.parametrize("source", ["obs", "info"])
def test_each_mask_source_trains_without_a_forbidden_action(source: str) -> None:
    """Rollouts are sampled from allowed actions only (every reward +1), the update learns from the
    stored masks, and the greedy evaluation reads the masks too."""
    with make_pz_env(_manifest(source, action_masking=True).environment, sync=True) as env:
        agent = _ippo(env, source, action_masking=True)
        engine = MultiAgentOnPolicyEngine()
        stats = engine.learn(agent, env, 512, seed=0)
        assert stats["train_score"] == PERFECT and "policy_loss" in stats
        assert any(b.action_masks is not None and b.action_masks.any() for b in engine.buffers.values())
    with make_pz_env(_manifest(source, action_masking=True).environment, sync=True, num_envs=2) as eval_env:
        assert agent.test(eval_env, seed=1) == PERFECT


def test_masking_learns_a_masked_env_faster_than_no_masking() -> None:
    """Equal budget and seed, on the env variant where only the first allowed action pays (+1; other
    allowed ones 0, forbidden ones -1): masked IPPO still has to learn which allowed action is best,
    and after 2,048 steps its greedy policy is perfect while unmasked IPPO, which must also learn
    from the observation which actions are allowed, trails far behind."""
    got = {}
    for name, source, fields in (("masked", "info", {"action_masking": True}), ("plain", None, {})):
        manifest = _manifest(source, best_first=True, **fields)
        with make_pz_env(manifest.environment, sync=True) as env:
            agent = _ippo(env, source, best_first=True, **fields)
            train = MultiAgentOnPolicyEngine().learn(agent, env, 2048, seed=0)["train_score"]
        with make_pz_env(manifest.environment, sync=True, num_envs=4) as eval_env:
            got[name] = (train, agent.test(eval_env, seed=100))
    (masked_train, masked_eval), (plain_train, plain_eval) = got["masked"], got["plain"]
    assert masked_eval == PERFECT and masked_train > plain_train + 10.0, got
    assert plain_eval < masked_eval, got


def test_the_update_recomputes_the_rollouts_log_probabilities_under_the_stored_masks() -> None:
    """One minibatch per update: its first forward is the policy that sampled the rollout, so the
    ratio is 1 and the approximate KL 0 only if the update masks the logits as the rollout did."""
    fields = {"action_masking": True, "learn_step": 256, "batch_size": 256, "update_epochs": 1, "share_groups": False}
    with make_pz_env(_manifest("info", **fields).environment, sync=True) as env:
        agent = _ippo(env, "info", **fields)
        stats = MultiAgentOnPolicyEngine().learn(agent, env, 512, seed=0)
    assert stats["approx_kl"] < 1e-5, stats


def test_a_masked_env_and_the_algorithm_must_agree_at_run_time() -> None:
    with make_pz_env(_manifest("obs", action_masking=True).environment, sync=True) as env:
        with pytest.raises(AgileRLError, match=r"algorithm\.action_masking.*set algorithm\.action_masking: true"):
            MultiAgentOnPolicyEngine().learn(_ippo(env, None), env, 64, seed=0)
        with pytest.raises(AgileRLError, match=r"set algorithm\.action_masking: true"):
            _ippo(env, None).test(env, seed=0)
    with make_pz_env(_manifest(None).environment, sync=True) as plain:
        masked = _ippo(plain, "obs", action_masking=True)  # validated on a masked env
        with pytest.raises(AgileRLError, match=r"algorithm\.action_masking: IPPO is set to mask actions"):
            MultiAgentOnPolicyEngine().learn(masked, plain, 64, seed=0)
        obs = {a: np.zeros(N_ACTIONS, np.float32) for a in AGENTS}
        with pytest.raises(AgileRLError, match="predict: this policy was trained with action_masking"):
            masked.predict(obs)
        with pytest.raises(AgileRLError, match="trained without action_masking"):
            _ippo(plain, None).predict(obs, action_masks={a: np.ones(N_ACTIONS, bool) for a in AGENTS})
    mpe = load_manifest({"algorithm": {"name": "IPPO", "action_masking": True},
                         "environment": {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 1,
                                         "env_config": {"continuous_actions": True}}})  # fmt: skip
    with make_pz_env(mpe.environment, sync=True) as box_env, pytest.raises(AgileRLError, match="not Box ones"):
        MultiAgentBuilder.build_for_run(mpe.algorithm, env=box_env, manifest=mpe, runtime=AlgorithmBuildRuntime())


def test_validation_catches_a_disagreeing_env_and_maddpg_refuses_masks() -> None:
    """The manifest fails validation (the custom env is made there), not the run."""
    for source in ("obs", "info"):
        with pytest.raises(ManifestError, match=r"algorithm\.action_masking.*set algorithm\.action_masking: true"):
            _manifest(source)
        _manifest(source, action_masking=True)
    with pytest.raises(ManifestError, match=r"algorithm\.action_masking.*the env gives no action mask"):
        _manifest(None, action_masking=True)
    for algo in ("MADDPG", "MATD3"):
        with pytest.raises(ManifestError, match=r"MADDPG and MATD3 do not mask actions.*use IPPO"):
            _manifest(None, algo=algo, action_masking=True)
        with pytest.raises(ManifestError, match=rf"algorithm\.action_masking.*{algo} does not mask.*IPPO does"):
            _manifest("obs", algo=algo)


def test_maddpg_refuses_a_masked_env_at_run_time() -> None:
    from agilerl_plugin_gym.engine.off_policy import MultiAgentOffPolicyEngine
    from agilerl_plugin_gym.multi_agent.buffer import MultiAgentReplayBuffer

    manifest = _manifest(None, algo="MADDPG")  # validated on the unmasked env, then run on a masked one
    with make_pz_env(_manifest("info", action_masking=True).environment, sync=True) as env:
        agent = MultiAgentBuilder.build_for_run(manifest.algorithm, env=env, manifest=manifest,
                                                runtime=AlgorithmBuildRuntime(seed=0))  # fmt: skip
        memory = MultiAgentReplayBuffer(100, AGENTS)
        with pytest.raises(AgileRLError, match=r"algorithm\.action_masking.*MADDPG does not mask.*IPPO does"):
            MultiAgentOffPolicyEngine(0).learn(agent, env, memory, np.random.default_rng(0), 16, seed=0)


def test_a_trained_masked_policy_loads_and_predicts_allowed_actions(tmp_path: Path) -> None:
    """A manifest run (population of 2) checkpoints the masked policy; ``agilerl.load`` gives it back
    with ``action_masking`` on, its ``predict`` equals the in-run greedy action on random masks
    (and refuses to act without them), and ``run_episodes`` plays only allowed actions."""
    from agilerl import load
    from agilerl.training.trainer import LocalTrainer

    torch.set_num_threads(1)
    m = {"algorithm": {"name": "IPPO", "learn_step": 128, "batch_size": 64, "action_masking": True},
         "environment": _env_spec("obs"),
         "training": {"pop_size": 2, "max_steps": 512, "evo_steps": 256, "eval_loop": 1, "seed": 5,
                      "progress": False}}  # fmt: skip
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    assert max(result.fitnesses) == PERFECT
    rng = np.random.default_rng(7)
    obs = {a: rng.random((256, N_ACTIONS)).astype(np.float32) for a in AGENTS}
    masks = {a: _random_masks(rng, 256) for a in AGENTS}
    for agent in result.population:
        loaded = load(tmp_path / "run" / "last.pt", member=agent.index, trust=True)
        assert loaded.spec.action_masking
        got, _ = loaded.predict(obs, action_masks=masks)
        in_run = agent.act(obs, deterministic=True, action_masks=masks)
        for a in AGENTS:
            np.testing.assert_array_equal(got[a], in_run[a])
            assert masks[a][np.arange(256), got[a]].all()
        with pytest.raises(AgileRLError, match="pass action_masks="):
            loaded.predict(obs)
    episodes = load(tmp_path / "run", which="last", trust=True).run_episodes(
        load_manifest(m).environment, episodes=2, seed=0
    )
    assert [e.ret for e in episodes] == [PERFECT, PERFECT]
