"""Episodes per second: the same text env in-process versus through OpenEnv on loopback.

The env is ``examples/openenv/word_game.py`` (4 turns per episode, so 1 reset + 4 steps = 5 round
trips through OpenEnv), optionally made to burn ``--step-cost-ms`` of CPU per step the way a real env
(a game engine, a code runner, a verifier) does. The OpenEnv server is ``agilerl serve-env`` in its
own process; the client is the ``env_url`` rollout source (one WebSocket session per concurrent
trajectory). Two drivers:

* ``lockstep``: resets every session, then steps every session turn by turn, exactly as the LLM
  plugin's rollout harness plays a batch (``agilerl_plugin_llm.rollout.base.collect``, through its
  ``env_runner``): one after another in-process, concurrently for OpenEnv sessions;
* ``threads``: one thread per session, each playing episodes back to back.

Reports episodes/s, ms per episode and the overhead ratio (OpenEnv time per episode / in-process),
at 1 and 8 concurrent sessions. Run from the repository root::

    python benchmarks/openenv/bench_openenv.py [--episodes 400] [--step-cost-ms 0 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "openenv"))

from word_game import SayWordGame  # noqa: E402

TURNS = 4


class CostlyWordGame(SayWordGame):
    """The word game with ``step_cost_ms`` of CPU work per step (a stand-in for a real env's work)."""

    def __init__(self, step_cost_ms: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_cost_s = step_cost_ms / 1000.0

    def step(self, action: str) -> Any:
        if self.step_cost_s:
            # CPU time of this thread, not wall time: on a busy machine a wall-clock spin would
            # count the time the OS gave to other processes as the env's work.
            end = time.thread_time() + self.step_cost_s
            while time.thread_time() < end:
                pass
        return super().step(action)


def play_lockstep(envs: list[Any], episodes: int) -> None:
    from agilerl_plugin_llm.rollout.base import env_runner

    done = 0
    while done < episodes:
        batch = envs[: min(len(envs), episodes - done)]
        run = env_runner(batch)  # the harness's own: concurrent calls for `concurrent` (remote) envs
        run([partial(env.reset, seed=done + i) for i, env in enumerate(batch)])
        live = list(batch)
        while live:
            results = run([partial(env.step, "one") for env in live])
            live = [env for env, (_, _, term, trunc, _) in zip(live, results, strict=True) if not (term or trunc)]
        done += len(batch)


def play_threads(envs: list[Any], episodes: int) -> None:
    per = [episodes // len(envs) + (1 if i < episodes % len(envs) else 0) for i in range(len(envs))]

    def worker(env: Any, n: int) -> None:
        for k in range(n):
            env.reset(seed=k)
            while True:
                _, _, terminated, truncated, _ = env.step("one")
                if terminated or truncated:
                    break

    threads = [threading.Thread(target=worker, args=(env, n)) for env, n in zip(envs, per, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def timed(make_env: Any, sessions: int, episodes: int, driver: str, repeats: int) -> float:
    """Best-of-``repeats`` seconds per episode."""
    envs = [make_env() for _ in range(sessions)]
    play = play_lockstep if driver == "lockstep" else play_threads
    play(envs, sessions * 2)  # warm up: open the sessions, first-call costs
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        play(envs, episodes)
        best = min(best, (time.perf_counter() - t0) / episodes)
    for env in envs:
        getattr(env, "close", lambda: None)()
    return best


def start_server(step_cost_ms: float, sessions: int, execution: str) -> tuple[subprocess.Popen[str], str]:
    config = json.dumps({"turns": TURNS, "step_cost_ms": step_cost_ms})
    code = "import sys; from agilerl.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve-env", f"{Path(__file__).resolve()}:CostlyWordGame", "--port", "0",
         "--max-concurrent-envs", str(max(sessions, 8) * 2), "--env-config", config, "--execution", execution],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**os.environ, "AGILERL_LOAD_PLUGINS": "openenv"},
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("serve-env did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-cost-ms", type=float, nargs="+", default=[0.0, 2.0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--drivers", nargs="+", default=["lockstep", "threads"])
    parser.add_argument(
        "--execution", default="auto", choices=["auto", "inline", "thread"], help="serve-env --execution"
    )
    args = parser.parse_args()
    record = benchlib.Record("openenv/bench_openenv")
    rows: list[dict[str, Any]] = []

    from types import SimpleNamespace

    from agilerl_plugin_openenv.client import build_env_url_source

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    print(f"# {args.episodes} episodes x best of {args.repeats}; {TURNS} turns per episode (1 reset + {TURNS} steps)")
    print(f"# serve-env --execution {args.execution}; load average {os.getloadavg()[0]:.1f}")
    header = "| step cost | driver | sessions | in-process ep/s | OpenEnv ep/s | in-process ms/ep | OpenEnv ms/ep | overhead |"
    print(header)
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for cost in args.step_cost_ms:
        proc, url = start_server(cost, max(args.sessions), args.execution)
        try:
            spec = SimpleNamespace(
                env_url=url, request_timeout_s=30, max_concurrent_resets=None, max_turns=None,
                observation_field=None, action_field=None, action_error_field="", mcp_tool=None,
            )  # fmt: skip
            remote, _ = build_env_url_source(spec)

            def local(cost: float = cost) -> CostlyWordGame:
                return CostlyWordGame(step_cost_ms=cost, turns=TURNS)

            for driver in args.drivers:
                for n in args.sessions:
                    t_local = timed(local, n, args.episodes, driver, args.repeats)
                    t_remote = timed(remote, n, args.episodes, driver, args.repeats)
                    rows.append({"step_cost_ms": cost, "driver": driver, "sessions": n, "in_process_s_per_episode":
                                 t_local, "openenv_s_per_episode": t_remote})  # fmt: skip
                    print(
                        f"| {cost:g} ms | {driver} | {n} | {1 / t_local:,.0f} | {1 / t_remote:,.0f} | "
                        f"{t_local * 1e3:.3f} | {t_remote * 1e3:.3f} | {t_remote / t_local:.2f}x |",
                        flush=True,
                    )
        finally:
            proc.kill()
            proc.wait()
    record.save({"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
