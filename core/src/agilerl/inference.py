"""Use a trained agent: :func:`load` a checkpoint or run directory, then ``agent.predict(obs)``.

``agilerl.load(path)`` needs only the checkpoint: every checkpoint embeds the manifest it was
trained from, so the agent is rebuilt with the registered builder and its saved state is loaded.

What a loaded agent can do beyond the training protocol depends on its plugin. The core knows
these optional protocols (checked with ``hasattr``) and never what is behind them:

``predict(observation, state=None, episode_start=None, deterministic=True) -> (action, state)``
    :class:`Predictor`: act on one observation or a batch (Stable-Baselines3's convention).
``run_episodes(env_spec, *, episodes, seed, render, video) -> list[Episode]``
    :class:`EpisodeRunner`: play whole episodes on the manifest's environment (``agilerl eval``).
``policy_module() -> torch.nn.Module`` and ``example_observation() -> array``
    :class:`PolicyExporter`: the policy network with its observation preprocessing, mapping a
    batch of raw observations to actions (``agilerl export-policy``).

A builder may define ``build_for_inference(spec, *, manifest, runtime)`` to build an agent without
a live training env; otherwise :func:`load` makes the strategy's evaluation env (or, failing that,
its training env) to read the spaces from, and closes it.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import agilerl.checkpoint as checkpoint
from agilerl.errors import AgileRLError
from agilerl.models.manifest import load_manifest
from agilerl.plugins import plugin_infos
from agilerl.registry import MANIFEST_REGISTRY
from agilerl.training.assembly import build_member, resolve_device
from agilerl.trust import LOAD_REMEDY, require_trust

#: Files :func:`resolve_checkpoint` looks for in a run directory, per ``which``.
RUN_FILES = {
    "best": ("best.pt", "elite.pt", "last.pt"),
    "last": ("last.pt", "elite.pt", "best.pt"),
    "elite": ("elite.pt",),
}


@dataclass(frozen=True)
class Episode:
    """One evaluation episode: its total reward and its length in env steps."""

    ret: float
    length: int


@runtime_checkable
class Predictor(Protocol):
    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = True
    ) -> tuple[Any, Any]: ...


@runtime_checkable
class EpisodeRunner(Protocol):
    def run_episodes(
        self, env_spec: Any, *, episodes: int, seed: int | None, render: bool, video: str | None
    ) -> list[Episode]: ...


@runtime_checkable
class PolicyExporter(Protocol):
    def policy_module(self) -> Any: ...

    def example_observation(self) -> Any: ...


@dataclass
class LoadedCheckpoint:
    """A checkpoint file read and its agent chosen (see :func:`read_checkpoint`)."""

    path: Path
    payload: dict[str, Any]
    agent_state: dict[str, Any]
    generation: int
    fitness: float | None

    @property
    def manifest_data(self) -> dict[str, Any]:
        data: dict[str, Any] = self.payload["manifest"]
        return data


def run_dir_candidates(directory: Path, which: str = "best") -> list[Path]:
    """The checkpoint files of a run directory in the order :func:`resolve_checkpoint` tries them."""
    if which not in RUN_FILES:
        raise AgileRLError(f"which must be one of {', '.join(RUN_FILES)}; got {which!r}")
    named = [directory / name for name in RUN_FILES[which] if (directory / name).is_file()]
    ckpts = sorted(
        (f for f in directory.glob("checkpoint*.pt") if f.is_file()),
        key=lambda f: (f.stat().st_mtime_ns, f.name),
        reverse=True,
    )
    return named + ckpts


def resolve_checkpoint(path: str | os.PathLike[str], which: str = "best") -> Path:
    """The checkpoint file ``path`` names: itself if a file, else a file of the run directory.

    In a run directory ``which="best"`` picks ``best.pt`` (the best fitness ever seen), ``"last"``
    picks ``last.pt`` (the last evaluated population); each falls back to ``elite.pt`` (runs
    written before ``best.pt`` existed) and then to the other, and finally to the newest
    ``checkpoint*.pt``. (:func:`read_checkpoint` also skips files that are damaged.)
    """
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise checkpoint.no_checkpoint(p)
    found = run_dir_candidates(p, which)
    if found:
        return found[0]
    raise checkpoint.no_checkpoint(p, f"{', '.join(RUN_FILES[which])} and checkpoint*.pt")


def _last(values: Any) -> float | None:
    if not values:
        return None
    v = float(values[-1])
    return v if v == v else None  # NaN -> None


def read_checkpoint(
    path: str | os.PathLike[str], *, member: int | None = None, which: str = "best"
) -> LoadedCheckpoint:
    """Read ``path`` (file or run directory) and pick one agent's state.

    ``member`` selects the agent with that id (its ``index``); by default the agent with the best
    latest fitness (a ``best.pt`` or ``elite.pt`` holds just one). In a run directory a damaged
    file (empty, truncated, failing its digest) is skipped with a warning, for the next one of
    :func:`run_dir_candidates`.
    """
    file = resolve_checkpoint(path, which)
    if Path(path).is_dir():  # a damaged file falls back to the next one, saying so
        file, payload = checkpoint.newest_intact(run_dir_candidates(Path(path), which))
    else:
        payload = checkpoint.load(file)
    agents = payload.get("agents") or []
    if not agents:
        raise AgileRLError(f"{file} holds no agent")
    if member is not None:
        chosen = [a for a in agents if int(a.get("index", -1)) == member]
        if not chosen:
            ids = ", ".join(str(a.get("index")) for a in agents)
            raise AgileRLError(f"{file} has no member {member}; its members are {ids}")
        state = chosen[0]
    else:

        def rank(a: dict[str, Any]) -> float:
            f = _last(a.get("fitness"))
            return -float("inf") if f is None else f

        state = max(agents, key=rank)
    best = payload.get("best") or {}
    return LoadedCheckpoint(
        path=file,
        payload=payload,
        agent_state=state,
        generation=int(best.get("generation", payload.get("generation", 0))),
        fitness=_last(state.get("fitness")),
    )


def load(
    path: str | os.PathLike[str],
    *,
    device: str = "cpu",
    member: int | None = None,
    which: str = "best",
    trust: bool = False,
    manifest: Any = None,
) -> Any:
    """A ready agent from a checkpoint file or a run directory.

    :param path: a ``.pt`` checkpoint (``best.pt``, ``last.pt``, ``elite.pt``, ``checkpoint_*.pt``)
        or a run directory (see :func:`resolve_checkpoint` for which file it reads).
    :param device: torch device to put the agent on (``cpu``, ``cuda``, ``cuda:1``, ``auto``);
        checkpoints are read onto the CPU first, then the agent is built on ``device``.
    :param member: the id of the population member to load (default: the best).
    :param which: in a run directory, ``"best"`` (default), ``"last"`` or ``"elite"``.
    :param trust: import the code the checkpoint's stored manifest names even when it is not
        registered code (see :mod:`agilerl.trust`); only for checkpoints you wrote yourself.
    :param manifest: the manifest to rebuild the agent from instead of the stored one (a path, a
        mapping or a :class:`~agilerl.models.manifest.TrainingManifest`): the code it names is yours.
    :returns: the algorithm object, with ``agent.manifest`` set to the manifest it was trained on
        and ``agent.checkpoint_path`` to the file read.
    """
    loaded = read_checkpoint(path, member=member, which=which)
    if manifest is None:
        # Checked before validation: validating a custom env imports it.
        require_trust(str(loaded.path), loaded.manifest_data, trusted=trust, doing="loading", remedy=LOAD_REMEDY)
        # Where the run logged to (W&B, TensorBoard) does not matter for using the agent, and W&B
        # need not be installed where the agent is used.
        manifest = load_manifest({k: v for k, v in loaded.manifest_data.items() if k != "logging"})
    else:
        manifest = load_manifest(manifest)
        checkpoint.check_same_algorithm(loaded.path, loaded.manifest_data, manifest.to_dict())
    agent = build_member(manifest, loaded.agent_state, device=resolve_device(device), source=loaded.path)
    agent.manifest = manifest
    agent.checkpoint_path = loaded.path
    return agent


@dataclass
class EvalResult:
    """What :func:`evaluate` measured."""

    episodes: list[Episode]
    checkpoint: Path

    @property
    def returns(self) -> list[float]:
        return [e.ret for e in self.episodes]

    @property
    def lengths(self) -> list[int]:
        return [e.length for e in self.episodes]

    @property
    def mean_return(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def std_return(self) -> float:
        return statistics.pstdev(self.returns) if len(self.returns) > 1 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": str(self.checkpoint),
            "episodes": len(self.episodes),
            "mean_return": self.mean_return,
            "std_return": self.std_return,
            "mean_length": statistics.fmean(self.lengths),
            "returns": self.returns,
            "lengths": self.lengths,
        }


def algorithm_and_plugin(agent: Any) -> str:
    """``"Name (from the plugin 'x', dist 1.0)"``, for messages that tell the user whom to ask."""
    name = type(agent).__name__
    manifest = getattr(agent, "manifest", None)
    if manifest is None:
        return name

    name = str(manifest.algorithm.name)
    entry = MANIFEST_REGISTRY.entry_for(manifest.algorithm)
    if entry is None:
        return name
    info = next((i for i in plugin_infos() if i.name == entry.provider), None)
    dist = f", {info.distribution} {info.version}" if info is not None and info.distribution else ""
    return f"{name} (from the plugin {entry.provider!r}{dist})"


def evaluate(
    source: str | os.PathLike[str] | Any,
    *,
    episodes: int = 10,
    seed: int | None = None,
    render: bool = False,
    video: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    member: int | None = None,
    which: str = "best",
    trust: bool = False,
    manifest: Any = None,
) -> EvalResult:
    """Play ``episodes`` greedy episodes with a trained agent on its manifest's environment.

    ``source`` is a checkpoint, a run directory, or an agent from :func:`load`. ``video`` records
    the episodes; ``render`` shows them. Needs an agent that implements
    :class:`EpisodeRunner` (a plugin's algorithm class does so to be evaluable). ``trust`` and
    ``manifest`` are :func:`load`'s.
    """
    if episodes < 1:
        raise AgileRLError(f"episodes must be >= 1, got {episodes}")
    if isinstance(source, (str, os.PathLike)):
        agent = load(source, device=device, member=member, which=which, trust=trust, manifest=manifest)
    else:
        agent = source
        if getattr(agent, "manifest", None) is None:
            raise AgileRLError("evaluate(agent) needs an agent from agilerl.load (it carries its manifest)")
    if not isinstance(agent, EpisodeRunner):
        ckpt = getattr(agent, "checkpoint_path", None) or "CHECKPOINT"
        raise AgileRLError(
            f"agilerl eval cannot play episodes with {algorithm_and_plugin(agent)}. Instead: the scores it "
            f"got while training are in its run directory (agilerl plot RUN_DIR draws them); in Python, "
            f"agilerl.load('{ckpt}').test(env) scores it on an env you make; or ask the plugin's author "
            "to support agilerl eval."
        )
    played = agent.run_episodes(
        agent.manifest.environment,  # type: ignore[attr-defined]
        episodes=episodes,
        seed=seed,
        render=render,
        video=None if video is None else str(video),
    )
    return EvalResult(episodes=list(played), checkpoint=Path(getattr(agent, "checkpoint_path", "") or "."))


__all__ = [
    "Episode",
    "EpisodeRunner",
    "EvalResult",
    "LoadedCheckpoint",
    "PolicyExporter",
    "Predictor",
    "evaluate",
    "load",
    "read_checkpoint",
    "resolve_checkpoint",
    "run_dir_candidates",
]
