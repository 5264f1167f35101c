"""Strategies pick and drive the loop that trains a paradigm. One per (paradigm, regime).

The core's evolutionary loop (:func:`agilerl.training.loop.evolutionary_loop`) owns what every
paradigm shares: generations, evaluation, selection and mutation, checkpoints, Ctrl-C, progress and
metrics. A strategy supplies the paradigm's part: how to make the env, how one agent learns for a
number of steps, and how it is evaluated. A paradigm whose training does not fit that shape
overrides :meth:`TrainingStrategy.get_training_loop`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.builders import AlgorithmBuilder
from agilerl.errors import AgileRLError
from agilerl.models.base import AlgorithmSpec
from agilerl.models.env import make_env
from agilerl.protocols import VersionedProtocol, check_algorithm_class
from agilerl.registry import MANIFEST_REGISTRY, STRATEGIES, resolve, strategy_key

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.models.sections import TrainingSpec
    from agilerl.training.run import Run

TrainingLoop = Callable[..., Any]


class TrainingStrategy:
    """Paradigm-keyed run-time orchestration for an algorithm spec."""

    paradigm: ClassVar[str] = ""
    regime: ClassVar[str] = ""
    default_loop: ClassVar[TrainingLoop | str | None] = "agilerl.training.loop:evolutionary_loop"
    #: Unit counted by ``agent.steps`` and ``training.max_steps`` (for progress output).
    step_unit: ClassVar[str] = "step"
    #: True when one member's ``learn``/``evaluate`` reads and writes no state shared with the other
    #: members (only its own agent, and envs it resets from a seed), so members may train in
    #: parallel (``training.backend: ray`` fans them out over workers; otherwise one worker runs
    #: them in order, with :meth:`state_dict` sent there and back).
    independent_members: ClassVar[bool] = False
    #: True when every process of a multi-process launch (``agilerl train --num-processes N``,
    #: torchrun, accelerate launch) runs this strategy in lock step and the processes split its work;
    #: False refuses such a launch (N copies would only repeat one run).
    multi_process: ClassVar[bool] = False
    #: The protocol this strategy needs of the algorithms it trains (checked by ``agilerl validate``
    #: and before a run builds anything, so a plugin algorithm that lacks a method is named, not
    #: found by an AttributeError mid-run). None: the core protocol only.
    algorithm_protocol: ClassVar[VersionedProtocol | None] = None

    # --- seed API ----------------------------------------------------------------------------
    def get_training_loop(self, spec: AlgorithmSpec) -> TrainingLoop:
        """The loop that trains ``spec``: called as ``loop(run, strategy, **trainer_kwargs)``."""
        if self.default_loop is None:
            raise NotImplementedError(f"{type(self).__name__} names no training loop")
        return resolve(self.default_loop, "training loop")  # type: ignore[no-any-return]

    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: Any,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """Extra keyword arguments the training loop takes (none for the core loop)."""
        return {}

    # --- what the core loop calls -----------------------------------------------------------
    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> Any:
        """The training environment (default: ``make_env(manifest.environment, seed=seed)``)."""
        return make_env(manifest.environment, seed=seed)

    def make_eval_env(self, manifest: TrainingManifest, *, seed: int | None, train_env: Any) -> Any:
        """The evaluation environment (default: the training env)."""
        return train_env

    def setup(self, run: Run) -> None:
        """Create shared run state (buffers the population shares, ...) before training starts."""

    def step_limit(self, run: Run) -> int:
        """Steps each agent trains for before the run stops: ``training.max_steps``. A strategy whose
        algorithms read a tighter bound (e.g. a number of passes over a training set) returns it; a run
        it ends reports ``stopped_by: step_limit``."""
        return run.manifest.training.max_steps

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        """Train ``agent`` for about ``num_steps`` steps, advancing ``agent.steps``; return metrics."""
        raise NotImplementedError(f"{type(self).__name__} does not implement learn()")

    def evaluate(self, agent: Any, run: Run) -> float:
        """Fitness of ``agent``: its mean return over ``training.eval_loop`` episodes."""
        t = run.manifest.training
        return float(agent.test(run.eval_env, max_steps=t.eval_steps, loop=t.eval_loop))

    def agree_to_stop(self, run: Run, requested: bool) -> bool:
        """Whether the run stops at this point, given whether this process was asked to (Ctrl-C).

        Called at the same points in every process of a multi-process run; a ``multi_process``
        strategy makes the processes agree (any asked: all stop), so they stop at the same point."""
        return requested

    def after_selection(self, run: Run, population: list[Any]) -> None:
        """Called after selection and mutation replaced the population (release old resources)."""

    def state_dict(self) -> dict[str, Any]:
        """Shared run state to checkpoint (weights-only safe values)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def close(self, run: Run) -> None:
        """Release envs and workers."""
        for env in {id(run.env): run.env, id(run.eval_env): run.eval_env}.values():
            close = getattr(env, "close", None)
            if callable(close):
                close()


def select_strategy(spec: AlgorithmSpec) -> TrainingStrategy:
    """Return the strategy that trains ``spec``, from its ``paradigm`` and ``regime``."""
    if not isinstance(spec, AlgorithmSpec):
        raise TypeError(f"select_strategy needs an AlgorithmSpec, got {type(spec).__name__}")
    entry = MANIFEST_REGISTRY.entry_for(spec)
    override = entry.extra.get("strategy") if entry else None
    if override is not None:
        cls = resolve(override, f"strategy of {spec.name!r}")
    else:
        if not type(spec).paradigm:
            raise AgileRLError(f"{type(spec).__name__} declares no paradigm; set the class variable `paradigm`")
        cls = STRATEGIES.get(type(spec).paradigm, type(spec).regime)
    return cls() if isinstance(cls, type) else cls  # type: ignore[no-any-return]


def joins_another_plugin(spec: AlgorithmSpec) -> bool:
    """Whether ``spec``'s algorithm comes from another plugin than the strategy that trains it (a
    third party joining a paradigm). Reads the registries only: imports no strategy or algorithm."""
    entry = MANIFEST_REGISTRY.entry_for(spec)
    if entry is None or entry.extra.get("strategy") is not None:
        return False  # an algorithm bringing its own strategy speaks its own protocol
    cls = type(spec)
    for key in (strategy_key(cls.paradigm, cls.regime), strategy_key(cls.paradigm, "*")):
        if key in STRATEGIES:
            return STRATEGIES.entry(key).provider != entry.provider
    return False


def check_algorithm(
    spec: AlgorithmSpec, strategy: TrainingStrategy | None = None, *, foreign_only: bool = False
) -> None:
    """Check the algorithm class registered for ``spec`` against its strategy's protocol.

    Imports the algorithm's module (so ``validate_manifest`` itself never calls this: it stays
    torch-free). The trainer checks every algorithm; ``agilerl validate`` passes ``foreign_only``
    and checks only one that joins another plugin's paradigm (a plugin's own algorithms are its
    tests' business, and validating them stays light). Raises :class:`~agilerl.errors.PluginError`
    naming the methods the class lacks.
    """
    if foreign_only and not joins_another_plugin(spec):
        return
    strategy = strategy or select_strategy(spec)
    expected = type(strategy).algorithm_protocol
    if expected is None:
        return
    try:
        cls = AlgorithmBuilder.algo_class(spec)
    except AttributeError:  # registered with a builder of its own and no algorithm class
        return
    if isinstance(cls, type):
        check_algorithm_class(cls, expected, name=spec.name)


__all__ = ["TrainingLoop", "TrainingStrategy", "check_algorithm", "select_strategy"]
