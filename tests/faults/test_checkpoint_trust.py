"""Checkpoints crafted by hand, damaged on disk, or used with the wrong manifest (docs/reliability.md).

The trust rule: code a checkpoint's stored manifest names (a custom env ``entrypoint``, a wrapper,
gymnasium's ``module:EnvId`` form of ``environment.name``) is imported only when it is registered
code (the project's or an installed plugin's package) or the user trusts it (the manifest given,
``--trust-checkpoint``, ``trust=True``). Every entry point that reads a checkpoint is tried with
every kind of reference; each crafted checkpoint names a marker module that writes a file when
imported, and is importable (its directory is on ``sys.path``), so only the rule keeps it out.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import agilerl
from agilerl import checkpoint
from agilerl.errors import AgileRLError
from agilerl.training.trainer import LocalTrainer

Run = Callable[..., tuple[int, str, str]]

MASKED = ["agilerl_plugin_gym.pomdp.MaskVelocity"]  # the project's own recurrent-PPO wrapper


def _manifest(run_dir: Path, algo: str = "PPO", max_steps: int = 128) -> dict[str, Any]:
    on_policy = algo == "PPO"
    return {
        "algorithm": {"name": algo, "batch_size": 32, "learn_step": 64 if on_policy else 4},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True,
                        **({"env_wrappers": MASKED} if on_policy else {})},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}, "head_config": {"hidden_size": []}},
        "replay_buffer": {"max_size": 500},
        "training": {"max_steps": max_steps, "evo_steps": 64, "checkpoint_steps": 64, "pop_size": 1, "seed": 0,
                     "eval_loop": 1, "progress": False, "run_dir": str(run_dir),
                     **({} if on_policy else {"learning_delay": 16})},
    }  # fmt: skip


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished PPO run on velocity-masked CartPole (two checkpoints, best/last/elite)."""
    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    LocalTrainer.from_manifest(_manifest(run_dir)).train()
    return run_dir


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable module ``trust_marker`` that writes ``imported`` when imported."""
    flag = tmp_path / "imported"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "trust_marker.py").write_text(
        "import pathlib\n"
        "import gymnasium as gym\n"
        f"pathlib.Path({str(flag)!r}).write_text('imported')\n"
        "def Env(**kwargs):\n"
        "    return gym.make('CartPole-v1', **kwargs)\n"
        "class Wrap(gym.Wrapper):\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.delitem(sys.modules, "trust_marker", raising=False)
    return flag


#: Each way a stored manifest can name code.
CRAFTED: dict[str, tuple[str, dict[str, Any]]] = {
    "entrypoint": ("environment.entrypoint", {"entrypoint": "trust_marker:Env", "custom": True}),
    "wrapper": ("environment.env_wrappers", {"env_wrappers": [*MASKED, "trust_marker.Wrap"]}),
    "module:EnvId": ("environment.name", {"name": "trust_marker:CartPole-v1"}),
}


def _craft(ppo_run: Path, tmp_path: Path, kind: str) -> Path:
    payload = checkpoint.load(ppo_run / "best.pt")
    env = payload["manifest"]["environment"]
    env.update(copy.deepcopy(CRAFTED[kind][1]))
    out = tmp_path / f"crafted_{kind.replace(':', '_')}.pt"
    checkpoint.save(out, payload)
    return out


def _entry(name: str, run_cli: Run, ckpt: Path, tmp_path: Path, *extra: str) -> tuple[int, str]:
    """Run one entry point on ``ckpt``: ``(exit code, error text)``."""
    if name == "eval":
        code, _, err = run_cli("eval", ckpt, "--episodes", "1", *extra)
        return code, err
    if name == "export-policy":
        code, _, err = run_cli("export-policy", ckpt, "--format", "torchscript", "-o", tmp_path / "p.pt", *extra)
        return code, err
    if name == "resume":
        code, _, err = run_cli("train", "--resume", ckpt, "--run-dir", tmp_path / "resumed", "--no-progress", *extra)
        return code, err
    try:
        if name == "agilerl.load":
            agilerl.load(ckpt, trust=bool(extra))
        else:
            LocalTrainer.from_checkpoint(ckpt, trust_checkpoint=bool(extra), run_dir=tmp_path / "resumed")
    except AgileRLError as exc:
        return 1, str(exc)
    return 0, ""


ENTRIES = ["eval", "export-policy", "resume", "agilerl.load", "LocalTrainer.from_checkpoint"]


@pytest.mark.parametrize("kind", list(CRAFTED))
@pytest.mark.parametrize("entry", ENTRIES)
def test_code_a_checkpoint_names_is_not_imported_without_trust(
    entry: str, kind: str, ppo_run: Path, tmp_path: Path, marker: Path, run_cli: Run
) -> None:
    ckpt = _craft(ppo_run, tmp_path, kind)
    code, err = _entry(entry, run_cli, ckpt, tmp_path)
    assert code == 1 and "names code that" in err and CRAFTED[kind][0] in err, err
    assert "--trust-checkpoint" in err
    assert not marker.exists() and "trust_marker" not in sys.modules


#: Modules an entry point imports after the env is built (export-policy: sympy through torch;
#: resume: tensorboard), planted in the folder a crafted ``environment.path`` names.
SHADOWED = ("sympy", "tensorboard")


@pytest.fixture
def shadow_dir(tmp_path: Path) -> Path:
    """A folder (not on ``sys.path``) of fake modules that write ``<name>_imported`` when imported."""
    folder = tmp_path / "shadow"
    folder.mkdir()
    for name in SHADOWED:
        flag = tmp_path / f"{name}_imported"
        (folder / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(flag)!r}).write_text('x')\n")
    return folder


def _craft_path(ppo_run: Path, tmp_path: Path, folder: Path) -> Path:
    payload = checkpoint.load(ppo_run / "best.pt")
    payload["manifest"]["environment"]["path"] = str(folder)  # no entrypoint or factory beside it
    out = tmp_path / "crafted_path.pt"
    checkpoint.save(out, payload)
    return out


def _shadowed(tmp_path: Path, folder: Path) -> list[str]:
    loaded = [n for n in SHADOWED if str(folder) in str(getattr(sys.modules.get(n), "__file__", "") or "")]
    return loaded + [n for n in SHADOWED if (tmp_path / f"{n}_imported").exists()]


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_environment_path_alone_is_code_that_needs_trust(
    entry: str, ppo_run: Path, tmp_path: Path, shadow_dir: Path, run_cli: Run
) -> None:
    # The env loader puts environment.path first on sys.path even with no entrypoint or factory:
    # every module imported after it (sympy, tensorboard) would come from the checkpoint's folder.
    ckpt = _craft_path(ppo_run, tmp_path, shadow_dir)
    code, err = _entry(entry, run_cli, ckpt, tmp_path)
    assert code == 1 and "names code that" in err and "environment.path" in err, err
    assert str(shadow_dir) not in sys.path
    assert _shadowed(tmp_path, shadow_dir) == []


def test_an_environment_path_alone_imports_nothing_in_a_fresh_process(
    ppo_run: Path, tmp_path: Path, shadow_dir: Path
) -> None:
    # In a fresh process nothing has imported sympy yet: export-policy would import the fake one.
    import subprocess

    ckpt = _craft_path(ppo_run, tmp_path, shadow_dir)
    cmd = [sys.executable, "-m", "agilerl.cli", "export-policy", str(ckpt), "-o", str(tmp_path / "p.pt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "environment.path" in proc.stderr, proc.stderr
    assert _shadowed(tmp_path, shadow_dir) == []


@pytest.mark.parametrize("entry", ["eval", "agilerl.load"])
def test_trust_imports_it(entry: str, ppo_run: Path, tmp_path: Path, marker: Path, run_cli: Run) -> None:
    # The control: the marker is importable, so the refusals above are the rule's doing.
    ckpt = _craft(ppo_run, tmp_path, "entrypoint")
    code, err = _entry(entry, run_cli, ckpt, tmp_path, "--trust-checkpoint")
    assert code == 0, err
    assert marker.exists()


def test_the_manifest_given_replaces_the_stored_one(ppo_run: Path, tmp_path: Path, marker: Path, run_cli: Run) -> None:
    ckpt = _craft(ppo_run, tmp_path, "wrapper")
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(_manifest(tmp_path / "x")))
    code, out, err = run_cli("eval", ckpt, "--episodes", "1", "--manifest", mine)
    assert code == 0 and "1 episode(s)" in out, err
    agent = agilerl.load(ckpt, manifest=mine)
    assert agent.manifest.environment.env_wrappers == MASKED
    assert not marker.exists()


def test_the_projects_own_wrapper_needs_no_trust(ppo_run: Path, tmp_path: Path, run_cli: Run) -> None:
    # Recurrent PPO's built-in MaskVelocity is registered code: every entry point takes it as is.
    assert checkpoint.load(ppo_run / "best.pt")["manifest"]["environment"]["env_wrappers"] == MASKED
    assert agilerl.load(ppo_run).manifest.environment.env_wrappers == MASKED
    code, _, err = run_cli("eval", ppo_run, "--episodes", "1")
    assert code == 0, err
    code, _, err = run_cli("export-policy", ppo_run, "--format", "torchscript", "-o", tmp_path / "p.pt")
    assert code == 0, err
    LocalTrainer.from_checkpoint(ppo_run / "last.pt", run_dir=tmp_path / "resumed")


# --- integrity -----------------------------------------------------------------------------------


def test_flipped_bytes_are_detected_and_the_file_named(ppo_run: Path, tmp_path: Path) -> None:
    src = sorted(ppo_run.glob("checkpoint_*.pt"))[0]
    data = bytearray(src.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    bad = tmp_path / src.name
    bad.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointCorruptError, match=r"is damaged|cannot read") as info:
        checkpoint.load(bad)
    assert str(bad) in str(info.value)


def test_a_changed_tensor_fails_the_digest(ppo_run: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    payload = checkpoint.load(ppo_run / "last.pt")
    assert payload["digest"].startswith("sha256:")

    def first_tensor(node: Any) -> Any:
        if isinstance(node, torch.Tensor) and node.numel():
            return node
        items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        for v in items:
            found = first_tensor(v)
            if found is not None:
                return found
        return None

    first_tensor(payload["agents"])[..., 0] += 1.0  # one optimizer moment or weight, digest kept
    bad = tmp_path / "last.pt"
    torch.save(payload, bad)
    with pytest.raises(checkpoint.CheckpointCorruptError, match=r"last\.pt is damaged: its contents do not match"):
        checkpoint.load(bad)


def test_a_truncated_newest_checkpoint_falls_back_on_resume(run_cli: Run, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    LocalTrainer.from_manifest(_manifest(run_dir, max_steps=128)).train()
    ckpts = sorted(run_dir.glob("checkpoint_*.pt"), key=lambda p: p.stat().st_mtime_ns)
    assert len(ckpts) >= 2
    newest, older = ckpts[-1], ckpts[-2]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    code, _, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 0, err
    assert f"{newest}" in err and f"falling back to {older}" in err


def test_a_zero_byte_best_pt_falls_back_on_eval(ppo_run: Path, tmp_path: Path, run_cli: Run) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(ppo_run, run_dir)
    (run_dir / "best.pt").write_bytes(b"")
    code, out, err = run_cli("eval", run_dir, "--episodes", "1")
    assert code == 0, err
    assert "best.pt is damaged: the file is empty" in err and f"falling back to {run_dir / 'elite.pt'}" in err
    assert f"checkpoint: {run_dir / 'elite.pt'}" in out


def test_no_checkpoint_is_one_message_and_one_exit_code(tmp_path: Path, run_cli: Run) -> None:
    (tmp_path / "empty").mkdir()
    tries = [
        ("eval", tmp_path / "empty"),
        ("eval", tmp_path / "missing.pt"),
        ("export-policy", tmp_path / "empty"),
        ("train", "--resume", tmp_path / "empty"),
        ("train", "--resume", tmp_path / "missing.pt"),
    ]
    for args in tries:
        code, _, err = run_cli(*args)
        assert code == 2 and "error: no checkpoint at " in err, (args, err)


def test_a_run_without_numbered_checkpoints_resumes_from_its_last_pt(tmp_path: Path, run_cli: Run) -> None:
    # No training.checkpoint_steps: the run dir holds best/last/elite only; --resume RUN_DIR takes
    # last.pt (the whole last population with the run's state) and, with a larger budget, trains on.
    manifest = _manifest(tmp_path / "run", algo="DQN", max_steps=64)
    del manifest["training"]["checkpoint_steps"]
    LocalTrainer.from_manifest(manifest).train()
    run_dir = tmp_path / "run"
    assert not list(run_dir.glob("checkpoint*.pt")) and (run_dir / "last.pt").is_file()
    code, out, err = run_cli("train", "--resume", run_dir, "--no-progress")
    assert code == 0 and f"resuming from {run_dir / 'last.pt'}" in out + err and "is complete" in out + err, err
    manifest["training"]["max_steps"] = 128
    path = tmp_path / "longer.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = run_cli("train", path, "--resume", run_dir, "--no-progress")
    assert code == 0, err
    rows = [json.loads(line) for line in (run_dir / "population.jsonl").read_text().splitlines()]
    assert rows[-1]["total_steps"] >= 128, rows[-1]


def test_a_checkpoint_of_another_algorithm_names_the_mismatch(tmp_path: Path, run_cli: Run) -> None:
    LocalTrainer.from_manifest(_manifest(tmp_path / "dqn", algo="DQN", max_steps=64)).train()
    ckpt = next((tmp_path / "dqn").glob("checkpoint_*.pt"))
    rainbow = _manifest(tmp_path / "rainbow", algo="RainbowDQN", max_steps=64)
    path = tmp_path / "rainbow.yaml"
    path.write_text(yaml.safe_dump(rainbow))
    code, _, err = run_cli("train", path, "--resume", ckpt, "--no-progress")
    assert code == 1 and "holds a DQN population, but the manifest names algorithm RainbowDQN" in err, err
    with pytest.raises(checkpoint.CheckpointMismatchError, match="holds a DQN population"):
        agilerl.load(ckpt, manifest=rainbow)


def test_an_agent_state_that_does_not_fit_the_manifest_names_the_mismatch(
    ppo_run: Path, tmp_path: Path, run_cli: Run
) -> None:
    # A feed-forward PPO population resumed with a recurrent manifest: the saved state has no LSTM.
    rec = _manifest(tmp_path / "rec", max_steps=192)
    rec["algorithm"]["recurrent"] = True
    rec["network"]["encoder_config"] = {"arch": "lstm", "hidden_state_size": 16}
    path = tmp_path / "rec.yaml"
    path.write_text(yaml.safe_dump(rec))
    ckpt = sorted(ppo_run.glob("checkpoint_*.pt"))[0]
    code, _, err = run_cli("train", path, "--resume", ckpt, "--no-progress")
    assert code == 1 and "Traceback" not in err, err
    assert f"{ckpt}: its saved agent (member 0) does not fit a PPO built from this manifest" in err, err
    assert "'hidden_state_size'" in err and "use the manifest it was trained with" in err


def test_a_stored_manifest_swapped_for_another_algorithms_names_the_mismatch(
    ppo_run: Path, tmp_path: Path, run_cli: Run
) -> None:
    # The stored manifest says DQN, the agents are PPO's: building a DQN and loading PPO's state.
    payload = checkpoint.load(ppo_run / "last.pt")
    payload["manifest"] = _manifest(tmp_path / "dqn", algo="DQN")
    ckpt = tmp_path / "swapped.pt"
    checkpoint.save(ckpt, payload)
    code, _, err = run_cli("train", "--resume", ckpt, "--run-dir", tmp_path / "resumed", "--no-progress")
    assert code == 1 and "Traceback" not in err, err
    assert f"{ckpt}: its saved agent (member 0) does not fit a DQN built from this manifest" in err, err


def test_a_checkpoint_with_no_agent_state_is_refused(ppo_run: Path, tmp_path: Path, run_cli: Run) -> None:
    payload = checkpoint.load(ppo_run / "last.pt")
    payload["agents"] = []
    ckpt = tmp_path / "empty_agents.pt"
    checkpoint.save(ckpt, payload)
    code, _, err = run_cli("train", "--resume", ckpt, "--run-dir", tmp_path / "resumed", "--no-progress")
    assert code == 1 and f"{ckpt} holds no agent state" in err and "Traceback" not in err, err
    assert not (tmp_path / "resumed").exists()  # refused before the run directory is touched
    with pytest.raises(checkpoint.CheckpointMismatchError, match="holds no agent state"):
        LocalTrainer.from_checkpoint(ckpt, run_dir=tmp_path / "resumed")


@pytest.mark.parametrize("rng", [None, {"torch": []}, "seed"], ids=["missing", "partial", "not-a-mapping"])
def test_a_checkpoint_without_its_random_streams_is_refused_for_resume_but_evaluates(
    ppo_run: Path, tmp_path: Path, run_cli: Run, rng: object
) -> None:
    # A hand-made payload: agents present, the run's random streams (rng) missing or malformed.
    payload = checkpoint.load(ppo_run / "last.pt")
    if rng is None:
        del payload["rng"]
    else:
        payload["rng"] = rng
    ckpt = tmp_path / "no_rng.pt"
    checkpoint.save(ckpt, payload)
    code, _, err = run_cli("train", "--resume", ckpt, "--run-dir", tmp_path / "resumed", "--no-progress")
    assert code == 1 and "Traceback" not in err, err
    assert f"{ckpt} has " in err and "rng record" in err and "cannot be resumed exactly" in err, err
    assert not (tmp_path / "resumed").exists()  # refused before the run directory is touched
    code, _, err = run_cli("eval", ckpt, "--episodes", "1")
    assert code == 0, err


@pytest.mark.parametrize(
    ("manifest", "said"),
    [(5, "its stored manifest is a int, not a mapping"), ({"algorithm": 5}, "manifest's algorithm is a int")],
)
def test_a_json_checkpoint_with_a_bad_manifest_says_what_is_wrong(
    manifest: Any, said: str, tmp_path: Path, run_cli: Run
) -> None:
    import json

    bad = tmp_path / "bad.pt"
    bad.write_text(json.dumps({"format": checkpoint.FORMAT, "manifest": manifest, "agents": [{}]}))
    for args in (("eval", bad), ("train", "--resume", bad), ("export-policy", bad)):
        code, _, err = run_cli(*args)
        assert code == 2 and said in err and "Traceback" not in err, (args, err)


def test_which_references_count_as_registered_code() -> None:
    from agilerl.trust import untrusted_references

    def flagged(env: dict[str, Any]) -> list[str]:
        return [path for path, _ in untrusted_references({"environment": env})]

    assert flagged({"name": "CartPole-v1", "env_wrappers": MASKED}) == []  # the gym plugin's own
    assert flagged({"name": "ALE/Pong-v5"}) == []  # a gymnasium id imports nothing by name
    assert flagged({"name": "mpe2.simple_speaker_listener_v4"}) == []  # an env package the gym plugin declares
    assert flagged({"name": "this:CartPole-v1"}) == ["environment.name"]  # stdlib `this` is nobody's plugin
    assert flagged({"name": "this"}) == ["environment.name"]  # a PettingZoo-style module name
    assert flagged({"name": "antigravity.x"}) == ["environment.name"]
    assert flagged({"name": "x", "entrypoint": "envs/grid.py:GridEnv"}) == ["environment.entrypoint"]
    assert flagged({"name": "x", "factory": "numpy:load"}) == ["environment.factory"]  # a dependency's callable
    assert flagged({"name": "x", "entrypoint": "m:E", "path": "/tmp"}) == ["environment.entrypoint", "environment.path"]
    assert flagged({"name": "CartPole-v1", "path": "/tmp"}) == ["environment.path"]  # put on sys.path all the same
    assert flagged({"name": "x", "env_wrappers": [["agilerl_plugin_gym.pomdp.MaskVelocity", {}]]}) == []
    assert flagged({"name": "x", "env_wrappers": ["agilerl_plugin_gym.__main__.X"]}) == ["environment.env_wrappers"]


def test_the_llm_plugins_gem_factory_is_registered_code(tmp_path: Path) -> None:
    # AgileRL's `env_name: game:...` is stored as entrypoint game:... with factory gem:make (the LLM
    # plugin's, which builds only games registered with GEM): resuming or exporting needs no trust.
    pytest.importorskip("agilerl_plugin_llm")
    pytest.importorskip("gem")
    from agilerl.trust import require_trust, untrusted_references

    game = "game:GuessTheNumber-v0-easy"
    stored = {"env_type": "rollout", "entrypoint": game, "env_name": game, "factory": "gem:make", "max_turns": 3}

    def flagged(**env: Any) -> list[str]:
        return [path for path, _ in untrusted_references({"environment": {**stored, **env}})]

    assert flagged() == []
    require_trust(str(tmp_path / "gem.pt"), {"environment": stored}, trusted=False)
    # Only that factory, only for the env type that declares it; the rest of the section still counts.
    assert flagged(entrypoint="trust_marker:Env") == []  # gem.make looks it up in GEM's registry: never imported
    assert flagged(factory="gem.envs.registration:make") == ["environment.entrypoint", "environment.factory"]
    assert flagged(factory="numpy:load") == ["environment.entrypoint", "environment.factory"]
    assert flagged(env_type="dataset") == []  # the same spec class (the LLM plugin's)
    assert flagged(env_type="gym") == ["environment.entrypoint", "environment.factory"]
    assert flagged(env_type="nobody_registers_this") == ["environment.entrypoint", "environment.factory"]
    assert flagged(path=str(tmp_path)) == ["environment.path"]


def test_a_bandit_path_is_code_only_beside_an_entrypoint(tmp_path: Path) -> None:
    # The bandit env type puts `path` on sys.path only for an entrypoint; alone it is the base of
    # its CSV tables (EnvSpec.path_imports_alone = False): resuming such a run needs no trust.
    pytest.importorskip("agilerl_plugin_bandit")
    from agilerl.trust import require_trust, untrusted_references

    tables = {"env_type": "bandit", "name": "mine", "path": str(tmp_path), "features": "f.csv", "targets": "t.csv"}

    def flagged(env: dict[str, Any]) -> list[str]:
        return [path for path, _ in untrusted_references({"environment": env})]

    assert flagged(tables) == []
    require_trust(str(tmp_path / "bandit.pt"), {"environment": tables}, trusted=False)
    assert sorted(flagged({**tables, "entrypoint": "my_bandits:make"})) == [
        "environment.entrypoint",
        "environment.path",
    ]
    # Without the env type (or with one no plugin registers) a lone path stays code.
    assert flagged({k: v for k, v in tables.items() if k != "env_type"}) == ["environment.path"]
    assert flagged({**tables, "env_type": "gym"}) == ["environment.path"]


def test_the_digest_hashes_tensors_and_arrays_in_place() -> None:
    """Writing a checkpoint must not hold a second copy of its largest tensor (a replay buffer, an
    LLM's weights) just to hash it; the digest is still the hash of each tensor's bytes."""
    import hashlib
    import tracemalloc

    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    big = torch.arange(2_000_000, dtype=torch.float32)  # 8 MB
    arr = np.arange(1_000_000, dtype=np.float64)  # 8 MB
    tracemalloc.start()
    try:
        checkpoint.digest({"t": big, "a": arr})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"hashing copied the data: {peak:,} bytes traced"
    for value, data in ((big, big.numpy().tobytes()), (arr, arr.tobytes())):
        h = hashlib.sha256()
        checkpoint._feed(h, value)
        kind = b"t" if value is big else b"a"
        head = f"tensor:{big.dtype}:{tuple(big.shape)}" if value is big else f"ndarray:{arr.dtype.str}:{arr.shape}"
        expect = hashlib.sha256(kind + len(head.encode()).to_bytes(8, "little") + head.encode() + data)
        assert h.hexdigest() == expect.hexdigest()
