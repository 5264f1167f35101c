"""FSDP2 sharding of the policy (``torch.distributed.fsdp.fully_shard``) over every process of a launch.

Asked for by AgileRL's ``fsdp`` field (``true`` or a mapping of its ``FSDPConfig`` fields) or by
``accelerate launch --use_fsdp --fsdp_version 2``. Each transformer block (the model's
``_no_split_modules``, or accelerate's ``--fsdp_transformer_layer_cls_to_wrap``) becomes one FSDP unit
and the root one more; parameters become ``DTensor`` shards, so each process holds ``1/N`` of the
weights, gradients and AdamW moments. The processes still run in lock step (see
:mod:`agilerl_plugin_llm.distributed`): every forward of one is a forward of all (FSDP all-gathers a
unit's weights as it runs), so a process with fewer rows in a step runs a zero-weight micro-batch
rather than skip one. Gradients are reduce-scattered as sums (the loss is already normalised by the
whole step's units), so N processes take the same optimizer steps as one.

In one process there is nothing to shard and the model runs as it loads. Checkpoints hold full
tensors (gathered from the shards), the same as an unsharded run's, so they resume with any number
of processes and ``agilerl export`` reads them as any other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

#: AgileRL's ``FSDPConfig`` fields and defaults (``agilerl.arena.models.fsdp``).
UPSTREAM_DEFAULTS: dict[str, Any] = {
    "reshard_after_forward": True,
    "cpu_offload": False,
    "optim_cpu_offload": True,
    "defer_grad_sync": True,
    "param_dtype": "bfloat16",
    "reduce_dtype": "float32",
    "prefetch_units": 1,
    "backward_prefetch_units": 1,
    "checkpoint_skip_layer_types": [],
    "checkpoint_every_n_blocks": 1,
    "wrap_every_n_blocks": 1,
    "param_persistence_threshold": 100000,
    "ep": 1,
    "ep_token_blocks": 1,
    "tp": 1,
    "shard_group_size": None,
    "compile_blocks": False,
    "compile_backend": "inductor",
}

#: Fields whose only value here is the one shown (with why).
_ONLY: dict[str, tuple[Any, str]] = {
    "cpu_offload": (False, "CPU offload of sharded parameters is not implemented"),
    "prefetch_units": (1, "FSDP2's own prefetch (one unit ahead) is the only one here"),
    "backward_prefetch_units": (1, "FSDP2's own prefetch (one unit ahead) is the only one here"),
    "checkpoint_skip_layer_types": (
        [],
        "per-block activation checkpointing choices are not implemented "
        "(gradient_checkpointing checkpoints every block)",
    ),
    "checkpoint_every_n_blocks": (1, "per-block activation checkpointing choices are not implemented"),
    "wrap_every_n_blocks": (1, "one FSDP unit per transformer block is the only wrapping here"),
    "ep": (1, "expert parallelism is not implemented"),
    "ep_token_blocks": (1, "expert parallelism is not implemented"),
    "tp": (1, "tensor parallelism is not implemented"),
    "compile_blocks": (False, "torch.compile of the blocks is not implemented"),
    "param_dtype": ("float32", "mixed-precision FSDP is not implemented (weights train in float32 here)"),
    "reduce_dtype": ("float32", "mixed-precision FSDP is not implemented (gradients reduce in float32 here)"),
}


def field_problems(value: Any) -> list[str]:
    """Why the manifest's ``fsdp`` value cannot run here (empty: it can, or it is off)."""
    if value in (None, False):
        return []
    if value is True:
        value = {}
    if not isinstance(value, Mapping):
        return [f"fsdp: expected true, false or a mapping of FSDPConfig fields, got {value!r}"]
    problems = []
    settings = {**UPSTREAM_DEFAULTS, **dict(value)}
    for key in value:
        if key not in UPSTREAM_DEFAULTS:
            problems.append(f"fsdp.{key}: not an FSDPConfig field (known: {', '.join(sorted(UPSTREAM_DEFAULTS))})")
    for key, (only, why) in _ONLY.items():
        if settings[key] != only:
            default = " (AgileRL's default; set it explicitly)" if key not in value else ""
            problems.append(f"fsdp.{key}: {settings[key]!r}{default} cannot run here: {why}; use {only!r}")
    threshold = settings["param_persistence_threshold"]
    if not isinstance(threshold, int) or threshold < 0:
        problems.append(f"fsdp.param_persistence_threshold: expected an integer >= 0, got {threshold!r}")
    group = settings["shard_group_size"]
    if group is not None and (not isinstance(group, int) or group < 1):
        problems.append(f"fsdp.shard_group_size: expected null or an integer >= 1, got {group!r}")
    return problems


def _flag(env: Mapping[str, str], key: str, default: str = "false") -> bool:
    return env.get(key, default).strip().lower() in ("true", "1", "yes")


def env_problems(env: Mapping[str, str]) -> list[str]:
    """What an ``accelerate launch --use_fsdp`` asked for that this sharding does not do."""
    if not _flag(env, "ACCELERATE_USE_FSDP"):
        return []
    out = []
    version = env.get("FSDP_VERSION", "1").strip()
    if version != "2":
        out.append(f"accelerate launch --use_fsdp with fsdp_version {version}: FSDP1 (FullyShardedDataParallel) "
                   "is not implemented; pass --fsdp_version 2 (FSDP2, fully_shard)")  # fmt: skip
    reshard = env.get("FSDP_RESHARD_AFTER_FORWARD", "true").strip()
    if reshard.upper() not in ("TRUE", "FALSE", "FULL_SHARD", "SHARD_GRAD_OP", "1", "0"):
        out.append(f"--fsdp_reshard_after_forward {reshard}: only true/false (FULL_SHARD/SHARD_GRAD_OP) run here")
    policy = env.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP").strip().upper()
    if policy not in ("TRANSFORMER_BASED_WRAP", "NO_WRAP"):
        out.append(f"--fsdp_auto_wrap_policy {policy}: only TRANSFORMER_BASED_WRAP (one unit per transformer "
                   "block) and NO_WRAP (the root alone) are implemented")  # fmt: skip
    for key, flag, why in (
        ("FSDP_OFFLOAD_PARAMS", "--fsdp_offload_params", "CPU offload of sharded parameters is not implemented"),
        ("FSDP_ACTIVATION_CHECKPOINTING", "--fsdp_activation_checkpointing",
         "use algorithm.gradient_checkpointing: true instead"),
        ("FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD", "--fsdp_activation_checkpointing_offload",
         "activation offloading is not implemented"),
    ):  # fmt: skip
        if _flag(env, key):
            out.append(f"{flag} true: {why}")
    state = env.get("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT").strip().upper()
    if state != "FULL_STATE_DICT":
        out.append(f"--fsdp_state_dict_type {state}: checkpoints here always hold full tensors (FULL_STATE_DICT)")
    if env.get("FSDP_IGNORED_MODULES"):
        out.append("--fsdp_ignored_modules: not implemented (every module is sharded)")
    return out


def settings(spec_value: Any, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The sharding to apply (None: none). The manifest's ``fsdp`` field wins over accelerate's flags."""
    env = dict(os.environ) if env is None else env
    launched = _flag(env, "ACCELERATE_USE_FSDP")
    if spec_value in (None, False) and not launched:
        return None
    out: dict[str, Any] = {"reshard_after_forward": True, "defer_grad_sync": True, "param_persistence_threshold": 0,
                           "shard_group_size": None, "optim_cpu_offload": False, "wrap": None,
                           "auto_wrap": True}  # fmt: skip
    if launched:
        reshard = env.get("FSDP_RESHARD_AFTER_FORWARD", "true").strip().upper()
        out["reshard_after_forward"] = reshard in ("TRUE", "FULL_SHARD", "1")
        classes = env.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").strip()
        out["wrap"] = [c.strip() for c in classes.split(",") if c.strip()] or None
        out["auto_wrap"] = env.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP").strip().upper() != "NO_WRAP"
    if spec_value not in (None, False):
        given = {} if spec_value is True else dict(spec_value)
        full = {**UPSTREAM_DEFAULTS, **given}
        for key in (
            "reshard_after_forward",
            "defer_grad_sync",
            "param_persistence_threshold",
            "shard_group_size",
            "optim_cpu_offload",
        ):
            out[key] = full[key]
    return out


def is_sharded(model: Any) -> bool:
    """Whether ``fully_shard`` was applied to ``model``."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _blocks(model: Any, names: list[str] | None) -> list[torch.nn.Module]:
    if names is None:
        found: set[str] = set()
        for module in model.modules():
            found.update(getattr(module, "_no_split_modules", None) or ())
        names = sorted(found)
    wanted = set(names)
    blocks = [m for m in model.modules() if type(m).__name__ in wanted]
    if not blocks:
        from agilerl.errors import AgileRLError

        raise AgileRLError(f"FSDP: no transformer block of class {', '.join(sorted(wanted)) or '(none named)'} "
                           f"in {type(model).__name__}; name it with --fsdp_transformer_layer_cls_to_wrap")  # fmt: skip
    return blocks


def shard(model: Any, config: Mapping[str, Any]) -> Any:
    """Apply ``fully_shard`` to each transformer block and then to the root ``model`` (in place)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

    world = dist.get_world_size()
    group = config.get("shard_group_size") or world
    if group != world:
        from agilerl.errors import AgileRLError

        raise AgileRLError(f"fsdp.shard_group_size {group}: hybrid sharding (HSDP) is not implemented; "
                           f"weights shard across all {world} processes (leave it null)")  # fmt: skip
    device = "cuda" if next(model.parameters()).is_cuda else "cpu"
    if device == "cuda" and config.get("optim_cpu_offload"):
        from agilerl.errors import AgileRLError

        # On CPU the AdamW state is on the CPU anyway; on a GPU moving it there is not implemented.
        raise AgileRLError(
            "fsdp.optim_cpu_offload: true (AgileRL's default) is not implemented on CUDA; set it to false"
        )
    mesh = init_device_mesh(device, (world,))
    threshold = int(config.get("param_persistence_threshold") or 0)
    ignored = {p for p in model.parameters() if p.numel() < threshold} or None
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": bool(config.get("reshard_after_forward", True))}
    if config.get("auto_wrap", True):
        for block in _blocks(model, config.get("wrap")):
            fully_shard(block, ignored_params=ignored, **kwargs)
    fully_shard(model, ignored_params=ignored, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # Sums, not means: each process's loss is already a share of the whole step's mean.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    model.agilerl_fsdp = True  # read by the code that would call the decoder or lm_head directly
    if hasattr(model, "get_base_model"):
        model.get_base_model().agilerl_fsdp = True
    if hasattr(model, "peft_config"):
        # peft's generate calls the inner model, past the root's hooks: let it gather the root's weights.
        register_fsdp_forward_method(model, "generate")
    return model


def is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a shard (an all-gather: every process calls it), or ``t`` itself."""
    return t.full_tensor() if is_dtensor(t) else t  # type: ignore[attr-defined,no-any-return]


def like(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``value`` (a whole tensor, the same on every process) as ``param``'s shard when it is one."""
    if not is_dtensor(param):
        return value.to(param.device, param.dtype)
    from torch.distributed.tensor import distribute_tensor

    v = value.to(param.device, param.dtype)
    return distribute_tensor(v, param.device_mesh, param.placements, src_data_rank=None)  # type: ignore[attr-defined]


def full_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer ``state_dict`` with whole tensors in place of shards (collective)."""
    return {**state, "state": {k: {n: full(v) if isinstance(v, torch.Tensor) else v for n, v in s.items()}
                               for k, s in state["state"].items()}}  # fmt: skip


def own_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """After ``load_state_dict``: give every moment its own tensor (``load_state_dict`` keeps the ones
    it is given, so a clone would step its parent's moments), as its parameter's shard when that is one."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            for name, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor):
                    continue
                if is_dtensor(p) and not is_dtensor(value) and value.shape == p.shape:
                    optimizer.state[p][name] = like(value, p)  # a whole moment from a checkpoint: its shard
                else:
                    optimizer.state[p][name] = value.clone()


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """``clip_grad_norm_`` over sharded and unsharded parameters together (the norm of the whole gradient)."""
    import torch.distributed as dist

    from agilerl_plugin_llm.distributed import comm_device

    device = next((p.grad.device for p in params if p.grad is not None), comm_device())
    sharded = torch.zeros((), dtype=torch.float32, device=device)
    plain = torch.zeros((), dtype=torch.float32, device=device)
    for p in params:
        if p.grad is None:
            continue
        if is_dtensor(p.grad):
            sharded += p.grad.to_local().float().pow(2).sum()  # type: ignore[attr-defined]
        else:
            plain += p.grad.float().pow(2).sum()
    dist.all_reduce(sharded, op=dist.ReduceOp.SUM)  # shards are disjoint; plain grads are the same everywhere
    norm = float((sharded + plain).sqrt())
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return norm


__all__ = [
    "UPSTREAM_DEFAULTS",
    "clip_grad_norm",
    "env_problems",
    "field_problems",
    "full",
    "full_optimizer_state",
    "is_dtensor",
    "is_sharded",
    "like",
    "settings",
    "shard",
    "own_optimizer_state",
]
