"""Data parallelism: GRPO, SFT and DPO on 2 CPU processes (gloo) take the same optimizer steps as 1
process (plain ``agilerl train``) at the same global batch, within float tolerance, whichever launcher
starts them: ``torchrun``, ``agilerl train --num-processes 2`` or ``accelerate launch``; only rank 0
writes metrics, checkpoints and output. Ctrl-C under ``agilerl train --num-processes 2`` leaves a
checkpoint that resumes in 2 processes; launches this data parallelism cannot honour are refused
clearly before any model loads (DeepSpeed, FSDP1 and FSDP settings not implemented, accelerate's
autocast, a ``--cpu`` launch that started one process, paradigms that train in one process).
FSDP2 sharding (the ``fsdp`` field, ``accelerate launch --use_fsdp --fsdp_version 2``) takes the same
steps as one process too, and its checkpoints resume in one process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agilerl_plugin_llm.distributed import launch_problems

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "AGILERL_DIST_BACKEND": "gloo"}


#: How far one process's weights may lie from two processes' after 3 steps (lr 0.01: weights move up to
#: ~0.03). Float summation order differs between them, and Adam scales a parameter's gradient noise
#: up to a step of ~lr wherever its gradient is near 0: GRPO's KL term leaves many such parameters
#: (1e-3); DPO some (1.5e-5 seen on an AMD EPYC, under 1e-5 on an Intel Xeon: 1e-4); SFT 1e-5.
ATOL = {"GRPO": 1e-3, "DPO": 1e-4}


def manifest(algo: str, model_dir: Path, tmp_path: Path, run_dir: Path) -> dict[str, Any]:
    net = {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128}
    training = {"max_steps": 3, "evo_steps": 3, "seed": 0, "progress": False, "run_dir": str(run_dir)}
    common = {"lr": 0.01, "gradient_checkpointing": False}
    if algo == "GRPO":
        # A reward that varies between completions: with all-equal rewards the only gradient is float
        # noise, which Adam scales up to full steps (and then 1 and 2 processes differ by summation order).
        rubric = tmp_path / "letters.py"
        rubric.write_text("def reward_fn(completion, answer, question):\n    return len(set(completion)) / 10\n")
        return {"algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 3, "beta": 0.04, "max_output_tokens": 6,
                              "temperature": 1.0, **common},
                "network": net, "training": training,
                "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                                "rubric_file_path": str(rubric)}}  # fmt: skip
    if algo == "SFT":
        return {"algorithm": {"name": "SFT", "batch_size": 5, **common}, "network": net, "training": training,
                "environment": {"env_type": "sft", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                                "columns": {"prompt": "question"}, "response_column": "answer"}}  # fmt: skip
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "chosen": "eight", "rejected": w})
                               for w in ("one", "two", "three", "four", "five", "six", "nine", "ten")))  # fmt: skip
    return {"algorithm": {"name": "DPO", "batch_size": 3, **common}, "network": net, "training": training,
            "environment": {"env_type": "preference", "dataset_path": str(pairs)}}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(launcher: str, procs: int, path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``agilerl train PATH`` in ``procs`` processes started by ``launcher`` (1 process: plain ``agilerl train``)."""
    port = ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    cmd = {
        "plain": [sys.executable, "-m", "agilerl", "train", str(path)],
        "torchrun": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), *port,
                     "-m", "agilerl", "train", str(path)],
        "num-processes": [sys.executable, "-m", "agilerl", "train", str(path), "--num-processes", str(procs)],
        # On a machine without CUDA, --multi_gpu runs torch.distributed.run; the processes use gloo.
        "accelerate": [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                       str(procs), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                       "--main_process_port", str(free_port()), "-m", "agilerl", "train", str(path)],
    }[launcher if procs > 1 else "plain"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


SLOW = pytest.mark.slow
#: AgileRL's FSDPConfig in float32 (its default param_dtype is bfloat16, refused here).
FSDP_F32 = {"param_dtype": "float32", "reduce_dtype": "float32"}
LORA = {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}


@pytest.fixture(scope="module")
def one_process(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run directory of a plain 1-process ``agilerl train`` of ``algo`` (run once per module)."""
    runs: dict[str, Path] = {}

    def get(algo: str, lora: bool = False) -> Path:
        key = f"{algo}-lora" if lora else algo
        if key not in runs:
            work = tmp_path_factory.mktemp(f"one-{key}")
            path = work / "one.yaml"
            data = manifest(algo, tiny_model_dir, work, work / "one")
            if lora:
                data["network"]["lora_config"] = LORA
            path.write_text(yaml.safe_dump(data), encoding="utf-8")
            done = launch("plain", 1, path, ENV)
            assert done.returncode == 0, done.stdout + done.stderr
            runs[key] = work / "one"
        return runs[key]

    return get


@pytest.mark.parametrize(
    ("algo", "launcher"),
    [("SFT", "torchrun"), ("SFT", "num-processes"), pytest.param("SFT", "accelerate", marks=SLOW),
     pytest.param("DPO", "torchrun", marks=SLOW), pytest.param("GRPO", "torchrun", marks=SLOW),
     pytest.param("GRPO", "num-processes", marks=SLOW), pytest.param("DPO", "accelerate", marks=SLOW)],
)  # fmt: skip
def test_two_processes_match_one_at_the_same_global_batch(
    algo: str,
    launcher: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Callable[..., Path],
    one_process: Callable[[str], Path],
) -> None:
    one, two = one_process(algo), tmp_path / "two"
    path = write_manifest(manifest(algo, tiny_model_dir, tmp_path, two), "two.yaml")
    done = launch(launcher, 2, path, ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    # Rank 0 alone reports (a launcher that prefixes or repeats the ranks' lines would show it twice).
    assert done.stdout.count("done: 1 generation(s)") == 1, done.stdout
    assert len(list((two / "tensorboard").iterdir())) == 1  # one event file: rank 1 wrote none
    a = torch.load(one / "elite.pt", weights_only=True)["agents"][0]
    b = torch.load(two / "elite.pt", weights_only=True)["agents"][0]
    assert a["steps"] == b["steps"] == 3
    atol = ATOL.get(algo, 1e-5)
    for name, tensor in a["weights"].items():
        assert torch.allclose(tensor, b["weights"][name], atol=atol, rtol=1e-4), name
    rows_one = [json.loads(x) for x in (one / "metrics.jsonl").read_text().splitlines()]
    rows_two = [json.loads(x) for x in (two / "metrics.jsonl").read_text().splitlines()]
    assert len(rows_two) == len(rows_one) == 2  # the step-0 evaluation and one generation; rank 0 alone wrote them
    evals = [k for k in rows_one[-1] if k.startswith("eval/") or k in ("fitness", "train/reward")]
    assert evals and any(rows_one[0].get(k) != rows_one[-1][k] for k in evals if k != "train/reward")  # it moved
    for r1, r2 in zip(rows_one, rows_two, strict=True):
        for key in evals:
            if key in r1:
                assert r2[key] == pytest.approx(r1[key], rel=1e-4, abs=1e-5), key


# --- launching: Ctrl-C and resume, refused launches ------------------------------------------

ROOT = Path(__file__).resolve().parents[3]


def rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_the_checkpoint_resumes_in_two_processes(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path]
) -> None:
    run_dir = tmp_path / "run"
    data = manifest("SFT", tiny_model_dir, tmp_path, run_dir)
    data["training"].update(max_steps=100_000, evo_steps=1)  # runs until interrupted
    path = write_manifest(data)
    cmd = [sys.executable, "-m", "agilerl", "train", str(path), "--num-processes", "2"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while len(rows(run_dir)) < 4 and proc.poll() is None:  # the step-0 row and 3 generations
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends the launcher
    out, err = proc.communicate()
    assert proc.returncode == 130, out + err
    assert "stopped by Ctrl-C, as you asked; checkpoint written to" in err and "--num-processes 2" in err, err
    ckpt = run_dir / "checkpoint_interrupted.pt"
    stopped = torch.load(ckpt, weights_only=True)["agents"][0]["steps"]
    assert stopped >= 3
    resumed = subprocess.run(
        [sys.executable, "-m", "agilerl", "train", "--resume", str(ckpt), "--num-processes", "2",
         "--set", f"training.max_steps={stopped + 2}"],
        env=ENV, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert torch.load(run_dir / "elite.pt", weights_only=True)["agents"][0]["steps"] == stopped + 2
    generations = [r["generation"] for r in rows(run_dir)]
    assert generations == sorted(generations) and len(set(generations)) == len(generations)  # none twice


def test_a_paradigm_that_trains_in_one_process_is_refused_before_any_process_starts(
    run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    code, _, err = run_cli("train", str(ROOT / "examples" / "dqn_cartpole.yaml"), "--num-processes", "2",
                           "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert code == 1
    assert "DQN trains in one process" in err and "--num-processes 1" in err
    assert not (tmp_path / "run").exists()


def test_torchrun_starting_a_one_process_paradigm_is_refused(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun / accelerate launch set in each process
    code, _, err = run_cli("train", str(ROOT / "examples" / "dqn_cartpole.yaml"), "--run-dir", str(tmp_path / "r"))
    assert code == 1 and "DQN trains in one process" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [({"ACCELERATE_USE_DEEPSPEED": "true"}, "ZeRO sharding is not implemented"),
     ({"ACCELERATE_USE_FSDP": "true"}, "FSDP1 (FullyShardedDataParallel) is not implemented"),
     ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_OFFLOAD_PARAMS": "true"}, "--fsdp_offload_params"),
     ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP"},
      "--fsdp_auto_wrap_policy SIZE_BASED_WRAP"),
     ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"},
      "always hold full tensors"),
     ({"ACCELERATE_MIXED_PRECISION": "bf16"}, "--mixed_precision bf16"),
     ({"OMPI_COMM_WORLD_SIZE": "2"}, "MPI launches are not supported"),
     ({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1"}, "started one process")],
)  # fmt: skip
def test_launch_problems_name_what_is_not_done(env: dict[str, str], expected: str) -> None:
    problems = launch_problems(env)
    assert len(problems) == 1 and expected in problems[0], problems


def test_plain_launches_have_no_problems() -> None:
    assert launch_problems({}) == []
    assert launch_problems({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1",
                            "ACCELERATE_MIXED_PRECISION": "no"}) == []  # fmt: skip
    # What accelerate launch --use_fsdp --fsdp_version 2 sets by default (FSDP1-only settings unused).
    assert launch_problems({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
                            "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_OFFLOAD_PARAMS": "false",
                            "FSDP_USE_ORIG_PARAMS": "true", "FSDP_SYNC_MODULE_STATES": "true",
                            "FSDP_CPU_RAM_EFFICIENT_LOADING": "true", "FSDP_ACTIVATION_CHECKPOINTING": "false",
                            "FSDP_FORWARD_PREFETCH": "false"}) == []  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [["--cpu", "--num_processes", "2"], ["--use_fsdp", "--num_processes", "2"]],
)
def test_accelerate_launches_that_cannot_run_stop_before_the_model_loads(
    flags: list[str], tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path]
) -> None:
    run_dir = tmp_path / "run"
    path = write_manifest(manifest("SFT", tiny_model_dir, tmp_path, run_dir))
    done = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", *flags, "--num_machines", "1", "--mixed_precision",
         "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()), "-m", "agilerl", "train", str(path)],
        env=ENV, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    expected = "started one process" if "--cpu" in flags else "FSDP1 (FullyShardedDataParallel) is not implemented"
    assert "error: this launch cannot run here" in done.stderr and expected in done.stderr, done.stderr
    assert not (run_dir / "elite.pt").exists()


@pytest.mark.parametrize(
    ("fsdp", "expected"),
    [({"fsdp_version": 2}, "  - algorithm.fsdp.fsdp_version: not an FSDPConfig field"),
     ({"shard_size": 2}, "  - algorithm.fsdp.shard_size: not an FSDPConfig field; did you mean 'shard_group_size'?"),
     (True, "  - algorithm.fsdp.param_dtype: AgileRL's default cannot run here: mixed-precision FSDP is not "
            "implemented (weights train in float32 here); set it explicitly to 'float32' (got 'bfloat16')"),
     ({**FSDP_F32, "tp": 2}, "  - algorithm.fsdp.tp: cannot run here: tensor parallelism is not implemented; use 1 (got 2)"),
     ({**FSDP_F32, "cpu_offload": True}, "  - algorithm.fsdp.cpu_offload: cannot run here"),
     ({**FSDP_F32, "shard_group_size": 0}, "  - algorithm.fsdp.shard_group_size: expected null or an integer >= 1 (got 0)")],
)  # fmt: skip
def test_fsdp_settings_not_implemented_are_refused_by_name(
    fsdp: Any, expected: str, tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:  # fmt: skip
    data = manifest("SFT", tiny_model_dir, tmp_path, tmp_path / "run")
    data["algorithm"]["fsdp"] = fsdp  # AgileRL's field (its FSDPConfig)
    code, _, err = run_cli("validate", str(write_manifest(data)))
    assert code == 1 and expected in err, err
    data["algorithm"]["fsdp"] = FSDP_F32
    code, _, err = run_cli("validate", str(write_manifest(data)))
    assert code == 0, err


SUM_SCRIPT = """
import json, sys, torch
import torch.distributed as dist
from agilerl_plugin_llm.distributed import context, sum_gradients
rank, world = context()
p = torch.nn.Parameter(torch.zeros(3))
p.grad = torch.full((3,), float(rank + 1))
same = sum_gradients([p], ({"loss": 1.0 + rank}, {"loss": 1}))
odd = {"loss": 2.0} if rank == 0 else {"loss": 3.0, "kl": 0.5}  # a key only rank 1 has: the slow path
p.grad = torch.ones(3)
other = sum_gradients([p], (odd, dict.fromkeys(odd, 1)))
if rank == 0:
    json.dump({"grad": p.grad.tolist(), "same": same, "other": other}, open(sys.argv[1], "w"))
"""


def test_stats_ride_in_the_gradient_all_reduce_and_differing_keys_fall_back(tmp_path: Path) -> None:
    script, out = tmp_path / "sum.py", tmp_path / "out.json"
    script.write_text(SUM_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), str(script), str(out)],
        env=ENV, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(out.read_text())
    assert got["grad"] == [2.0, 2.0, 2.0]  # summed over both processes
    assert got["same"] == [{"loss": 3.0}, {"loss": 2}]  # totals and counts of both processes
    assert got["other"] == [{"loss": 5.0, "kl": 0.5}, {"loss": 2, "kl": 1}]


@pytest.mark.parametrize(("rows", "mini"), [(10, None), (10, 4), (3, 2), (1, None)])
def test_local_rows_are_the_rows_optimize_trains_each_process_on(rows: int, mini: int | None) -> None:
    from agilerl_plugin_llm.distributed import local_rows, shard

    step = min(mini or rows, rows)
    for world in (1, 2, 3):
        ranges = [local_rows(rows, mini, r, world) for r in range(world)]
        covered = sorted(i for rs in ranges for lo, hi in rs for i in range(lo, hi))
        assert covered == list(range(rows))  # every row once, over all processes
        for r in range(world):  # optimize: each step's rows, split with shard()
            expected = []
            for start in range(0, rows, step):
                lo, hi = shard(min(start + step, rows) - start, r, world)
                expected += [(start + lo, start + hi)] if hi > lo else []
            assert ranges[r] == expected


@pytest.mark.slow
def test_a_rank_that_fails_stops_the_others_and_its_error_is_shown(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path]
) -> None:
    data = manifest("GRPO", tiny_model_dir, tmp_path, tmp_path / "run")
    rubric = Path(data["environment"]["rubric_file_path"])
    rubric.write_text('import os\nif os.environ.get("RANK") == "1":\n    raise RuntimeError("rank 1 cannot load it")\n'
                      + rubric.read_text())  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "agilerl", "train", str(write_manifest(data)), "--num-processes", "2"],
        env=ENV, capture_output=True, text=True, check=False,
    )  # fmt: skip
    # Rank 0 waits for rank 1 at the rendezvous until the launcher stops it; the exit code is rank 1's.
    assert done.returncode not in (0, -15), done.stdout + done.stderr
    assert "rank 1 of 2 exited with" in done.stderr and "rank 1 cannot load it" in done.stderr, done.stderr
    assert "stopping the other ranks" in done.stderr
    assert not (tmp_path / "run" / "elite.pt").exists()


# --- FSDP2 sharding ------------------------------------------------------------------------------

FSDP_SCRIPT = """
import json, sys, torch
from torch.distributed.tensor import DTensor
from agilerl_plugin_llm.dataset.sft import SFT
from agilerl_plugin_llm.distributed import context
from agilerl_plugin_llm.fsdp import full
from agilerl_plugin_llm.model import load_tokenizer
from agilerl_plugin_llm.dataset.specs import SFTSpec
rank, world = context()
local = lambda t: t.to_local() if isinstance(t, DTensor) else t
spec = SFTSpec(pretrained_model_name_or_path=sys.argv[1], batch_size=3, lr=0.01, gradient_checkpointing=False,
               micro_batch_size_per_gpu=1, max_grad_norm=0.5,
               fsdp={"param_dtype": "float32", "reduce_dtype": "float32", "param_persistence_threshold": 0})
agent = SFT(spec, tokenizer=load_tokenizer(sys.argv[1]))
params = dict(agent.model.named_parameters())
torch.manual_seed(0)
ids = torch.randint(3, 50, (3, 7))  # rank 0 trains 2 rows (2 micro-batches), rank 1 one (and a zero-weight pass)
stats = agent.learn({"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones_like(ids)})
twin = agent.clone(index=1)
state = agent.state_dict()
pairs = zip(agent.optimizer.param_groups[0]["params"], twin.optimizer.param_groups[0]["params"], strict=True)
out = {
    "sharded": [agent.sharded, twin.sharded],
    "local_share": sum(local(p).numel() for p in params.values()) / sum(p.numel() for p in params.values()),
    "full_shapes": all(tuple(state["weights"][n].shape) == tuple(p.shape) for n, p in params.items()),
    "plain": all(type(t) is torch.Tensor for t in state["weights"].values()),
    "twin_equal": all(torch.equal(full(a), full(b)) for a, b in zip(agent.model.parameters(), twin.model.parameters())),
    "own_moments": all(local(twin.optimizer.state[q]["exp_avg"]).data_ptr()
                       != local(agent.optimizer.state[p]["exp_avg"]).data_ptr() for p, q in pairs),
    "stats": stats, "weights": {n: t.tolist() for n, t in state["weights"].items()},
}
if rank == 0:
    json.dump(out, open(sys.argv[2], "w"))
"""


def test_fsdp_shards_the_policy_and_a_step_equals_one_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    script, two, one = tmp_path / "fsdp.py", tmp_path / "two.json", tmp_path / "one.json"
    script.write_text(FSDP_SCRIPT)
    for cmd in (
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), str(script), str(tiny_model_dir), str(two)],
        [sys.executable, str(script), str(tiny_model_dir), str(one)],  # one process: nothing to shard
    ):  # fmt: skip
        done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    a, b = json.loads(two.read_text()), json.loads(one.read_text())
    assert a["sharded"] == [True, True] and b["sharded"] == [False, False]
    assert a["local_share"] == pytest.approx(0.5, abs=0.01) and b["local_share"] == 1.0  # half the weights each
    assert a["full_shapes"] and a["plain"]  # the checkpoint holds whole plain tensors
    assert a["twin_equal"] and a["own_moments"]  # a clone: the same weights, its own AdamW moments
    assert a["stats"] == pytest.approx(b["stats"], rel=1e-5)  # loss, clipped grad norm (clipping at 0.5)
    for name, values in b["weights"].items():
        assert torch.allclose(torch.tensor(a["weights"][name]), torch.tensor(values), atol=1e-6), name


@pytest.mark.parametrize(
    ("algo", "lora", "launcher"),
    [("SFT", False, "num-processes"), pytest.param("GRPO", True, "num-processes", marks=SLOW),
     pytest.param("DPO", False, "torchrun", marks=SLOW), pytest.param("SFT", False, "accelerate-fsdp", marks=SLOW)],
)  # fmt: skip
def test_fsdp_over_two_processes_matches_one_and_its_checkpoint_resumes_in_one(
    algo: str,
    lora: bool,
    launcher: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Callable[..., Path],
    one_process: Callable[..., Path],
) -> None:
    one, two = one_process(algo, lora), tmp_path / "two"
    data = manifest(algo, tiny_model_dir, tmp_path, two)
    if lora:  # the adapters (256 elements) stay whole, the base's weights are sharded: both paths at once
        data["network"]["lora_config"] = LORA
        data["algorithm"]["fsdp"] = {**FSDP_F32, "param_persistence_threshold": 1000}
    elif launcher != "accelerate-fsdp":
        data["algorithm"]["fsdp"] = {**FSDP_F32, "param_persistence_threshold": 0}
    path = write_manifest(data, "two.yaml")
    if launcher == "accelerate-fsdp":
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--use_fsdp", "--fsdp_version", "2",
               "--fsdp_reshard_after_forward", "true", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
               "-m", "agilerl", "train", str(path)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=False)
    else:
        done = launch(launcher, 2, path, ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    a = torch.load(one / "elite.pt", weights_only=True)["agents"][0]
    b = torch.load(two / "elite.pt", weights_only=True)["agents"][0]
    assert a["steps"] == b["steps"] == 3
    atol = ATOL.get(algo, 1e-5)
    for name, tensor in a["weights"].items():
        assert type(b["weights"][name]) is torch.Tensor  # whole tensors, not shards
        assert torch.allclose(tensor, b["weights"][name], atol=atol, rtol=1e-4), name
    if launcher != "num-processes" or lora:
        return
    # The checkpoint is an unsharded run's: it resumes in one process and exports.
    resumed = subprocess.run(
        [sys.executable, "-m", "agilerl", "train", "--resume", str(two / "last.pt"), "--set", "training.max_steps=5"],
        env=ENV, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert torch.load(two / "elite.pt", weights_only=True)["agents"][0]["steps"] == 5
    exported = subprocess.run([sys.executable, "-m", "agilerl", "export", str(two), str(tmp_path / "hf")],
                              env=ENV, capture_output=True, text=True, check=False)  # fmt: skip
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert (tmp_path / "hf" / "config.json").is_file()


@pytest.mark.slow
def test_an_fsdp_population_evolves_as_in_one_process(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path]
) -> None:
    """Members built from agent 0 and clones made by selection: each a fresh sharded policy with a copy
    of the weights and its own AdamW moments, so selection, mutation (lr) and training match one process."""
    runs = {}
    for procs in (1, 2):
        data = manifest("SFT", tiny_model_dir, tmp_path, tmp_path / f"run{procs}")
        data["network"]["lora_config"] = LORA
        data["algorithm"]["fsdp"] = {**FSDP_F32, "param_persistence_threshold": 1000}
        data["training"].update(pop_size=2, evo_steps=1, max_steps=3)
        data["tournament_selection"] = {"tournament_size": 2, "elitism": True}
        data["mutation"] = {"probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}, "mutation_sd": 0.1,
                            "rl_hp_selection": {"lr": {"min": 0.001, "max": 0.1}}}  # fmt: skip
        done = launch("num-processes", procs, write_manifest(data, f"pop{procs}.yaml"), ENV)
        assert done.returncode == 0, done.stdout + done.stderr
        runs[procs] = torch.load(tmp_path / f"run{procs}" / "last.pt", weights_only=True)["agents"]
    assert len(runs[1]) == len(runs[2]) == 2
    for a, b in zip(runs[1], runs[2], strict=True):
        assert a["index"] == b["index"] and a["steps"] == b["steps"]
        for name, tensor in a["weights"].items():
            assert torch.allclose(tensor, b["weights"][name], atol=1e-5, rtol=1e-4), name


# --- two nodes on one box: torchrun --nnodes 2, c10d rendezvous on 127.0.0.1 ----------------------


def launch_two_nodes(
    path: Path, *extra: str, kill_rank: int | None = None, kill_when: Callable[[], bool] = lambda: True
) -> list[subprocess.CompletedProcess[str]]:
    """``agilerl train PATH`` as two torchrun nodes of one process each (two launcher processes meeting at a
    c10d rendezvous on 127.0.0.1), as on two machines. ``kill_rank``: SIGKILL that rank's worker once
    ``kill_when()`` holds (mid-run); the other node must then end by itself."""
    endpoint = f"127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "agilerl-test", "--max-restarts", "0",
           "-m", "agilerl", "train", str(path), *extra]  # fmt: skip
    nodes = [
        subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    if kill_rank is not None:
        while not kill_when() and all(n.poll() is None for n in nodes):
            time.sleep(0.05)
        victim = next(
            int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _is_rank_worker(p, str(path), kill_rank)
        )  # fmt: skip
        os.kill(victim, signal.SIGKILL)
    done = []
    for node in nodes:
        out, err = node.communicate(timeout=600)  # bounded: a node left waiting for a dead peer fails the test
        done.append(subprocess.CompletedProcess(node.args, node.returncode, out, err))
    return done


def _is_rank_worker(proc: Path, manifest_path: str, rank: int) -> bool:
    try:
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        environ = (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    worker = b"agilerl" in cmdline and manifest_path.encode() in cmdline and b"torch.distributed.run" not in cmdline
    return worker and f"RANK={rank}".encode() in environ


@pytest.mark.parametrize("algo", ["SFT", pytest.param("GRPO", marks=SLOW)])
def test_two_torchrun_nodes_match_one_process(
    algo: str, tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path],
    one_process: Callable[[str], Path],
) -> None:  # fmt: skip
    one, two = one_process(algo), tmp_path / "two"
    done = launch_two_nodes(write_manifest(manifest(algo, tiny_model_dir, tmp_path, two), "two.yaml"))
    for node in done:
        assert node.returncode == 0, node.stdout + node.stderr
    # One node ran rank 0 (it reports); the other's worker, rank 1 with LOCAL_RANK 0, wrote nothing.
    assert sum(node.stdout.count("done: 1 generation(s)") for node in done) == 1
    assert len(list((two / "tensorboard").iterdir())) == 1
    a = torch.load(one / "elite.pt", weights_only=True)["agents"][0]
    b = torch.load(two / "elite.pt", weights_only=True)["agents"][0]
    assert a["steps"] == b["steps"] == 3
    atol = 1e-3 if algo == "GRPO" else 1e-5  # float summation order (see the single-node test above)
    for name, tensor in a["weights"].items():
        assert torch.allclose(tensor, b["weights"][name], atol=atol, rtol=1e-4), name


@pytest.mark.slow
def test_a_killed_node_ends_the_other_clearly_and_the_run_resumes_on_two_nodes(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path]
) -> None:
    run_dir = tmp_path / "run"
    data = manifest("SFT", tiny_model_dir, tmp_path, run_dir)
    data["training"].update({"max_steps": 40, "evo_steps": 4, "checkpoint_steps": 4})
    path = write_manifest(data, "long.yaml")
    done = launch_two_nodes(path, kill_rank=1, kill_when=lambda: any(run_dir.glob("checkpoint_*.pt")))
    survivor = next((node for node in done if "a collective with the other" in node.stderr), None)
    assert survivor is not None, "\n---\n".join(node.stderr[-3000:] for node in done)
    assert survivor.returncode != 0
    assert "rank 0 of 2: a collective with the other processes failed" in survivor.stderr, survivor.stderr
    assert "--resume RUN_DIR" in survivor.stderr
    kept = max(r.get("steps", 0) for r in rows(run_dir))
    assert 0 < kept < 40  # killed mid-run, after a checkpoint
    # Both nodes again, resumed from the run directory's newest checkpoint: the run finishes.
    resumed = launch_two_nodes(path, "--resume", str(run_dir))
    for node in resumed:
        assert node.returncode == 0, node.stdout + node.stderr
    assert sum("done:" in node.stdout for node in resumed) == 1
    assert max(r.get("steps", 0) for r in rows(run_dir)) > kept
    final = torch.load(run_dir / "last.pt", weights_only=True)["agents"][0]
    assert final["steps"] >= 40


@pytest.mark.slow
def test_a_node_that_hangs_ends_the_other_clearly_within_agilerl_dist_timeout_s(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path]
) -> None:
    """Rank 1's worker stopped (SIGSTOP: alive, its connections open, answering nothing) mid-run: rank 0's next
    collective waits AGILERL_DIST_TIMEOUT_S (here 5 s; the default, 600 s, would outlast this test's wait) and its
    node then ends by itself with the clear error, while rank 1 is still stopped."""
    run_dir = tmp_path / "run"
    data = manifest("SFT", tiny_model_dir, tmp_path, run_dir)
    data["training"].update({"max_steps": 40, "evo_steps": 4, "checkpoint_steps": 4})
    path = write_manifest(data, "hang.yaml")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "agilerl-hang",
           "--max-restarts", "0", "-m", "agilerl", "train", str(path)]  # fmt: skip
    env = {**ENV, "AGILERL_DIST_TIMEOUT_S": "5"}
    nodes = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in "ab"]
    hung: int | None = None
    try:
        while not any(run_dir.glob("checkpoint_*.pt")) and all(n.poll() is None for n in nodes):
            time.sleep(0.05)
        hung = next(
            int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _is_rank_worker(p, str(path), 1)
        )  # fmt: skip
        os.kill(hung, signal.SIGSTOP)
        # Bounded (600 s, the default timeout): rank 1 stays stopped until a node has ended.
        deadline = time.monotonic() + 600
        while all(n.poll() is None for n in nodes) and time.monotonic() < deadline:
            time.sleep(0.1)
        first = next((n for n in nodes if n.poll() is not None), None)
    finally:
        if hung is not None:
            os.kill(hung, signal.SIGKILL)  # the stopped worker: its own node's launcher then ends too
        for n in nodes:
            if n.poll() is None and hung is None:
                n.kill()
    done = [n.communicate(timeout=600) for n in nodes]
    assert first is not None, "no node ended while rank 1 hung:\n" + "\n---\n".join(err[-3000:] for _, err in done)
    _, first_err = done[nodes.index(first)]
    assert first.returncode != 0
    assert "rank 0 of 2: a collective with the other processes failed" in first_err, first_err
    assert "--resume RUN_DIR" in first_err
