"""The ``agilerl`` command line.

Exit codes: 0 success; 1 invalid input (a manifest that fails validation, an unknown name);
2 the command could not run (a missing file, a broken plugin); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agilerl.checkpoint as checkpoint
from agilerl import __version__
from agilerl.checks import device_problems
from agilerl.errors import AgileRLError, ManifestError, Problem, TrainingInterrupted
from agilerl.export import export_policy
from agilerl.inference import evaluate
from agilerl.models.manifest import read_manifest_file, validate_manifest
from agilerl.plot import compare_runs, plot_run
from agilerl.plugins import PluginLoadWarning, get_plugin_manager, plugin_infos
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY, provider_variable
from agilerl.safe_load import loads_yaml
from agilerl.schema import manifest_json_schema, manifest_markdown
from agilerl.strategies import check_algorithm
from agilerl.training import processes
from agilerl.training.metrics import console_handler
from agilerl.training.resume import describe_diff, manifest_diff, require_trust
from agilerl.training.rundir import check_not_in_use, describe_state, resume_point, run_dir_of
from agilerl.training.trainer import LocalTrainer


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _print_rows(rows: list[dict[str, Any]], as_json: bool, line: str) -> None:
    """``rows`` as JSON (``--json``), else one ``line.format(**row)`` per row."""
    if as_json:
        _print_json(rows)
    else:
        for r in rows:
            print(line.format(**r))


def _parse_set(values: Sequence[str]) -> dict[str, Any]:
    """``--set training.max_steps=1000`` -> nested overrides (values parsed as YAML, strictly)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise AgileRLError(f"--set expects SECTION.FIELD=VALUE, got {item!r}")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = loads_yaml(raw, f"--set {key}")
    return out


def _merge(base: dict[str, Any], over: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``over`` (from ``--set``) laid onto ``base``: each override changes what it names and nothing
    more. One that would replace more is refused, naming what it would drop: a mapping replaced by
    a value (``--set algorithm=NAME`` drops every other algorithm field), or a value replaced by a
    mapping (``--set environment.env_config.x=1`` where ``env_config`` names a file). ``null``
    removes what it names (``--set mutation=null``)."""
    merged = dict(base)
    if not prefix and isinstance(merged.get("algorithm"), str) and isinstance(over.get("algorithm"), dict):
        merged["algorithm"] = {"name": merged["algorithm"]}  # `algorithm: NAME` is short for {name: NAME}
    problems: list[Problem] = []
    for k, v in over.items():
        path, old = f"{prefix}{k}", merged.get(k)
        if isinstance(v, dict) and isinstance(old, dict):
            merged[k] = _merge(old, v, f"{path}.")
            continue
        if isinstance(old, dict) and old and v is not None:
            fields = ", ".join(sorted(map(str, old)))
            key = "name" if "name" in old else next(iter(old))
            problems.append(Problem(f"--set {path}", (
                f"would replace the whole {path} mapping ({fields}) with {v!r}; set the field you mean, "
                f"e.g. --set {path}.{key}={v}")))  # fmt: skip
        elif isinstance(v, dict) and old is not None:
            problems.append(Problem(f"--set {path}", (
                f"{path} is {old!r} in the manifest, not a mapping: --set {path}.{next(iter(v), '')} would replace "
                f"it with a mapping; set {path} itself")))  # fmt: skip
        merged[k] = v
    if problems:
        raise ManifestError(problems, source="--set")
    return merged


def _load(path: str, overrides: Sequence[str] = ()) -> Any:
    data = read_manifest_file(path)
    if overrides:
        data = _merge(data, _parse_set(overrides))
    return validate_manifest(data, source=path)


# --------------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        manifest = _load(args.manifest, args.set or ())
        check_algorithm(manifest.algorithm, foreign_only=True)  # a third party's algorithm: its missing methods
    except ManifestError as exc:
        if args.json:
            _print_json({"valid": False, "problems": [{"path": p.path, "message": p.message} for p in exc.problems]})
        else:
            print(str(exc), file=sys.stderr)
        return 1
    except AgileRLError as exc:
        if args.json:
            _print_json({"valid": False, "error": str(exc), "exit_code": exc.exit_code})
        else:
            print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        _print_json({"valid": True, "manifest": manifest.to_dict()})
        return 0
    print(f"{args.manifest}: valid")
    print(describe(manifest))
    return 0


def elapsed(seconds: float) -> str:
    """``"12.3 s"``, ``"4 min 05 s"``, ``"2 h 03 min"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _processes(env: Any) -> str:
    """``", in one process"`` / ``", a process per env"`` for env sections that say (``use_sync``)."""
    sync = getattr(env, "use_sync", None)
    if not isinstance(sync, bool) or (getattr(env, "num_envs", 1) or 1) < 2:
        return ""
    return ", in one process" if sync else ", a process per env"


def describe(manifest: Any) -> str:
    """A short human summary of a validated manifest."""
    algo, env, t = manifest.algorithm, manifest.environment, manifest.training
    entry = MANIFEST_REGISTRY.entry(algo.name)
    lines = [
        f"  algorithm   {algo.name} ({type(algo).paradigm}/{type(algo).regime}, from {entry.provider})",
        f"  environment {env.label} (env_type {env.env_type}, num_envs {getattr(env, 'num_envs', None)}"
        + _processes(env)
        + ")",
        f"  training    max_steps {t.max_steps}, evo_steps {manifest.evo_steps}, pop_size {t.pop_size}"
        + (f", target_score {t.target_score}" if t.target_score is not None else ""),
        f"  evolution   {'on' if manifest.hpo else 'off'}",
    ]
    changed = algo.model_dump(exclude_defaults=True)
    if changed:
        lines.append("  set fields  " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
    return "\n".join(lines)


def cmd_train(args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {}
    if args.run_dir:
        kwargs["run_dir"] = args.run_dir
    if args.no_progress:
        kwargs["progress"] = False
    if args.device:
        problems = device_problems(args.device, "--device")
        if problems:
            raise ManifestError(problems)
        kwargs["device"] = args.device
    if args.overwrite:
        kwargs["overwrite"] = True

    resumed = Path(args.resume) if args.resume else None
    if resumed is not None and resumed.is_file():
        resumed = run_dir_of(resumed)  # a checkpoint in a run dir resumes into that dir
    for busy in (args.run_dir, resumed if resumed is not None and resumed.is_dir() else None):
        if busy:  # refuse at once, before a checkpoint another run may be rotating is read
            check_not_in_use(Path(busy))

    if args.num_processes < 1:
        raise AgileRLError(f"--num-processes must be at least 1, got {args.num_processes}")
    launching = args.num_processes > 1 and "WORLD_SIZE" not in os.environ  # not yet inside a launch
    if not processes.is_main_process():
        kwargs["progress"] = False  # rank 0 owns the terminal
    if args.resume:
        trainer = _resume_trainer(args, kwargs, quiet=launching)
    elif args.manifest:
        manifest = _load(args.manifest, args.set or ())
        trainer = LocalTrainer(manifest, **kwargs)
    else:
        raise AgileRLError("agilerl train needs a manifest path, or --resume CHECKPOINT")
    if launching:  # validated here, before any process starts; each process validates again
        processes.require_multi_process(trainer.strategy, trainer.manifest.algorithm.name, args.num_processes)
        return processes.launch(args.argv, args.num_processes)
    if args.num_processes > 1 and processes.world_size() != args.num_processes:
        raise AgileRLError(
            f"--num-processes {args.num_processes} inside a launch of {processes.world_size()} processes "
            "(WORLD_SIZE is set: torchrun or accelerate launch started this one); drop --num-processes"
        )
    started = time.perf_counter()
    result = trainer.train()
    if not processes.is_main_process():
        return 0
    best = result.population[0]
    if result.complete:
        print(f"the run in {result.run_dir} is already complete (stopped by {result.stopped_by}); nothing was trained")
    print(
        f"done: {result.generations} generation(s) in {elapsed(time.perf_counter() - started)}, stopped by "
        f"{result.stopped_by}; best agent {best.index} fitness {result.fitnesses[0]:.4g} after {best.steps} steps"
    )
    print(f"run directory: {result.run_dir}")
    if result.best_path and result.best_info:
        info = result.best_info
        print(
            f"best ever: member {info['member']} fitness {info['fitness']:.4g} in generation {info['generation']}, "
            f"saved to {result.best_path}"
        )
    if result.last_path:
        print(f"last generation saved to: {result.last_path}")
    if result.elite_path:
        print(f"elite saved to: {result.elite_path}")
    if result.checkpoint_path:
        print(f"last checkpoint: {result.checkpoint_path}")
    return 0


def _resume_trainer(args: argparse.Namespace, kwargs: dict[str, Any], *, quiet: bool = False) -> Any:
    """``--resume``: the manifest file given (or the checkpoint's own, if it names no code or is
    trusted), with ``--set`` applied; prints which fields differ from the stored manifest."""
    path, payload = resume_point(Path(args.resume))  # a checkpoint, or the run directory's newest state
    if path != Path(args.resume) and not quiet:
        print(f"resuming from {path} (the newest state in {args.resume}: {describe_state(payload)})", file=sys.stderr)
    args.resume = str(path)
    stored = payload.get("manifest") or {}
    if args.manifest:
        data, source = read_manifest_file(args.manifest), args.manifest
        checkpoint.check_same_algorithm(args.resume, stored, data)
    else:
        # Checked before validation: validating a custom env imports it.
        require_trust(args.resume, stored, trusted=args.trust_checkpoint)
        data, source = stored, f"{args.resume} (its stored manifest)"
    if args.set:
        data = _merge(data, _parse_set(args.set))
    manifest = validate_manifest(data, source=source)
    if not quiet:  # (a launcher's processes print it)
        print(describe_diff(manifest_diff(stored, manifest.to_dict())), file=sys.stderr)
    trainer = LocalTrainer(manifest, resume_from=args.resume, resume_payload=payload, **kwargs)
    if not quiet:
        print(f"continuing the run in {trainer.run_dir}", file=sys.stderr)  # where it writes, before it does
    return trainer


def cmd_eval(args: argparse.Namespace) -> int:
    result = evaluate(
        args.source,
        episodes=args.episodes,
        seed=args.seed,
        render=args.render,
        video=args.video,
        device=args.device,
        member=args.member,
        which=args.which,
        trust=args.trust_checkpoint,
        manifest=args.manifest,
    )
    if args.json:
        _print_json(result.as_dict())
        return 0
    lengths = result.lengths
    print(f"checkpoint: {result.checkpoint}")
    print(
        f"{len(lengths)} episode(s): return {result.mean_return:.4g} +/- {result.std_return:.3g} "
        f"(min {min(result.returns):.4g}, max {max(result.returns):.4g}); "
        f"length mean {sum(lengths) / len(lengths):.1f} (min {min(lengths)}, max {max(lengths)})"
    )
    if args.video:
        print(f"video: {args.video}")
    return 0


def cmd_export_policy(args: argparse.Namespace) -> int:
    out = export_policy(
        args.source, format=args.format, output=args.output, member=args.member, which=args.which,
        trust=args.trust_checkpoint, manifest=args.manifest,
    )  # fmt: skip
    print(f"wrote {out} (input 'observation': a batch of raw observations; output 'action')")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    text = manifest_markdown().rstrip("\n") if args.markdown else json.dumps(manifest_json_schema(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from _agilerl_guard import foreign_agilerl

    clash = foreign_agilerl()
    if clash:
        print(f"warning: {clash}", file=sys.stderr)
    infos = plugin_infos()
    clashes = _clashes()
    if args.json:
        rows = [i.as_dict() for i in infos]
        for row in rows:
            row["clashes"] = [{"kind": kind, "name": name, "providers": who} for kind, name, who in clashes
                              if row["name"] in who]  # fmt: skip
        _print_json(rows)
        return 0
    if not infos:
        print("no plugins installed (pip install an agilerl plugin: see docs/user-guide.md)")
    width = max([10, *(len(i.name) for i in infos)])
    for i in infos:
        status = f"FAILED: {i.error}" if i.error else ", ".join(i.hooks)
        print(f"{i.name:<{width}} {i.distribution or '-'} {i.version or ''}  [{status}]")
    for kind, name, who in clashes:
        print(
            f"clash: {kind} {name!r} is registered by {' and '.join(map(repr, who))}: only that name is ambiguous; "
            f"pick one with name: {who[0]}:{name} in the manifest or {provider_variable(name)}={who[0]}"
        )
    return 0


def _clashes() -> list[tuple[str, str, list[str]]]:
    """``(kind, name, providers)`` for each name two plugins register (algorithms, env types)."""
    return [
        (table.kind, name, who) for table in (MANIFEST_REGISTRY, ENV_TYPES) for name, who in table.clashes().items()
    ]


def cmd_algorithms(args: argparse.Namespace) -> int:
    rows = [
        {"name": e.key, "spec": f"{e.value.__module__}.{e.value.__qualname__}", "paradigm": e.value.paradigm,
         "regime": e.value.regime, "env_type": e.value.default_env_type, "provider": e.provider,
         "ambiguous": e.extra.get("ambiguous")}
        for e in MANIFEST_REGISTRY.entries()
        if not e.value.not_supported  # known names a plugin refuses: not trainable, not listed
    ]  # fmt: skip
    _print_rows(rows, args.json, "{name:<14} {paradigm}/{regime:<12} env_type={env_type:<8} ({provider})")
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    rows = [
        {"env_type": e.key, "spec": e.value.spec_cls.__name__, "provider": e.provider,
         "functions": sorted(e.value.functions)}
        for e in ENV_TYPES.entries()
    ]  # fmt: skip
    _print_rows(rows, args.json, "{env_type:<10} {spec:<16} ({provider})")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    out = plot_run(args.run_dir, args.output)
    print(f"wrote {out}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    out = compare_runs(args.run_dirs, args.output)
    print(f"wrote {out}")
    return 0


# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agilerl", description="Train RL agents from a validated manifest.")
    parser.add_argument("--version", action="version", version=f"agilerl {__version__}")
    _add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("train", help="train from a manifest (or resume a checkpoint)")
    p.add_argument("manifest", nargs="?", help="YAML or JSON manifest")
    p.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        help="continue from a checkpoint file (or a run dir: its newest state by generation and step count)",
    )
    p.add_argument("--run-dir", help="where metrics and the elite go")
    p.add_argument("--device", help="cpu, cuda, auto (overrides training.device)")
    p.add_argument("--no-progress", action="store_true", help="no progress output")
    p.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help="override a manifest field")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --run-dir")
    p.add_argument(
        "--num-processes", type=int, default=1, metavar="N",
        help="train in N local processes that split each step's work (algorithms whose strategy supports it)",
    )  # fmt: skip
    p.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="with --resume and no manifest: import the code the checkpoint's stored manifest names",
    )
    p.set_defaults(handler=cmd_train)

    p = sub.add_parser("validate", help="validate a manifest (exit 0 valid, 1 invalid, 2 could not run)")
    p.add_argument("manifest")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help="override a manifest field")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("schema", help="print the manifest's JSON Schema (all registered algorithms and envs)")
    p.add_argument("-o", "--output", help="write to a file")
    p.add_argument("--markdown", action="store_true", help="the reference page (docs/reference/manifest.md) instead")
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("plugins", help="list plugins, versions and hooks")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_plugins)

    p = sub.add_parser("algorithms", help="list registered algorithms")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_algorithms)

    p = sub.add_parser("envs", help="list registered environment types")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_envs)

    p = sub.add_parser("plot", help="write a PNG learning curve for a run directory")
    p.add_argument("run_dir")
    p.add_argument("-o", "--output", help="PNG path (default RUN_DIR/learning_curve.png)")
    p.set_defaults(handler=cmd_plot)

    p = sub.add_parser("compare", help="overlay the learning curves of several runs in one PNG")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("-o", "--output", default="compare.png", help="PNG path (default compare.png)")
    p.set_defaults(handler=cmd_compare)

    def _pick(q: argparse.ArgumentParser) -> None:
        q.add_argument("source", metavar="RUN_OR_CKPT", help="a run directory or a checkpoint file")
        q.add_argument("--member", type=int, help="population member id to use (default: the best)")
        q.add_argument(
            "--which", choices=["best", "last", "elite"], default="best",
            help="in a run directory: best.pt (best ever, default), last.pt or elite.pt",
        )  # fmt: skip
        q.add_argument(
            "--manifest", metavar="MANIFEST", help="rebuild the agent from this manifest, not the stored one"
        )
        q.add_argument(
            "--trust-checkpoint", action="store_true",
            help="import the code the checkpoint's stored manifest names (custom env, wrappers) even if no plugin "
            "registers it",
        )  # fmt: skip

    p = sub.add_parser("eval", help="play evaluation episodes with a trained agent")
    _pick(p)
    p.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    p.add_argument("--seed", type=int, help="seed of the first episode (episode i: seed + i)")
    p.add_argument("--render", action="store_true", help="show the episodes (render_mode=human)")
    p.add_argument("--video", metavar="OUT.mp4", help="record the episodes (an mp4 file)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=cmd_eval)

    p = sub.add_parser("export-policy", help="write the policy network as ONNX or TorchScript")
    _pick(p)
    p.add_argument("--format", choices=["onnx", "torchscript"], default="onnx")
    p.add_argument("-o", "--output", help="output file (default RUN/policy.onnx or RUN/policy.pt)")
    p.set_defaults(handler=cmd_export_policy)

    for action in sub.choices.values():
        _add_verbosity(action, suppress=True)
    return parser


def _add_verbosity(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    default: Any = argparse.SUPPRESS if suppress else 0
    parser.add_argument("-q", "--quiet", action="count", default=default, help="less output (warnings only)")
    parser.add_argument("-v", "--verbose", action="count", default=default, help="more output (debug)")


def _add_plugin_commands(parser: argparse.ArgumentParser) -> None:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    get_plugin_manager().hook.agilerl_register_commands(subparsers=sub)


def _show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    from tqdm import tqdm

    text = str(message)
    if not sys.stderr.isatty():  # libraries colour their warnings; a log file gets plain text
        text = strip_ansi(text)
    tqdm.write(f"warning: {text}", file=sys.stderr)  # above a progress bar, never through it


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    return _ANSI.sub("", text)


def _log_level(argv: Sequence[str]) -> int:
    """-q/-v anywhere before a bare ``--``: INFO by default, WARNING with -q, DEBUG with -v."""
    import logging

    quiet = verbose = 0
    for a in argv:
        if a == "--":
            break
        if a in ("-q", "--quiet"):
            quiet += 1
        elif a in ("-v", "--verbose"):
            verbose += 1
        elif a.startswith("-") and not a.startswith("--") and set(a[1:]) <= {"q", "v"}:
            quiet += a.count("q")
            verbose += a.count("v")
    if quiet > verbose:
        return logging.WARNING if quiet - verbose == 1 else logging.ERROR
    return logging.DEBUG if verbose > quiet else logging.INFO


def main(argv: Sequence[str] | None = None) -> int:
    import logging
    import warnings

    argv = list(sys.argv[1:] if argv is None else argv)
    level = _log_level(argv)
    logger = logging.getLogger("agilerl")
    handler = console_handler(level)
    old_level = logger.level
    # Ours replace a console handler left by earlier library use (no line printed twice).
    ours = [h for h in logger.handlers if getattr(h, "agilerl_console", False)]
    for h in ours:
        logger.removeHandler(h)
    logger.addHandler(handler)
    logger.setLevel(level)
    old_show = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", PluginLoadWarning)
            warnings.showwarning = _show_warning
            return _main(argv)
    except BrokenPipeError:
        # `agilerl ... | head` closed our stdout: stop quietly, as Unix tools do.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    finally:
        warnings.showwarning = old_show
        logger.removeHandler(handler)
        for h in ours:
            logger.addHandler(h)
        logger.setLevel(old_level)


def _main(argv: list[str]) -> int:
    parser = build_parser()
    core_commands = {
        "train", "validate", "schema", "plugins", "algorithms", "envs", "plot", "compare", "eval", "export-policy",
    }  # fmt: skip
    try:
        # Plugin commands load plugins; core commands load them only when they need a registry.
        first = next((a for a in argv if a not in {"-q", "--quiet", "-v", "--verbose"}), None)
        if first is None or first not in core_commands | {"-h", "--help", "--version"} or first in {"-h", "--help"}:
            _add_plugin_commands(parser)
        args = parser.parse_args(argv)
        args.argv = list(argv)  # `agilerl train --num-processes N` starts the same command N times
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        return int(args.handler(args) or 0)
    except TrainingInterrupted as exc:  # the user's choice, not an error: what was kept and how to go on
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except AgileRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise
    except Exception as exc:  # a bug or an unexpected failure: one line, traceback on demand
        if os.environ.get("AGILERL_TRACEBACK"):
            raise
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("(set AGILERL_TRACEBACK=1 to see the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
