"""Watching a run: population metrics, stable member ids, TensorBoard tags, plots, console output.

The runs are the example plugin's UCB1 on a k-armed bandit (pure Python, milliseconds), with a
population of 16 evolving its exploration constant ``c``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def pop16(example_plugin: Any, ucb_manifest: dict[str, Any], write_manifest: Callable[..., Path]) -> Path:
    ucb_manifest["training"].update(pop_size=16, max_steps=60, evo_steps=6, target_score=0.95)
    ucb_manifest["mutation"] = {"probabilities": {"no_mut": 0.3, "rl_hp_mut": 0.7}}
    ucb_manifest["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    return write_manifest(ucb_manifest)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_population_metrics_and_stable_member_ids(run_cli: Run, pop16: Path, tmp_path: Path) -> None:
    code, _, err = run_cli("train", pop16, "--run-dir", tmp_path / "run", "--no-progress")
    assert code == 0, err
    members = _rows(tmp_path / "run" / "metrics.jsonl")
    population = _rows(tmp_path / "run" / "population.jsonl")
    by_gen: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in members:
        by_gen[r["generation"]].append(r)
    assert [p["generation"] for p in population] == sorted(by_gen) and len(population) == 10
    best_ever = None
    for p in population:
        fits = [r["fitness"] for r in by_gen[p["generation"]]]
        assert len(fits) == 16 and p["pop_size"] == 16
        assert p["best"] == max(fits) and p["mean"] == pytest.approx(statistics.fmean(fits))
        assert p["std"] == pytest.approx(statistics.pstdev(fits)) and p["min"] == min(fits)
        best_ever = p["best"] if best_ever is None else max(best_ever, p["best"])
        assert p["best_ever"] == best_ever and p["target_score"] == 0.95 and p["steps_per_s"] > 0
        assert sorted(p["members"]) == sorted(r["member"] for r in by_gen[p["generation"]])
        assert all("hp/c" in r and r["member"] == r["agent"] for r in by_gen[p["generation"]])
    # Ids follow members, not list slots: a member keeps its id (and its c) from one generation to
    # the next unless mutated, and offspring get ids never used before.
    seen: set[int] = set()
    for g in sorted(by_gen)[1:]:
        prev = {r["member"]: r for r in by_gen[g - 1]}
        for r in by_gen[g]:
            if r["member"] in prev:
                assert r["parent"] == r["member"]
                if r["mutation"] == "None":
                    assert r["hp/c"] == prev[r["member"]]["hp/c"]
            else:
                assert r["member"] not in seen and r["parent"] in prev
        seen |= set(prev)


def test_tensorboard_tags_are_grouped_by_population_and_member(run_cli: Run, pop16: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code, _, err = run_cli("train", pop16, "--run-dir", tmp_path / "run", "--no-progress")
    assert code == 0, err
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"population/best", "population/mean", "population/std", "population/best_ever"} <= set(tags)
    assert "population/steps_per_s" in tags
    assert all(t.startswith(("population/", "member/")) for t in tags), tags
    population = _rows(tmp_path / "run" / "population.jsonl")
    assert [e.value for e in acc.Scalars("population/best")] == pytest.approx([p["best"] for p in population])
    first = population[0]["members"][0]
    assert {f"member/{first}/fitness", f"member/{first}/hp/c"} <= set(tags)


def test_plot_and_compare(run_cli: Run, pop16: Path, tmp_path: Path) -> None:
    from agilerl.plot import read_curve

    for name, seed in (("a", 0), ("b", 1)):
        code, _, err = run_cli(
            "train", pop16, "--run-dir", tmp_path / name, "--no-progress", "--set", f"training.seed={seed}"
        )
        assert code == 0, err
    code, _, err = run_cli("plot", tmp_path / "a")
    png = tmp_path / "a" / "learning_curve.png"
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", err
    curve = read_curve(tmp_path / "a")
    assert curve.pop_size == 16 and curve.target_score == 0.95
    assert curve.best_so_far == [max(curve.best[: i + 1]) for i in range(len(curve.best))]
    code, _, err = run_cli("compare", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "cmp.png")
    assert code == 0 and (tmp_path / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", err
    # a run written before population.jsonl existed: the same curve from the member rows
    (tmp_path / "b" / "population.jsonl").rename(tmp_path / "b.population.jsonl")
    old = read_curve(tmp_path / "b")
    (tmp_path / "b.population.jsonl").rename(tmp_path / "b" / "population.jsonl")
    new = read_curve(tmp_path / "b")
    assert (old.steps, old.best, old.best_so_far) == (new.steps, new.best, new.best_so_far)
    assert old.mean == pytest.approx(new.mean) and old.std == pytest.approx(new.std)


def test_last_pt_resumes_the_run(run_cli: Run, pop16: Path, tmp_path: Path) -> None:
    code, _, err = run_cli("train", pop16, "--run-dir", tmp_path / "a", "-q")
    assert code == 0, err
    more = ("--set", "training.max_steps=90")
    code, _, err = run_cli(
        "train", pop16, "--resume", tmp_path / "a" / "last.pt", "--run-dir", tmp_path / "b", "-q", *more
    )
    assert code == 0, err
    rows = _rows(tmp_path / "b" / "population.jsonl")
    assert rows[0]["generation"] == 10 and rows[-1]["steps"] == 90


def test_console_output_levels(run_cli: Run, pop16: Path, tmp_path: Path) -> None:
    on = ("--set", "training.progress=true")
    code, out, err = run_cli("train", pop16, "--run-dir", tmp_path / "a", *on)
    assert code == 0
    assert "[agilerl] generation 0:" in err and "best ever" in err and "pulls/s" in err
    assert "[agilerl]" not in out and out.startswith("done:")  # stdout: the result only
    code, out, err = run_cli("-q", "train", pop16, "--run-dir", tmp_path / "b", *on)
    assert code == 0 and err == "" and out.startswith("done:")
    code, out, err = run_cli("train", pop16, "--run-dir", tmp_path / "c", "--no-progress")
    assert code == 0 and "generation 0" not in err  # --no-progress: no per-generation lines
    code, out, err = run_cli("train", pop16, "--run-dir", tmp_path / "d", "--no-progress", "-v")
    assert code == 0 and "[agilerl] generation 0:" in err  # ... unless -v asks for debug output


def test_a_console_handler_left_by_library_use_does_not_double_cli_lines(
    run_cli: Run, pop16: Path, tmp_path: Path
) -> None:
    import logging

    from agilerl.training.metrics import console_handler

    logger = logging.getLogger("agilerl")
    left = console_handler()  # what ensure_console_logging installs when a script trains first
    logger.addHandler(left)
    try:
        code, _, err = run_cli("train", pop16, "--run-dir", tmp_path / "a", "--set", "training.progress=true")
        assert code == 0 and err.count("[agilerl] generation 0:") == 1, err
        assert left in logger.handlers  # given back afterwards
    finally:
        logger.removeHandler(left)


def test_eval_refuses_an_agent_without_episodes(run_cli: Run, example_plugin: Any, pop16: Path, tmp_path: Path) -> None:
    code, _, err = run_cli("train", pop16, "--run-dir", tmp_path / "run", "--no-progress", "-q")
    assert code == 0
    code, _, err = run_cli("eval", tmp_path / "run")
    assert code == 1 and "agilerl eval cannot play episodes with " in err and "Traceback" not in err
    # what the user can do instead, in their terms (no protocol or class names)
    assert "agilerl plot RUN_DIR" in err and ".test(env)" in err and "ask the plugin's author" in err, err
    code, _, err = run_cli("export-policy", tmp_path / "run")
    assert code == 1 and "cannot write a TorchScript or ONNX file for " in err
    assert "agilerl.load(" in err and "ask the plugin's author to support export-policy" in err, err
    assert "policy_module" not in err and "PolicyExporter" not in err
    code, _, err = run_cli("eval", tmp_path / "nowhere")
    assert code == 2 and "no checkpoint at" in err  # one message, one exit code (see test_checkpoint_trust)


def _wandb_history(path: Path) -> list[dict[str, Any]]:
    """The history rows of a W&B offline run file (a LevelDB-style log of protobuf records)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, rows = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        chunk, pos = data[pos : pos + length], pos + length
        if kind in (1, 2):  # full, first
            buf = chunk
        elif kind in (3, 4):  # middle, last
            buf += chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            if rec.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
    return rows


def test_weights_and_biases_offline(
    run_cli: Run, pop16: Path, tmp_path: Path, write_manifest: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    import yaml

    monkeypatch.setenv("WANDB_SILENT", "true")
    data = yaml.safe_load(pop16.read_text())
    data["training"]["pop_size"] = 3
    data["logging"] = {"tensorboard": False, "wandb": {"project": "agilerl-tests", "mode": "offline"}}
    manifest = write_manifest(data, "wandb.yaml")
    code, _, err = run_cli("train", manifest, "--run-dir", tmp_path / "run", "-q")
    assert code == 0, err
    run_dir = tmp_path / "run"
    assert not (run_dir / "tensorboard").exists()  # logging.tensorboard: false
    (wandb_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    history = _wandb_history(wandb_file)
    population = _rows(run_dir / "population.jsonl")
    assert [h["generation"] for h in history] == [p["generation"] for p in population]
    assert [h["population/best"] for h in history] == pytest.approx([p["best"] for p in population])
    assert [h["steps"] for h in history] == [p["steps"] for p in population]
    members = _rows(run_dir / "metrics.jsonl")
    first = members[0]
    assert history[0][f"member/{first['member']}/fitness"] == pytest.approx(first["fitness"])
    assert f"member/{first['member']}/hp/c" in history[0]
    # the agent loads where W&B is irrelevant: the logging section is not needed for inference
    from agilerl.inference import read_checkpoint

    assert read_checkpoint(run_dir).manifest_data["logging"]["wandb"]["project"] == "agilerl-tests"


def test_a_wandb_server_that_never_answers_is_given_up_at_init_timeout_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket that accepts and never answers, as the W&B server: the run stops after
    logging.wandb.init_timeout_s with the address and the setting, not wandb's raw CommError."""
    pytest.importorskip("wandb")
    import socket

    from agilerl.errors import AgileRLError
    from agilerl.training.metrics import MetricsLogger

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("WANDB_BASE_URL", url)
        monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
        monkeypatch.setenv("WANDB_SILENT", "true")
        logger = MetricsLogger(tmp_path / "run", tensorboard=False,
                               wandb={"project": "p", "mode": "online", "init_timeout_s": 2.0})  # fmt: skip
        with pytest.raises(AgileRLError) as info:
            logger.log({"member": 0, "steps": 1, "fitness": 0.0})
    message = str(info.value)
    assert message.startswith(f"logging.wandb: W&B could not start the run at {url} (waited at most 2 s;"), message
    assert "logging.wandb.init_timeout_s sets the bound" in message


def test_wandb_section_without_wandb_fails_validation(tmp_path: Path) -> None:
    manifest = {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"},
                "logging": {"wandb": {"project": "p"}}}  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps(manifest))
    code = (
        "import sys; sys.modules['wandb'] = None\n"  # as if W&B were not installed
        f"from agilerl.cli import main; sys.exit(main(['validate', {str(path)!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "logging.wandb" in proc.stderr and "pip install 'agilerl-core[wandb]'" in proc.stderr


def test_save_elite_false_writes_no_agent_files(run_cli: Run, pop16: Path, tmp_path: Path) -> None:
    code, _, err = run_cli("train", pop16, "--run-dir", tmp_path / "run", "-q", "--set", "training.save_elite=false")
    assert code == 0, err
    assert not list((tmp_path / "run").glob("*.pt")) and (tmp_path / "run" / "population.jsonl").is_file()


def test_log_lines_never_break_the_progress_bar(
    example_plugin: Any, ucb_manifest: dict[str, Any], write_manifest: Callable[..., Path], tmp_path: Path
) -> None:
    """On a terminal (a pty here) the bar is tqdm's; every log line is written above it."""
    import fcntl
    import pty
    import struct
    import termios

    ucb_manifest["training"].update(pop_size=2, max_steps=40, evo_steps=10, progress=True)
    manifest = write_manifest(ucb_manifest)
    example_src = Path(example_plugin.__file__).resolve().parents[1]
    hooks = "import importlib, sys; from agilerl import plugins; from agilerl.cli import main; "
    code = (
        f"{hooks}sys.path.insert(0, {str(example_src)!r}); "
        "plugins.register_plugin(importlib.import_module('agilerl_plugin_example.hooks'), name='ex'); "
        f"sys.exit(main(['train', {str(manifest)!r}, '--run-dir', {str(tmp_path / 'run')!r}]))"
    )
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120-column terminal
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=follower, stdout=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait() == 0
    screen = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    assert "pull/s" in screen and "%|" in screen  # tqdm's bar was drawn
    lines = [line for line in screen.split("\n") if "generation " in line and "best ever" in line]
    assert len(lines) == 4
    for line in lines:  # what remains visible of the line after the last carriage return
        assert line.split("\r")[-1].removeprefix("\x1b[A").startswith("[agilerl] generation "), repr(line)


def _cli(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "agilerl", *args], env=dict(os.environ), **kwargs)


def test_python_m_agilerl_and_a_closed_pipe() -> None:
    proc = _cli("--version", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    assert proc.returncode == 0 and out.decode().startswith("agilerl "), err
    # `agilerl schema | head -c 100`: the reader goes away while we still write (the schema of
    # every installed plugin's algorithms is well over a pipe buffer).
    proc = _cli("schema", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()
    err_text = proc.stderr.read().decode()
    proc.wait()
    assert "Traceback" not in err_text and "BrokenPipeError" not in err_text, err_text
    assert proc.returncode in (0, 141)
