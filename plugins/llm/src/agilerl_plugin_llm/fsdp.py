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

from collections.abc import Mapping
from typing import Any

import torch

from agilerl_plugin_llm.distributed import comm_device

# The field and the launcher's flags are read without torch (validation imports only that module).
from agilerl_plugin_llm.fsdp_config import UPSTREAM_DEFAULTS, env_problems, field_problems, settings


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
