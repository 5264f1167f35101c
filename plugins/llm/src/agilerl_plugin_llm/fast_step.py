"""An optimizer step's bookkeeping without ``torch.optim``'s per-call machinery: the same kernels, fewer µs.

A LoRA adapter on a small model has a few dozen small tensors; its whole AdamW update is one fused
kernel of about 0.1 ms, and its gradient norm two ``foreach`` kernels. Around them,
``Optimizer.step`` and ``clip_grad_norm_`` spend as long again in Python on every call: hooks,
profiler scopes, per-parameter state checks and grouping the tensors by device and dtype. On the
tiny model of ``benchmarks/llm/bench_sft_dpo.py`` that is a tenth of an SFT step. The functions here
make the very calls torch makes, in the same order, so the results are torch's bit for bit
(``tests/test_fast_step.py``), and fall back to torch wherever an assumption does not hold:

* :func:`clip_grad_norm` is ``torch.nn.utils.clip_grad_norm_`` (2-norm, ``foreach``) for gradients
  on one device with one dtype;
* :func:`adamw_step` is ``optimizer.step()`` for a ``torch.optim.AdamW(fused=True)`` with no hooks,
  whose state exists (its first step goes through torch, which creates the state);
* :func:`drop_grads` is ``optimizer.zero_grad(set_to_none=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.optim import optimizer as _optim_module

#: torch's fused AdamW kernel (absent from a torch without it: then every step goes through torch).
_FUSED_ADAMW = getattr(torch, "_fused_adamw_", None)


def _uniform(tensors: Sequence[torch.Tensor]) -> bool:
    """All on one device with one dtype: torch's grouping would make a single group."""
    first = tensors[0]
    device, dtype = first.device, first.dtype
    return all(t.device == device and t.dtype == dtype and not t.is_sparse for t in tensors)


@torch.no_grad()
def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)``: scales the gradients in place so their
    total 2-norm is at most ``max_norm``; returns the norm before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or not _uniform(grads) or grads[0].device.type not in ("cpu", "cuda"):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)
    return total


def _direct(optimizer: torch.optim.Optimizer) -> bool:
    """Whether :func:`adamw_step` may call the fused kernel itself (else ``optimizer.step()``)."""
    if _FUSED_ADAMW is None or type(optimizer) is not torch.optim.AdamW:
        return False
    if optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks:
        return False
    if _optim_module._global_optimizer_pre_hooks or _optim_module._global_optimizer_post_hooks:
        return False
    for group in optimizer.param_groups:
        if not group.get("fused") or group["amsgrad"] or group["maximize"] or group["capturable"]:
            return False
        if group["differentiable"] or isinstance(group["lr"], torch.Tensor):
            return False
    return True


@torch.no_grad()
def adamw_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()`` for a fused ``torch.optim.AdamW``: per group, the step counts go up by one
    and ``torch._fused_adamw_`` updates the parameters that have gradients, as in torch's own step."""
    if not _direct(optimizer):
        optimizer.step()
        return
    batches = []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        states = [optimizer.state.get(p) for p in params]
        if any(not s for s in states):  # the first step: torch creates the moments
            optimizer.step()
            return
        grads = [p.grad for p in params]
        if not _uniform(params) or not _uniform(grads) or grads[0].dtype != params[0].dtype:
            optimizer.step()
            return
        batches.append((group, params, grads, states))
    for group, params, grads, states in batches:
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        _FUSED_ADAMW(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [], steps,
                     amsgrad=False, lr=group["lr"], beta1=float(beta1), beta2=float(beta2),
                     weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
                     grad_scale=None, found_inf=None)  # fmt: skip


def drop_grads(params: Sequence[torch.Tensor]) -> None:
    """``optimizer.zero_grad(set_to_none=True)`` over ``params`` (the optimizer's parameters)."""
    for p in params:
        p.grad = None


__all__ = ["adamw_step", "clip_grad_norm", "drop_grads"]
