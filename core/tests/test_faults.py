"""Faults in the core loop and run directory, on the example plugin's UCB1 (pure Python, fast).

Run directory locking and refusal, checkpoint retention, an unwritable checkpoint path (as root,
where chmod does not stop writes: the directory is replaced by a file, or a tmpfs is remounted
read-only / filled when this machine lets the test mount one), NaN members, --resume with --set,
checkpoints naming code, and the weights-only loader refusing a pickle payload.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agilerl import LocalTrainer, checkpoint
from agilerl.checkpoint import CheckpointWriteError
from agilerl.errors import AgileRLError, TrainingInterrupted
from agilerl.training.loop import NonFiniteTrainingError
from agilerl.training.rundir import RunDirError, RunDirLock

Run = Callable[..., tuple[int, str, str]]


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def evolving(example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    ucb_manifest["training"].update(pop_size=3, max_steps=500, checkpoint_steps=100)
    ucb_manifest["training"]["run_dir"] = str(tmp_path / "run")
    ucb_manifest["mutation"] = {"probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}, "rand_seed": 1}
    ucb_manifest["tournament_selection"] = {"tournament_size": 2}
    return ucb_manifest


# --- run directory ---------------------------------------------------------------------------------


def test_a_run_dir_in_use_is_refused(evolving: dict[str, Any], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with RunDirLock(run_dir):  # another run holds it (flock: a second open file conflicts)
        with pytest.raises(RunDirError, match=r"is in use by another run \(pid \d+\)"):
            LocalTrainer.from_manifest(evolving).train()
    assert not (run_dir / "metrics.jsonl").exists()
    LocalTrainer.from_manifest(evolving).train()  # released: the run goes ahead


def test_the_lock_is_dropped_when_its_process_dies(tmp_path: Path) -> None:
    code = f"import os; from pathlib import Path; from agilerl.training.rundir import RunDirLock\n" \
           f"with RunDirLock(Path({str(tmp_path)!r})): os.kill(os.getpid(), 9)"  # fmt: skip
    proc = subprocess.run([os.sys.executable, "-c", code], check=False)  # type: ignore[attr-defined]
    assert proc.returncode == -9
    with RunDirLock(tmp_path):  # SIGKILL left no stale lock
        pass


def test_a_run_dir_holding_a_run_is_refused_unless_resume_or_overwrite(
    run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_manifest(evolving)
    assert run_cli("train", path, "--no-progress")[0] == 0
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    code, _, err = run_cli("train", path, "--no-progress")
    assert code == 2 and "already holds a run" in err and "--overwrite" in err and "Traceback" not in err
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before  # nothing lost
    code, _, err = run_cli("train", path, "--no-progress", "--overwrite")
    assert code == 0, err
    assert len(rows(tmp_path / "run")) == len(before.splitlines())  # replaced, not appended


def test_keep_checkpoints_deletes_the_oldest(evolving: dict[str, Any], tmp_path: Path) -> None:
    evolving["training"]["keep_checkpoints"] = 2
    LocalTrainer.from_manifest(evolving).train()
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint*.pt")) == [
        "checkpoint_400.pt",
        "checkpoint_500.pt",
    ]
    evolving["training"]["keep_checkpoints"] = 0  # keep all
    evolving["training"]["run_dir"] = str(tmp_path / "all")
    LocalTrainer.from_manifest(evolving).train()
    assert len(list((tmp_path / "all").glob("checkpoint_*.pt"))) == 5


# --- an unwritable checkpoint path -------------------------------------------------------------------


def _break_after_first_checkpoint(trainer: LocalTrainer, first: Path, breaker: Callable[[], None]) -> None:
    """Run ``breaker`` (make the checkpoint path unwritable) once ``first`` has been written."""
    evaluate = trainer.strategy.evaluate
    state = {"seen": False}

    def evaluate_then_break(agent: Any, run: Any) -> float:
        if not state["seen"] and first.exists():
            state["seen"] = True
            breaker()
        return evaluate(agent, run)

    trainer.strategy.evaluate = evaluate_then_break  # type: ignore[method-assign]


def test_checkpoint_dir_replaced_by_a_file_mid_run(evolving: dict[str, Any], tmp_path: Path) -> None:
    # Works as root too: the checkpoint directory becomes a regular file, so no write can succeed.
    ck_dir = tmp_path / "ck"
    evolving["training"]["checkpoint_path"] = str(ck_dir / "pop")
    trainer = LocalTrainer.from_manifest(evolving)
    saved: dict[str, bytes] = {}

    def replace_dir_with_file() -> None:
        first = ck_dir / "pop_100.pt"
        saved["pop_100"] = first.read_bytes()
        shutil.move(str(ck_dir), str(tmp_path / "moved"))
        ck_dir.write_text("not a directory")

    _break_after_first_checkpoint(trainer, ck_dir / "pop_100.pt", replace_dir_with_file)
    with pytest.raises(CheckpointWriteError) as info:
        trainer.train()
    message = str(info.value)
    assert str(ck_dir / "pop_200.pt") in message and "intact" in message
    assert info.value.exit_code == 2
    previous = tmp_path / "moved" / "pop_100.pt"
    assert previous.read_bytes() == saved["pop_100"] and checkpoint.load(previous)["generation"] == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("this machine does not let the test mount a tmpfs (the file-replacement test still runs)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_checkpoint_path_remounted_read_only_mid_run(evolving: dict[str, Any], tmpfs: Path) -> None:
    evolving["training"]["checkpoint_path"] = str(tmpfs / "pop")
    trainer = LocalTrainer.from_manifest(evolving)
    remount = ["mount", "-o", "remount,ro", str(tmpfs)]
    _break_after_first_checkpoint(trainer, tmpfs / "pop_100.pt", lambda: subprocess.run(remount, check=True))
    with pytest.raises(CheckpointWriteError, match="Read-only file system") as info:
        trainer.train()
    assert str(tmpfs / "pop_200.pt") in str(info.value)
    assert checkpoint.load(tmpfs / "pop_100.pt")["generation"] == 0  # the previous one is intact
    assert sorted(p.name for p in tmpfs.iterdir()) == ["pop_100.pt"]  # no partial file


def test_disk_full_mid_run(evolving: dict[str, Any], tmpfs: Path) -> None:
    evolving["training"]["checkpoint_path"] = str(tmpfs / "pop")
    trainer = LocalTrainer.from_manifest(evolving)

    def fill() -> None:
        fd = os.open(tmpfs / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: the disk is full now
            pass
        finally:
            os.close(fd)

    _break_after_first_checkpoint(trainer, tmpfs / "pop_100.pt", fill)
    with pytest.raises(CheckpointWriteError, match="No space left on device") as info:
        trainer.train()
    assert str(tmpfs / "pop_200.pt") in str(info.value)
    assert checkpoint.load(tmpfs / "pop_100.pt")["generation"] == 0
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler", "pop_100.pt"]


def test_a_resume_after_a_full_disk_duplicates_no_row(evolving: dict[str, Any], tmpfs: Path) -> None:
    # The whole run dir on a disk that fills after the first checkpoint: the next row or checkpoint
    # write fails (a row may be cut short mid-line). Space freed, the resumed run's record files hold
    # each generation once.
    run_dir = tmpfs / "run"
    evolving["training"]["run_dir"] = str(run_dir)
    evolving["logging"] = {"tensorboard": False}
    trainer = LocalTrainer.from_manifest(evolving)
    filler = tmpfs / "filler"

    def fill() -> None:
        with contextlib.suppress(OSError), filler.open("wb") as fh:  # ENOSPC: the disk is full now
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()

    _break_after_first_checkpoint(trainer, run_dir / "checkpoint_100.pt", fill)
    with pytest.raises(OSError, match="No space left on device"):
        trainer.train()
    filler.unlink()
    LocalTrainer.from_manifest(evolving, resume_from=run_dir).train()
    population = [json.loads(line) for line in (run_dir / "population.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in population] == [0, 1, 2, 3, 4]
    logged = rows(run_dir)
    assert [r["generation"] for r in logged] == [g for g in range(5) for _ in range(3)]
    assert len({(r["generation"], r["agent"]) for r in logged}) == len(logged)


@pytest.mark.parametrize("size", [0, 1_000, 120_000, 400_000, 3_000_000])
def test_a_full_disk_gives_the_clear_message_at_every_size(tmpfs: Path, size: int) -> None:
    # torch's writer turned ENOSPC into "[enforce fail at inline_container.cc:672] unexpected pos"
    # when the disk filled up past the file's first record; the message must not depend on where.
    torch = pytest.importorskip("torch")
    fd = os.open(tmpfs / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # leave ~100 KiB free (none when size is 0)
        written = 0
        while written < (256 * 1024 if size == 0 else 150_000):
            written += os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    payload = {"format": checkpoint.FORMAT, "manifest": {}, "agents": [{"w": torch.ones(max(size // 4, 1))}]}
    if size == 1_000:  # fits: written and loaded back
        checkpoint.save(tmpfs / "c.pt", payload)
        assert checkpoint.load(tmpfs / "c.pt")["agents"][0]["w"].numel() == 250
        return
    with pytest.raises(CheckpointWriteError, match="No space left on device") as info:
        checkpoint.save(tmpfs / "c.pt", payload)
    assert str(tmpfs / "c.pt") in str(info.value) and "inline_container" not in str(info.value)
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler"]  # no partial file


# --- NaN members -------------------------------------------------------------------------------------


def _nan_loss_for(trainer: LocalTrainer, bad: Callable[[Any, Any], bool]) -> None:
    learn = trainer.strategy.learn

    def learn_with_loss(agent: Any, run: Any, num_steps: int) -> dict[str, float]:
        stats = learn(agent, run, num_steps)
        return {**stats, "loss": math.nan if bad(agent, run) else 0.5}

    trainer.strategy.learn = learn_with_loss  # type: ignore[method-assign]


def test_a_nan_member_is_marked_unfit_replaced_and_logged(
    evolving: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agilerl")
    trainer = LocalTrainer.from_manifest(evolving)
    _nan_loss_for(trainer, lambda agent, run: run.generation == 0 and agent.index == 1)
    result = trainer.train()
    logged = rows(tmp_path / "run")
    gen0 = {r["agent"]: r for r in logged if r["generation"] == 0}
    assert gen0[1]["unfit"] == "non-finite loss: loss=nan" and gen0[1]["fitness"] is None
    assert "unfit" not in gen0[0] and "unfit" not in gen0[2]
    assert "generation 0: agent 1 is unfit (non-finite loss: loss=nan)" in caplog.text
    # the next tournament never picks it: no agent of generation 1 descends from agent 1
    assert {r["parent"] for r in logged if r["generation"] == 1} <= {0, 2}
    assert all(a.steps == 500 for a in result.population)


def test_all_members_nan_stops_with_a_clear_error_and_a_resumable_checkpoint(
    evolving: dict[str, Any], tmp_path: Path
) -> None:
    trainer = LocalTrainer.from_manifest(evolving)
    _nan_loss_for(trainer, lambda agent, run: run.generation == 2)
    with pytest.raises(NonFiniteTrainingError) as info:
        trainer.train()
    message = str(info.value)
    last = tmp_path / "run" / "checkpoint_200.pt"
    assert "every member of the population (3) has a non-finite loss" in message and str(last) in message
    assert info.value.last_good == last
    evolving["training"]["run_dir"] = str(tmp_path / "resumed")
    resumed = LocalTrainer.from_manifest(evolving, resume_from=last).train()  # the documented way on
    assert all(a.steps == 500 for a in resumed.population)


# --- resume: --set, run dir, code, Ctrl-C -------------------------------------------------------------


def test_resume_honours_set_and_says_what_differs(
    run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    evolving["training"]["max_steps"] = 300
    assert run_cli("train", write_manifest(evolving), "--no-progress")[0] == 0
    ckpt = tmp_path / "run" / "checkpoint_300.pt"
    code, _, err = run_cli(
        "train", "--resume", ckpt, "--set", "training.max_steps=500", "--set", "algorithm.c=0.5", "--no-progress"
    )
    assert code == 0, err
    assert "resuming with 2 field(s) that differ from the checkpoint's manifest" in err
    assert "training.max_steps: 300 -> 500" in err and "algorithm.c: 1.0 -> 0.5" in err
    logged = rows(tmp_path / "run")  # the run's own directory, appended
    assert max(r["steps"] for r in logged) == 500
    assert len({(r["generation"], r["agent"]) for r in logged}) == len(logged)  # no duplicate rows
    # --set reached the agents: generation 3 is c=0.5 after at most one mutation (x1.2 or x0.8)
    assert {round(r["hp/c"], 6) for r in logged if r["generation"] == 3} <= {0.4, 0.5, 0.6}


def test_resume_from_a_run_dir_takes_its_newest_checkpoint(
    run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_manifest(evolving)
    assert run_cli("train", path, "--no-progress", "--set", "training.max_steps=300")[0] == 0
    code, _, err = run_cli("train", path, "--resume", tmp_path / "run", "--no-progress")
    assert code == 0, err
    assert f"resuming from {tmp_path / 'run' / 'checkpoint_300.pt'}" in err
    assert "training.max_steps: 300 -> 500" in err


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("how", ["run dir", "checkpoint file in it"])
def test_resuming_a_copy_of_a_run_dir_continues_in_the_copy(
    how: str, run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    import shutil

    assert run_cli("train", write_manifest(evolving), "--no-progress", "--set", "training.max_steps=300")[0] == 0
    original, copy = tmp_path / "run", tmp_path / "copy"
    shutil.copytree(original, copy)
    before = _snapshot(original)
    target = copy if how == "run dir" else copy / "checkpoint_300.pt"
    code, _, err = run_cli("train", "--resume", target, "--set", "training.max_steps=500", "--no-progress")
    assert code == 0, err
    assert f"continuing the run in {copy}" in err  # said before it writes
    assert _snapshot(original) == before  # the original run is untouched
    assert max(r["steps"] for r in rows(copy)) == 500
    assert checkpoint.load(copy / "checkpoint_500.pt")["run_dir"] == str(copy)
    # the copy is locked like any run dir: a second resume into it while one runs is refused at once
    with RunDirLock(copy):
        code, _, err = run_cli("train", "--resume", copy / "checkpoint_500.pt", "--no-progress")
    assert code == 2 and f"run directory {copy} is in use" in err, err


def test_resume_writes_where_run_dir_says_and_a_lone_checkpoint_to_its_stored_run_dir(
    run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    assert run_cli("train", write_manifest(evolving), "--no-progress", "--set", "training.max_steps=300")[0] == 0
    run_dir = tmp_path / "run"
    more = ("--set", "training.max_steps=400", "--no-progress")
    code, _, err = run_cli("train", "--resume", run_dir, "--run-dir", tmp_path / "elsewhere", *more)
    assert code == 0 and f"continuing the run in {tmp_path / 'elsewhere'}" in err, err
    assert max(r["steps"] for r in rows(tmp_path / "elsewhere")) == 400
    # A checkpoint copied on its own (no run records beside it) continues the run it came from.
    (tmp_path / "kept").mkdir()
    lone = tmp_path / "kept" / "checkpoint_300.pt"
    lone.write_bytes((run_dir / "checkpoint_300.pt").read_bytes())
    code, _, err = run_cli("train", "--resume", lone, *more)
    assert code == 0 and f"continuing the run in {run_dir}" in err, err
    assert max(r["steps"] for r in rows(run_dir)) == 400 and not (tmp_path / "kept" / "metrics.jsonl").exists()


def test_a_resumed_run_does_not_duplicate_rows_logged_after_its_checkpoint(
    evolving: dict[str, Any], tmp_path: Path
) -> None:
    LocalTrainer.from_manifest(evolving).train()
    run_dir = tmp_path / "run"
    # as if killed after logging generation 4 and before its checkpoint: resume from generation 2
    for p in ("checkpoint_400.pt", "checkpoint_500.pt", "elite.pt"):
        (run_dir / p).unlink()
    (run_dir / ".checkpoint_400.pt.abc.tmp").write_bytes(b"partial")  # a write cut short by the kill
    LocalTrainer.from_manifest(evolving, resume_from=run_dir).train()
    logged = rows(run_dir)
    assert [(r["generation"], r["agent"]) for r in logged] == sorted({(r["generation"], r["agent"]) for r in logged})
    assert len(logged) == 5 * 3
    assert not list(run_dir.glob(".*.tmp"))


def test_ctrl_c_resume_does_not_train_an_agent_twice(evolving: dict[str, Any], tmp_path: Path) -> None:
    trainer = LocalTrainer.from_manifest(evolving)
    learn = trainer.strategy.learn
    calls: list[tuple[int, int]] = []

    def interrupted(agent: Any, run: Any, num_steps: int) -> dict[str, float]:
        if run.generation == 2 and agent is run.population[1]:
            raise KeyboardInterrupt  # after agent 0 of generation 2 has learned
        calls.append((run.generation, agent.index))
        return learn(agent, run, num_steps)

    trainer.strategy.learn = interrupted  # type: ignore[method-assign]
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    ckpt = tmp_path / "run" / "checkpoint_interrupted.pt"
    assert f"Resume with: agilerl train --resume {ckpt}" in str(info.value)
    resumed = LocalTrainer.from_manifest(evolving, resume_from=ckpt)
    resumed_learn = resumed.strategy.learn
    again: list[tuple[int, int, int]] = []

    def record(agent: Any, run: Any, num_steps: int) -> dict[str, float]:
        again.append((run.generation, agent.index, num_steps))
        return resumed_learn(agent, run, num_steps)

    resumed.strategy.learn = record  # type: ignore[method-assign]
    result = resumed.train()
    first_of_gen2 = next(i for g, i in calls if g == 2)
    assert [(g, i) for g, i, _ in again if g == 2 and i == first_of_gen2] == []  # not trained twice
    assert len([1 for g, _, _ in again if g == 2]) == 2  # the other two agents learn
    logged = rows(tmp_path / "run")
    assert all(r["steps"] == 100 * (r["generation"] + 1) for r in logged)  # every agent: exactly evo_steps
    assert len({(r["generation"], r["agent"]) for r in logged}) == len(logged) == 15
    assert all(a.steps == 500 for a in result.population)


def test_a_checkpoint_naming_code_needs_the_manifest_or_trust(
    run_cli: Run, evolving: dict[str, Any], tmp_path: Path
) -> None:
    LocalTrainer.from_manifest(evolving).train()
    ckpt = tmp_path / "run" / "checkpoint_300.pt"
    payload = checkpoint.load(ckpt)
    payload["manifest"]["environment"]["entrypoint"] = "evil_module:Env"  # a crafted checkpoint
    checkpoint.save(ckpt, payload)
    code, _, err = run_cli("train", "--resume", ckpt, "--no-progress")
    assert code == 1 and "names code that resuming would import or run" in err
    assert "environment.entrypoint: 'evil_module:Env'" in err and "--trust-checkpoint" in err
    with pytest.raises(AgileRLError, match="names code"):
        LocalTrainer.from_checkpoint(ckpt)
    # --trust-checkpoint goes on to validate it (and the env type refuses the unknown field)
    code, _, err = run_cli("train", "--resume", ckpt, "--trust-checkpoint", "--no-progress")
    assert "names code" not in err and "environment.entrypoint" in err


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch PWNED",))


def test_a_pickle_payload_in_a_checkpoint_does_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.pt"
    torch.save({"format": checkpoint.FORMAT, "agents": [_Payload()]}, bad)
    with pytest.raises(checkpoint.CheckpointCorruptError) as info:
        checkpoint.load(bad)
    assert not (tmp_path / "PWNED").exists()
    # Said as it is: the file holds non-data objects and is refused; never "damaged", and never
    # torch's advice to load it again with weights_only=False (which would run it).
    said = str(info.value)
    assert f"checkpoint {bad} holds non-data objects (it names posix.system): refused" in said, said
    assert "weights_only" not in said and "damaged" not in said and "trust" not in said


def test_a_non_data_checkpoint_is_refused_on_the_command_line(tmp_path: Path, run_cli: Run) -> None:
    torch = pytest.importorskip("torch")
    bad = tmp_path / "bad.pt"
    torch.save({"format": checkpoint.FORMAT, "agents": [Path("x")]}, bad)  # an object, not data
    for args in (("eval", bad), ("train", "--resume", bad), ("export-policy", bad)):
        code, _, err = run_cli(*args)
        assert code == 2 and "holds non-data objects (it names pathlib" in err, (args, err)
        assert "weights_only" not in err and "damaged" not in err and "Traceback" not in err, (args, err)


def test_old_torch_is_refused_for_loading() -> None:
    with pytest.raises(AgileRLError, match=r"needs torch >= 2\.6"):
        checkpoint._check_torch_version("2.5.1+cpu")
    checkpoint._check_torch_version("2.13.0+cpu")


def test_a_manifest_with_a_default_encoder_round_trips(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    # Checkpoints store manifest.to_dict(); `arch: mlp` is a default but also the encoder's tag.
    from agilerl.models.manifest import validate_manifest

    ucb_manifest["network"] = {"encoder_config": {"arch": "mlp", "hidden_size": [16]}}
    m = validate_manifest(ucb_manifest)
    assert validate_manifest(m.to_dict()).to_dict() == m.to_dict()


def test_an_absent_device_on_the_command_line_is_refused(
    run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path]
) -> None:
    code, _, err = run_cli("train", write_manifest(evolving), "--device", "cuda:99")
    assert code == 1 and "--device: device 'cuda:99'" in err and "Traceback" not in err


def test_resume_writes_to_the_run_dir_given_at_the_start_over_the_manifests(
    run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_manifest(evolving)  # training.run_dir: tmp/run
    assert (
        run_cli("train", path, "--run-dir", tmp_path / "cli", "--no-progress", "--set", "training.max_steps=300")[0]
        == 0
    )
    code, _, err = run_cli("train", path, "--resume", tmp_path / "cli", "--no-progress")
    assert code == 0, err
    assert max(r["steps"] for r in rows(tmp_path / "cli")) == 500 and not (tmp_path / "run").exists()


def test_a_manifest_given_as_a_checkpoint_is_named_as_one(
    tmp_path: Path, run_cli: Run, evolving: dict[str, Any], write_manifest: Callable[..., Path]
) -> None:
    path = write_manifest(evolving)
    as_json = tmp_path / "m.json"
    as_json.write_text(json.dumps(evolving))
    for given in (path, as_json):
        for args in (("train", "--resume", given), ("train", path, "--resume", given), ("eval", given)):
            code, _, err = run_cli(*args, "--no-progress") if args[0] == "train" else run_cli(*args)
            assert code == 2, (args, err)
            assert f"{given} is a manifest, not a checkpoint" in err, (args, err)
            assert "damaged" not in err and "Traceback" not in err, (args, err)


def test_a_run_dir_resumes_its_newest_state_not_its_newest_file(evolving: dict[str, Any], tmp_path: Path) -> None:
    """Ranked by generation, phase and steps: an older-state file touched last is not taken, and a
    damaged newest one falls back with a warning."""
    from agilerl.training.rundir import newest_state

    evolving["training"]["max_steps"] = 300
    LocalTrainer.from_manifest(evolving).train()
    run_dir = tmp_path / "run"
    older = run_dir / "checkpoint_100.pt"
    os.utime(older)  # the newest file, the oldest state
    path, payload = newest_state(run_dir)
    assert path == run_dir / "checkpoint_300.pt" and payload["generation"] == 2
    (run_dir / "checkpoint_300.pt").write_bytes(b"cut")
    path, _ = newest_state(run_dir)
    assert path == run_dir / "last.pt"  # the same state as the damaged one
