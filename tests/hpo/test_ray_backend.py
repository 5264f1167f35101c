"""``training.backend: ray``: members train on Ray actors, with the same results as ``local``.

A population of 4 PPO agents on CartPole trains for two generations (tournament selection and
mutation in between) once in this process and once on a local Ray instance with 2 workers; the
fitness histories and every parameter of every member must be identical.
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agilerl import LocalTrainer, checkpoint
from agilerl.errors import AgileRLError, ManifestError
from agilerl.models import load_manifest
from agilerl.training.backend import MemberFailedError

PPO_CARTPOLE: dict[str, Any] = yaml.safe_load((Path(__file__).parent / "ppo_population.yaml").read_text())


def manifest(tmp: Path, name: str, **training: Any) -> dict[str, Any]:
    m = copy.deepcopy(PPO_CARTPOLE)
    m["training"].update({"run_dir": str(tmp / name), **training})
    return m


def params(agent: Any) -> dict[str, torch.Tensor]:
    return {f"{n}.{k}": v for n, net in agent.nets.items() for k, v in net.state_dict().items()}


def assert_same_population(a: list[Any], b: list[Any]) -> None:
    assert [x.index for x in a] == [x.index for x in b]
    assert [x.fitness for x in a] == [x.fitness for x in b]
    assert [x.steps for x in a] == [x.steps for x in b]
    for x, y in zip(a, b, strict=True):
        px, py = params(x), params(y)
        assert px.keys() == py.keys()
        for k in px:
            assert torch.equal(px[k], py[k]), f"agent {x.index}: {k} differs"


def test_ray_fields_need_the_ray_backend() -> None:
    m = copy.deepcopy(PPO_CARTPOLE)
    m["training"]["num_gpus_per_member"] = 1
    with pytest.raises(ManifestError, match="num_gpus_per_member only apply with backend: ray"):
        load_manifest(m)


def test_local_and_ray_give_identical_populations(
    tmp_path: Path, ray_local: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agilerl")
    local = LocalTrainer.from_manifest(manifest(tmp_path, "local")).train()
    remote = LocalTrainer.from_manifest(manifest(tmp_path, "ray", backend="ray", ray_workers=2, progress=True)).train()
    # The driver's progress counted every step trained on the workers (4 members x 256 steps).
    assert "1024/1024 steps (100%)" in caplog.text
    if (tmp_path / "ray" / "tensorboard").exists():  # TensorBoard installed: the driver wrote the events
        assert list((tmp_path / "ray" / "tensorboard").glob("events.out.tfevents.*"))
    assert local.generations == remote.generations == 2
    assert remote.fitnesses == local.fitnesses
    assert_same_population(local.population, remote.population)
    # The workers' learn metrics reached the driver's metrics file, one row per member and generation.
    rows = [r for r in remote.history if "loss" in r or "train_return" in r]
    assert len(rows) == 8
    assert (tmp_path / "ray" / "metrics.jsonl").read_text().count("\n") == 8


# --- every paradigm with populations ---------------------------------------------------------------
# Strategies whose members share state (a replay buffer, an env stream that runs on from member to
# member) train on one Ray worker in member order with the strategy state sent both ways, so they
# too must match local exactly.
SMALL_NET = {"latent_dim": 16, "arch": "mlp", "encoder_config": {"hidden_size": [16]},
             "head_config": {"hidden_size": [16]}}  # fmt: skip
EVOLVE = {
    "mutation": {"probabilities": {"no_mut": 0.5, "params_mut": 0.5, "arch_mut": 0, "new_layer": 0, "rl_hp_mut": 0}},
    "tournament_selection": {"tournament_size": 2, "elitism": True},
}
PARADIGMS: dict[str, dict[str, Any]] = {
    "IPPO": {
        "algorithm": {"name": "IPPO", "learn_step": 64, "batch_size": 32, "update_epochs": 1},
        "environment": {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "sync": True,
                        "env_config": {"max_cycles": 25}},
        "training": {"max_steps": 256, "evo_steps": 128, "eval_steps": 25},
    },
    "DQN": {
        "algorithm": {"name": "DQN", "learn_step": 4, "batch_size": 16},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "network": SMALL_NET,
        "replay_buffer": {"max_size": 1000},
        "training": {"max_steps": 200, "evo_steps": 100, "eval_steps": 50, "learning_delay": 20},
    },
    "SAC": {  # off-policy with its own parameter (the learned entropy coefficient) and exploration draws
        "algorithm": {"name": "SAC", "learn_step": 4, "batch_size": 16},
        "environment": {"name": "Pendulum-v1", "num_envs": 2},
        "network": SMALL_NET,
        "replay_buffer": {"max_size": 1000},
        "training": {"max_steps": 200, "evo_steps": 100, "eval_steps": 50, "learning_delay": 20},
    },
    "NeuralUCB": {
        "algorithm": {"name": "NeuralUCB"},
        "environment": {"name": "iris"},
        "training": {"max_steps": 100, "evo_steps": 50},
    },
}  # fmt: skip


def _paradigm_manifest(name: str, tmp: Path, run: str, **training: Any) -> dict[str, Any]:
    m = copy.deepcopy(PARADIGMS[name])
    m.update(copy.deepcopy(EVOLVE))
    m["training"].update({"pop_size": 2, "seed": 5, "progress": False, "save_elite": False,
                          "run_dir": str(tmp / run), **training})  # fmt: skip
    return m


def _state_tensors(agent: Any) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            out[prefix] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{prefix}[{i}]", v)

    walk("", agent.state_dict())
    return out


@pytest.mark.parametrize("name", list(PARADIGMS))
def test_every_paradigm_trains_on_ray_like_local(name: str, tmp_path: Path, ray_local: Any) -> None:
    local = LocalTrainer.from_manifest(_paradigm_manifest(name, tmp_path, "local")).train()
    remote = LocalTrainer.from_manifest(_paradigm_manifest(name, tmp_path, "ray", backend="ray")).train()
    assert remote.fitnesses == local.fitnesses
    assert [a.fitness for a in remote.population] == [a.fitness for a in local.population]
    for a, b in zip(local.population, remote.population, strict=True):
        ta, tb = _state_tensors(a), _state_tensors(b)
        assert ta.keys() == tb.keys()
        assert all(torch.equal(ta[k], tb[k]) for k in ta), name


def test_llm_sft_trains_on_ray_like_local(tiny_model_dir: Path, tmp_path: Path, ray_local: Any) -> None:
    """A population of two tiny LoRA SFT members (the LLM plugin's offline model) on Ray."""
    data = Path(__file__).resolve().parents[2] / "examples" / "data" / "llm" / "sft_chat_tiny.jsonl"

    def sft(run: str, **training: Any) -> dict[str, Any]:
        return {
            "algorithm": {"name": "SFT", "lr": 1e-3, "batch_size": 4, "gradient_checkpointing": False},
            "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 128,
                        "lora_config": {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}},
            "environment": {"env_type": "dataset", "dataset_path": str(data)},
            "mutation": {"probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5, "arch_mut": 0, "new_layer": 0,
                                           "params_mut": 0},
                         "rl_hp_selection": {"lr": {"min": 1e-4, "max": 1e-2}}},
            "tournament_selection": {"tournament_size": 2, "elitism": True},
            "training": {"max_steps": 4, "evo_steps": 2, "pop_size": 2, "seed": 0, "progress": False,
                         "save_elite": False, "run_dir": str(tmp_path / run), **training},
        }  # fmt: skip

    local = LocalTrainer.from_manifest(sft("local")).train()
    remote = LocalTrainer.from_manifest(sft("ray", backend="ray")).train()
    assert remote.fitnesses == local.fitnesses
    assert [a.fitness for a in remote.population] == [a.fitness for a in local.population]
    # The held-out metrics the dataset strategy adds to each row came back from the worker.
    assert sum("eval/loss" in r for r in remote.history) == 4


def test_gpus_per_member_beyond_the_cluster_is_a_clear_error(tmp_path: Path, ray_local: Any) -> None:
    m = manifest(tmp_path, "gpu", backend="ray", num_gpus_per_member=1)
    with pytest.raises(AgileRLError, match=r"num_gpus_per_member: 1 GPU\(s\) per member, but the Ray cluster has 0"):
        LocalTrainer.from_manifest(m).train()


# --- faults -----------------------------------------------------------------------------------------
class WorkerKiller(threading.Thread):
    """SIGKILLs the first Ray worker process seen running a member's step (Ray titles it
    ``ray::MemberWorker.step``), i.e. a worker dying mid-generation."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.killed: int | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.killed is None:
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"ray::MemberWorker.step" in cmdline:
                    os.kill(int(proc.name), signal.SIGKILL)
                    self.killed = int(proc.name)
                    return
            time.sleep(0.05)


FAULT_TRAINING = {"max_steps": 1024, "evo_steps": 512, "backend": "ray", "ray_workers": 2}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, ray_local: Any) -> Any:
    """The run the faulted ones must reproduce."""
    return LocalTrainer.from_manifest(manifest(tmp_path_factory.mktemp("clean"), "run", **FAULT_TRAINING)).train()


def test_killed_worker_is_restarted_and_its_member_retried(tmp_path: Path, clean: Any) -> None:
    killer = WorkerKiller()
    killer.start()
    try:
        faulted = LocalTrainer.from_manifest(manifest(tmp_path, "faulted", **FAULT_TRAINING)).train()
    finally:
        killer.stop.set()
    assert killer.killed is not None
    # The retried step started from the driver's copy of the member: nothing differs.
    assert faulted.fitnesses == clean.fitnesses
    assert_same_population(clean.population, faulted.population)


def test_worker_lost_without_retries_stops_with_a_resumable_checkpoint(tmp_path: Path, clean: Any) -> None:
    killer = WorkerKiller()
    killer.start()
    try:
        with pytest.raises(MemberFailedError, match=r"died .*ray_max_retries.*checkpoint written to (\S+)\.") as info:
            LocalTrainer.from_manifest(manifest(tmp_path, "faulted", **FAULT_TRAINING, ray_max_retries=0)).train()
    finally:
        killer.stop.set()
    path = Path(str(info.value).split("checkpoint written to ")[1].split(". Resume")[0])
    assert path.exists()
    resumed = LocalTrainer.from_checkpoint(path, run_dir=tmp_path / "resumed").train()
    assert resumed.fitnesses == clean.fitnesses
    assert_same_population(clean.population, resumed.population)


def test_a_strategy_with_its_own_loop_is_refused_on_ray(tmp_path: Path) -> None:
    """``backend: ray`` would do nothing for a strategy whose loop bypasses the backend: refused."""
    from agilerl_plugin_gym.single_agent.strategies import OnPolicyStrategy

    def own_loop(run: Any, strategy: Any) -> Any:  # pragma: no cover - never reached
        raise AssertionError

    class OwnLoop(OnPolicyStrategy):
        default_loop = staticmethod(own_loop)

    trainer = LocalTrainer.from_manifest(manifest(tmp_path, "own", backend="ray"))
    trainer.strategy = OwnLoop()
    with pytest.raises(AgileRLError, match=r"backend: ray: OwnLoop trains with its own loop .*use backend: local"):
        trainer.train()


def test_nothing_imports_ray_unless_a_manifest_asks(tmp_path: Path) -> None:
    code = (
        "import sys, agilerl, agilerl.training.trainer, agilerl.hpo\n"
        "from agilerl import LocalTrainer\n"
        f"LocalTrainer.from_manifest({manifest(tmp_path, 'plain', max_steps=64, evo_steps=64)!r}).train()\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_local_checkpoint_resumes_on_ray(tmp_path: Path, ray_local: Any) -> None:
    """Checkpoints do not depend on the backend: a local run's mid-run checkpoint, resumed with
    ``backend: ray``, ends with the population of the uninterrupted local run."""
    full = LocalTrainer.from_manifest(manifest(tmp_path, "full", checkpoint_steps=128)).train()
    ckpt = tmp_path / "full" / "checkpoint_128.pt"
    payload = checkpoint.load(ckpt)
    payload["manifest"]["training"].update(backend="ray", ray_workers=2)
    moved = tmp_path / "on_ray.pt"
    checkpoint.save(moved, payload)
    resumed = LocalTrainer.from_checkpoint(moved, run_dir=tmp_path / "resumed").train()
    assert resumed.fitnesses == full.fitnesses
    assert_same_population(full.population, resumed.population)
