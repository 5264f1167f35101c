"""Where a training run's time goes: our PPO, DQN or RainbowDQN at the benchmarks' settings.

    python benchmarks/gym/profile_learn.py --algo ppo      # bench_cartpole.py's PPO manifest, 8 envs
    python benchmarks/gym/profile_learn.py --algo dqn      # bench_cartpole.py's DQN manifest
    python benchmarks/gym/profile_learn.py --algo rainbow  # bench_rainbow.py's manifest, 4 envs
    python benchmarks/gym/profile_learn.py --algo dqn --top 30   # and cProfile's top functions
    python benchmarks/gym/profile_learn.py --algo all      # the three, each in its own process (run.py's full run)

Trains through ``LocalTrainer`` (as the benchmarks do, no evaluation) with one torch thread and
reports the process CPU time spent in each part of the loop (the learn step, acting, the vector
env's step, the buffer), timed by wrapping those methods; then the aten ops one learn step
dispatches (``torch.profiler``: the count is what per-op overhead scales with). CPU time, so
other jobs on a shared machine inflate every part alike. ``--top N`` adds a cProfile listing.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import io
import itertools
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402

STEPS = {"ppo": 40_960, "dqn": 20_000, "rainbow": 20_000}


def manifest(algo: str, steps: int) -> dict[str, Any]:
    if algo == "rainbow":
        import bench_rainbow

        return bench_rainbow.ours_manifest(steps, 0, steps)
    import bench_cartpole

    return bench_cartpole._agilerl_manifest(algo, "CartPole-v1", steps, 0, steps)


class Timers:
    """CPU seconds and calls per wrapped method (the outermost call only, so nothing counts twice)."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.active = False

    def wrap(self, owner: Any, name: str, label: str) -> None:
        fn: Callable[..., Any] = getattr(owner, name)

        # functools.wraps keeps the method's name, by which the engines select its fast version.
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                return fn(*args, **kwargs)
            self.active = True
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu[label] += time.process_time() - c0
                self.calls[label] += 1
                self.active = False

        setattr(owner, name, timed)


def instrument(algo: str, timers: Timers) -> None:
    import gymnasium as gym

    from agilerl_plugin_gym import buffers

    timers.wrap(gym.vector.SyncVectorEnv, "step", "env step (8 or 4 CartPoles)")
    if algo == "ppo":
        from agilerl_plugin_gym.fast import ppo as fast_ppo
        from agilerl_plugin_gym.single_agent.ppo import PPO

        timers.wrap(PPO, "learn", "learn (GAE done; 4 epochs x 16 minibatches)")
        timers.wrap(PPO, "act", "act (actor + critic forward, sample)")
        timers.wrap(fast_ppo, "learn", "learn (GAE done; 4 epochs x 16 minibatches)")  # what the engine runs
        timers.wrap(fast_ppo, "act", "act (actor + critic forward, sample)")
        timers.wrap(buffers.RolloutBuffer, "add", "rollout buffer add")
        timers.wrap(PPO, "obs_tensor", "obs -> tensor")
        return
    from agilerl_plugin_gym.fast import dqn as fast_dqn
    from agilerl_plugin_gym.fast import rainbow as fast_rainbow
    from agilerl_plugin_gym.single_agent.dqn import DQN
    from agilerl_plugin_gym.single_agent.rainbow import RainbowDQN

    cls = DQN if algo == "dqn" else RainbowDQN
    timers.wrap(cls, "learn", "learn (one gradient step)")
    timers.wrap(cls, "explore", "explore (acting)")
    timers.wrap(fast_dqn if algo == "dqn" else fast_rainbow, "learn", "learn (one gradient step)")  # the engine's
    if algo == "dqn":
        timers.wrap(fast_dqn, "explore", "explore (acting)")
    timers.wrap(buffers.ReplayBuffer, "add", "replay add")
    timers.wrap(buffers.ReplayBuffer, "sample_many", "replay sample")
    timers.wrap(buffers.ReplayBuffer, "sample", "replay sample")
    if algo == "rainbow":
        from agilerl_plugin_gym.engine.replay_per import NStepCollector, PrioritizedReplayBuffer

        timers.wrap(PrioritizedReplayBuffer, "add", "replay add")
        timers.wrap(PrioritizedReplayBuffer, "sample", "prioritized sample")
        timers.wrap(PrioritizedReplayBuffer, "update_priorities", "priority update")
        timers.wrap(NStepCollector, "step", "n-step returns")


def learn_ops(agent: Any, strategy: Any, algo: str) -> dict[str, int]:
    """aten ops dispatched by one learn call of the trained agent (on a batch from its own buffer)."""
    from torch.profiler import ProfilerActivity, profile

    from agilerl_plugin_gym import fast

    buf = getattr(strategy, "buffer", None)
    if algo == "ppo" or buf is None or len(buf) < agent.spec.batch_size:
        return {}
    batch = buf.sample(agent.spec.batch_size, beta=0.4) if algo == "rainbow" else buf.sample(agent.spec.batch_size)
    learn = fast.select(agent, "learn") or agent.learn  # what the engine runs
    learn(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learn(batch)
    return {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}


def dqn_learn_vs_bare(agent: Any, strategy: Any, iters: int) -> dict[str, float]:
    """Median CPU us of one DQN learn call against the same update in bare torch (``nn.Sequential``,
    ``torch.optim.Adam(fused=True)``, ``_foreach_lerp_``) and against its matmuls alone, alternating."""
    import statistics

    import torch
    from torch import nn

    batch = strategy.buffer.sample(agent.spec.batch_size)
    n_obs, n_act = batch["obs"].shape[1], agent.n_actions
    widths = [n_obs, *agent.nets["actor"].encoder.hidden_size, agent.nets["actor"].encoder.out_dim]

    def mlp() -> nn.Sequential:
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(widths[-1], n_act))

    q, tq = mlp(), mlp()
    qp, tp = list(q.parameters()), list(tq.parameters())
    opt = torch.optim.Adam(qp, lr=1e-3, fused=True)
    action = batch["action"].long().view(-1, 1)

    def bare() -> None:
        with torch.no_grad():
            y = batch["reward"] + 0.99 * (1 - batch["done"]) * tq(batch["next_obs"]).max(1).values
        loss = nn.functional.smooth_l1_loss(q(batch["obs"]).gather(1, action).squeeze(1), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(tp, qp, 0.005)

    weights = [m.weight.detach() for m in q if isinstance(m, nn.Linear)]
    grads = [torch.randn(agent.spec.batch_size, w.shape[0]) for w in weights]

    def matmuls() -> None:  # forward (online and target), then the weight and input gradients
        with torch.no_grad():
            for x in (batch["obs"], batch["next_obs"]):
                h = x
                acts = []
                for w in weights:
                    acts.append(h)
                    h = h @ w.t()
            for g, w, a in zip(grads, weights, acts, strict=True):
                g.t() @ a
                if a is not acts[0]:
                    g @ w

    from agilerl_plugin_gym import fast

    learn = fast.select(agent, "learn") or agent.learn  # what the engine runs
    calls = {"ours": lambda: learn(batch), "bare torch": bare, "its matmuls alone": matmuls}
    times: dict[str, list[int]] = {k: [] for k in calls}
    for i in range(iters):
        for k in calls if i % 2 else list(calls)[::-1]:
            c0 = time.process_time_ns()
            calls[k]()
            times[k].append(time.process_time_ns() - c0)
    return {k: statistics.median(v[iters // 10 :]) / 1e3 for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", choices=[*sorted(STEPS), "all"], default="ppo",
                    help="all: ppo, dqn and rainbow one after the other, each in its own process")  # fmt: skip
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--top", type=int, default=0, help="also print cProfile's top N functions by own time")
    args = ap.parse_args()
    if args.algo == "all":  # a fresh process per algorithm: one's warm caches and imports are not another's
        extra = [*(["--steps", str(args.steps)] if args.steps else []), *(["--top", str(args.top)] if args.top else [])]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for algo in ("ppo", "dqn", "rainbow"):
            subprocess.run([sys.executable, __file__, "--algo", algo, *extra], env=env, check=True)
        return
    import torch

    torch.set_num_threads(1)
    from agilerl.training.trainer import LocalTrainer

    record = benchlib.Record("gym/profile_learn")
    steps = args.steps or STEPS[args.algo]
    timers = Timers()
    instrument(args.algo, timers)
    trainer = LocalTrainer.from_manifest(manifest(args.algo, steps), run_dir=tempfile.mkdtemp(prefix="profile-"))
    trainer.strategy.evaluate = lambda agent, run: 0.0  # type: ignore[method-assign]
    prof = cProfile.Profile(time.process_time) if args.top else None
    c0 = time.process_time()
    if prof is not None:
        prof.enable()
    result = trainer.train()
    if prof is not None:
        prof.disable()
    total = time.process_time() - c0
    print(f"{args.algo}: {steps:,} env steps in {total:.2f} CPU s ({steps / total:,.0f} env steps per CPU s"
          f"{', under cProfile' if prof else ''}); load average {benchlib.loadavg()}")  # fmt: skip
    parts = {}
    for label, cpu in timers.cpu.most_common():
        calls = timers.calls[label]
        parts[label] = {"cpu_s": cpu, "share": cpu / total, "calls": calls, "us_per_call": cpu / calls * 1e6}
        print(f"  {label:46s} {cpu:6.2f} s {cpu / total:6.1%}  {calls:6d} calls  {cpu / calls * 1e6:7.0f} us/call")
    rest = total - sum(timers.cpu.values())
    print(f"  {'the rest (strategy loop, bookkeeping)':46s} {rest:6.2f} s {rest / total:6.1%}")
    ops = learn_ops(result.population[0], trainer.strategy, args.algo)
    if ops:
        print(f"  one learn call dispatches {sum(ops.values())} aten ops: "
              + ", ".join(f"{k.removeprefix('aten::')} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:12]))  # fmt: skip
    versus: dict[str, float] = {}
    if args.algo == "dqn":
        versus = dqn_learn_vs_bare(result.population[0], trainer.strategy, 200 if benchlib.SMOKE else 3000)
        print("  one learn call, median CPU us (alternating): " + ", ".join(f"{k} {v:.0f}" for k, v in versus.items()))
    top = ""
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
        top = out.getvalue()
        print(top)
    record.save({"algo": args.algo, "steps": steps, "cpu_s": total, "parts": parts, "rest_cpu_s": rest,
                 "learn_ops": ops, "learn_vs_bare_us": versus,
                 "cprofile_top": top})  # fmt: skip


if __name__ == "__main__":
    main()
