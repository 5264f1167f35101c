"""Adam (and RMSprop) for the small networks of RL, without ``torch.optim``'s machinery.

:class:`Adam` computes the very update ``torch.optim.Adam`` computes: the same fused kernel where
torch has one for the device, the same per-tensor maths otherwise; and its ``state_dict`` has
``torch.optim.Adam``'s format, so either loads the other's. Two things are cheaper:

* ``step()`` calls the kernel directly. ``Optimizer.step`` spends about 0.1 ms per call in hooks,
  profiler scopes and per-parameter bookkeeping, as long as the whole update takes for a 64-64 MLP.
* Using it never imports ``torch._dynamo``, which every ``torch.optim`` optimizer imports on first
  use: about 70 MB of resident memory and seconds of start-up in a process that trains a tiny net.

Only plain Adam: no amsgrad, no maximize, L2 ``weight_decay`` as ``torch.optim.Adam`` applies it.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch

__all__ = ["Adam", "FlatAdam", "FlatParameters", "RMSprop", "inference_mode", "no_grad"]

#: Device types with a fused Adam kernel in torch (``torch.utils._foreach_utils`` lists the same).
_FUSED_DEVICES = frozenset({"cpu", "cuda", "mps", "xpu", "hpu", "mtia"})
_FUSED_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16})
#: The hyperparameters a group carries, and the value ``state_dict`` reports for the fixed ones.
_FIXED = {"amsgrad": False, "maximize": False, "foreach": None, "capturable": False, "differentiable": False}
_GRAD = operator.attrgetter("grad")
_F = TypeVar("_F", bound=Callable[..., Any])


#: torch's own grad-mode and inference-mode switches, under its ``no_grad``/``inference_mode``
#: context managers (which add a Python object, and for decorators a clone of it, per call).
_set_grad_enabled = getattr(torch._C, "_set_grad_enabled", None)
_InferenceMode = getattr(torch._C, "_InferenceMode", None)


def no_grad(fn: _F) -> _F:
    """``torch.no_grad()`` as a decorator, a few µs cheaper a call.

    torch's decorator makes and enters a fresh context manager on every call; the learners here
    call such helpers several times per gradient step (the step, the target update, the
    hand-written backward), mostly from inside one ``no_grad`` already, where this one only checks.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return fn(*args, **kwargs)
        if _set_grad_enabled is None:  # pragma: no cover - a torch without the switch
            with torch.no_grad():
                return fn(*args, **kwargs)
        _set_grad_enabled(False)
        try:
            return fn(*args, **kwargs)
        finally:
            _set_grad_enabled(True)

    return wrapper  # type: ignore[return-value]


def inference_mode(fn: _F) -> _F:
    """``torch.inference_mode()`` as a decorator, a few µs cheaper a call (acting runs once per
    vector step); a no-op inside inference mode already (see :func:`no_grad`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        if _InferenceMode is None:  # pragma: no cover - a torch without the guard
            with torch.inference_mode():
                return fn(*args, **kwargs)
        with _InferenceMode(True):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Adam:
    """Adam (Kingma & Ba) over one or more parameter groups; see the module docstring.

    Args:
        params: tensors, or dicts ``{"params": [...], "lr": ...}`` as for ``torch.optim``.
        lr: step size; a group's ``"lr"`` may be changed between steps (learning-rate mutation).
        betas: decay rates of the first and second moment estimates.
        eps: added to the denominator for numerical stability.
        weight_decay: L2 penalty added to the gradient.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Adam: invalid learning rate {lr!r} (must be >= 0)")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Adam: invalid betas {betas!r} (each must be in [0, 1))")
        if not eps >= 0.0 or not weight_decay >= 0.0:
            raise ValueError(f"Adam: eps and weight_decay must be >= 0, got {eps!r} and {weight_decay!r}")
        self.defaults: dict[str, Any] = {
            "lr": float(lr),
            "betas": (float(betas[0]), float(betas[1])),
            "eps": float(eps),
            "weight_decay": float(weight_decay),
        }
        self.param_groups = _param_groups(params, self.defaults, "Adam")
        for group in self.param_groups:
            group["fused"] = _fusable(group["params"])
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        # Per group: (params, exp_avgs, exp_avg_sqs, steps) once every parameter has state.
        self._lists: list[tuple[list[torch.Tensor], ...] | None] = [None] * len(self.param_groups)

    # --- the update -------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (``None`` by default, as ``torch.optim``)."""
        _zero_grad(self.param_groups, set_to_none)

    @no_grad
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        for i, group in enumerate(self.param_groups):
            lists = self._lists[i]
            if lists is not None:  # the common case: every parameter has state and a gradient
                params, exp_avgs, exp_avg_sqs, steps = lists
                grads = [p.grad for p in params]
                if not any(g is None for g in grads):
                    self._update(group, params, grads, exp_avgs, exp_avg_sqs, steps)  # type: ignore[arg-type]
                    continue
            # Only the parameters that have a gradient; state is created on first use.
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self._state_of(p, group) for p in params]
            lists = (params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                     [s["step"] for s in states])  # fmt: skip
            self._update(group, params, [p.grad for p in params], *lists[1:])  # type: ignore[misc]
            if len(params) == len(group["params"]):
                self._lists[i] = lists

    @staticmethod
    def _update(
        group: dict[str, Any],
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> None:
        lr, (beta1, beta2), eps, wd = float(group["lr"]), group["betas"], group["eps"], group["weight_decay"]
        torch._foreach_add_(steps, 1)
        if group["fused"]:
            torch._fused_adam_(
                params, grads, exp_avgs, exp_avg_sqs, [], steps,
                lr=lr, beta1=beta1, beta2=beta2, weight_decay=wd, eps=eps, amsgrad=False, maximize=False,
            )  # fmt: skip
            return
        # torch.optim.Adam's single-tensor maths, in the same order of operations.
        for p, g, m, v, t in zip(params, grads, exp_avgs, exp_avg_sqs, steps, strict=True):
            if wd != 0.0:
                g = g.add(p, alpha=wd)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            n = float(t.item())
            bias_correction1 = 1 - beta1**n
            bias_correction2_sqrt = (1 - beta2**n) ** 0.5
            denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
            p.addcdiv_(m, denom, value=-lr / bias_correction1)

    def _state_of(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The parameter's state, created as ``torch.optim.Adam`` creates it (zeros, step 0)."""
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device if group["fused"] else "cpu"),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
        return state

    # --- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s format: state by parameter index, groups with index lists."""
        return _indexed_state_dict(self.param_groups, self.state, {**_FIXED, "decoupled_weight_decay": False})

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state saved by this class or by ``torch.optim.Adam`` (same layout)."""
        saved = _matching_groups(state_dict, self.param_groups)
        for s in saved:
            unsupported = [k for k in ("amsgrad", "maximize") if s.get(k)]
            if unsupported or s.get("decoupled_weight_decay"):
                raise ValueError(f"loaded optimizer state uses {unsupported or ['decoupled_weight_decay']}, "
                                 "which this Adam does not implement")  # fmt: skip
        by_index: dict[int, tuple[torch.Tensor, bool]] = {}  # saved index -> (parameter, its group is fused)
        for s, group in zip(saved, self.param_groups, strict=True):
            by_index.update((i, (p, group["fused"])) for i, p in zip(s["params"], group["params"], strict=True))
            for key in ("lr", "betas", "eps", "weight_decay"):
                if key in s:
                    group[key] = tuple(s[key]) if key == "betas" else s[key]
        self.state = {}
        for idx, st in state_dict["state"].items():
            p, fused = by_index[int(idx)]
            self.state[p] = {
                "step": torch.as_tensor(st["step"], dtype=torch.float32).clone().to(p.device if fused else "cpu"),
                "exp_avg": st["exp_avg"].to(device=p.device, dtype=p.dtype).clone(),
                "exp_avg_sq": st["exp_avg_sq"].to(device=p.device, dtype=p.dtype).clone(),
            }
        self._lists = [None] * len(self.param_groups)

    # --- copying ----------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lists"] = [None] * len(self.param_groups)  # rebuilt from the state on the next step
        return state

    def __repr__(self) -> str:
        g = self.param_groups[0]
        n = sum(len(g["params"]) for g in self.param_groups)
        return f"Adam(lr={g['lr']}, betas={g['betas']}, eps={g['eps']}, params={n}, fused={g['fused']})"


def _param_groups(params: Iterable[Any], defaults: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """``torch.optim``'s parameter groups: tensors, or dicts ``{"params": [...], ...}`` whose other keys
    override ``defaults``; each parameter in one group only."""
    items: list[Any] = list(params)
    if not items:
        raise ValueError(f"{name} got an empty parameter list")
    groups: list[dict[str, Any]] = [dict(g) for g in items] if isinstance(items[0], dict) else [{"params": items}]
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for group in groups:
        ps = [group["params"]] if isinstance(group["params"], torch.Tensor) else list(group["params"])
        if any(id(p) in seen for p in ps):
            raise ValueError(f"{name}: a parameter appears in more than one group")
        seen.update(id(p) for p in ps)
        out.append({**defaults, **{k: v for k, v in group.items() if k != "params"}, "params": ps})
    return out


def _zero_grad(groups: list[dict[str, Any]], set_to_none: bool) -> None:
    for group in groups:
        for p in group["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()


def _indexed_state_dict(
    groups: list[dict[str, Any]], state: dict[torch.Tensor, dict[str, torch.Tensor]], fixed: dict[str, Any]
) -> dict[str, Any]:
    """``torch.optim``'s checkpoint layout: state by parameter index, groups with index lists and
    the ``fixed`` settings this optimizer does not implement otherwise."""
    index: dict[int, int] = {}
    packed_groups = []
    for group in groups:
        packed = {k: v for k, v in group.items() if k != "params"}
        packed.update(fixed)
        packed["params"] = []
        for p in group["params"]:
            index[id(p)] = len(index)
            packed["params"].append(index[id(p)])
        packed_groups.append(packed)
    return {"state": {index[id(p)]: dict(s) for p, s in state.items()}, "param_groups": packed_groups}


def _matching_groups(state_dict: dict[str, Any], groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The saved groups, checked to have the layout of ``groups`` (as many, each as many parameters)."""
    saved: list[dict[str, Any]] = state_dict["param_groups"]
    if len(saved) != len(groups) or any(
        len(s["params"]) != len(g["params"]) for s, g in zip(saved, groups, strict=True)
    ):
        raise ValueError("loaded optimizer state does not match this optimizer's parameter groups")
    return saved


class RMSprop:
    """RMSprop as ``torch.optim.RMSprop`` computes it (no momentum, not centered, L2 ``weight_decay``),
    without ``torch.optim``: the same per-tensor operations in the same order, so the same bits; the
    same ``state_dict`` format, so either loads the other's. Used by A2C (SB3's default optimizer),
    where ``torch.optim``'s first step would import ``torch._dynamo`` (A2C CartPole's peak RSS: 414 MB with it, 262 without).

    Args:
        params: tensors, or dicts ``{"params": [...], "lr": ...}`` as for ``torch.optim``.
        lr: step size; a group's ``"lr"`` may be changed between steps (learning-rate mutation).
        alpha: decay of the running average of squared gradients.
        eps: added to the denominator's square root.
        weight_decay: L2 penalty added to the gradient.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if not lr >= 0.0 or not 0.0 <= alpha <= 1.0 or not eps >= 0.0 or not weight_decay >= 0.0:
            raise ValueError(f"RMSprop: lr, eps and weight_decay must be >= 0 and alpha in [0, 1]; got lr={lr!r}, "
                             f"alpha={alpha!r}, eps={eps!r}, weight_decay={weight_decay!r}")  # fmt: skip
        self.defaults: dict[str, Any] = {"lr": float(lr), "alpha": float(alpha), "eps": float(eps),
                                         "weight_decay": float(weight_decay)}  # fmt: skip
        self.param_groups = _param_groups(params, self.defaults, "RMSprop")
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (``None`` by default, as ``torch.optim``)."""
        _zero_grad(self.param_groups, set_to_none)

    @no_grad
    def step(self) -> None:
        """One RMSprop update of every parameter that has a gradient."""
        for group in self.param_groups:
            lr, alpha, eps, wd = float(group["lr"]), group["alpha"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = {"step": torch.zeros((), dtype=torch.float32),
                                             "square_avg": torch.zeros_like(p, memory_format=torch.preserve_format)}  # fmt: skip
                state["step"] += 1
                if wd != 0.0:
                    g = g.add(p, alpha=wd)
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).addcmul_(g, g, value=1 - alpha)
                p.addcdiv_(g, square_avg.sqrt().add_(eps), value=-lr)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.RMSprop``'s format."""
        fixed = {"momentum": 0, "centered": False, "capturable": False, "foreach": None, "maximize": False,
                 "differentiable": False}  # fmt: skip
        return _indexed_state_dict(self.param_groups, self.state, fixed)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state saved by this class or by ``torch.optim.RMSprop`` (same layout)."""
        saved = _matching_groups(state_dict, self.param_groups)
        by_index: dict[int, torch.Tensor] = {}
        for s, group in zip(saved, self.param_groups, strict=True):
            if s.get("momentum") or s.get("centered") or s.get("maximize"):
                raise ValueError("loaded optimizer state uses momentum, centered or maximize, which this RMSprop "
                                 "does not implement")  # fmt: skip
            by_index.update(zip(s["params"], group["params"], strict=True))
            group.update({k: s[k] for k in ("lr", "alpha", "eps", "weight_decay") if k in s})
        self.state = {
            by_index[int(i)]: {
                "step": torch.as_tensor(st["step"], dtype=torch.float32).clone(),
                "square_avg": st["square_avg"].to(device=by_index[int(i)].device,
                                                  dtype=by_index[int(i)].dtype).clone(),
            }
            for i, st in state_dict["state"].items()
        }  # fmt: skip

    def __repr__(self) -> str:
        g = self.param_groups[0]
        return f"RMSprop(lr={g['lr']}, alpha={g['alpha']}, eps={g['eps']})"


def _fusable(params: list[torch.Tensor]) -> bool:
    """One fused kernel call can update these: one device that has the kernel, one floating dtype."""
    if not hasattr(torch, "_fused_adam_") or not params:
        return False
    devices, dtypes = {p.device for p in params}, {p.dtype for p in params}
    return (
        len(devices) == 1
        and len(dtypes) == 1
        and next(iter(devices)).type in _FUSED_DEVICES
        and next(iter(dtypes)) in _FUSED_DTYPES
        and not any(p.is_sparse for p in params)
    )


class FlatParameters:
    """Parameters re-seated as views of one contiguous buffer, their gradients as views of another.

    The parameters keep their identity (the modules still hold them); only their storage moves.
    Whole-model operations then cost one kernel each instead of one per tensor: the Adam step
    (:class:`FlatAdam`), the gradient norm and clip (:meth:`clip_grad_norm_`) and a target
    network's Polyak average (:meth:`lerp_`). For the small networks of RL the per-tensor dispatch
    is most of those operations' time.

    Anything that gives a parameter new storage (``copy.deepcopy``, ``.to()``, assigning
    ``.data`` or ``.grad``, ``zero_grad(set_to_none=True)``) breaks the views; :meth:`ensure`
    notices (a pointer comparison) and re-seats them, copying their current values in.

    :param grads: also hold the gradients (off for target networks, which have none). Autograd
        accumulates into an existing gradient in place, so the views survive ``backward``; a
        parameter that got no gradient keeps a zero one (not ``None``).
    """

    def __init__(self, params: Iterable[torch.Tensor], *, grads: bool = True) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("FlatParameters got no parameters")
        first = self.params[0]
        if any(p.dtype != first.dtype or p.device != first.device or p.is_sparse for p in self.params):
            raise ValueError("FlatParameters needs dense parameters of one dtype on one device")
        self.numel = sum(p.numel() for p in self.params)
        self.data = torch.empty(self.numel, dtype=first.dtype, device=first.device)
        self.grad = torch.zeros_like(self.data) if grads else None
        self._ptrs: list[int] = []
        self._grads: list[torch.Tensor] = []
        self.seat()

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` (this buffer's size) cut into one view per parameter, shaped like it."""
        out, start = [], 0
        for p in self.params:
            out.append(flat[start : start + p.numel()].view_as(p))
            start += p.numel()
        return out

    def seat(self) -> None:
        """Point every parameter (and gradient) at its slice of the buffers, keeping its values."""
        with torch.no_grad():
            for p, view in zip(self.params, self.views(self.data), strict=True):
                if p.data_ptr() != view.data_ptr():
                    view.copy_(p.data)
                    p.data = view
            if self.grad is not None:
                for p, view in zip(self.params, self.views(self.grad), strict=True):
                    if p.grad is not view:
                        if p.grad is None:
                            view.zero_()
                        else:
                            view.copy_(p.grad)
                        p.grad = view
                self._grads = [p.grad for p in self.params]  # type: ignore[misc]
        self._ptrs = [p.data_ptr() for p in self.params]

    def intact(self) -> bool:
        """Every parameter (and gradient) still lives in the buffers."""
        # map() over C-level callables: this runs several times per gradient step.
        if list(map(torch.Tensor.data_ptr, self.params)) != self._ptrs:
            return False
        return self.grad is None or all(map(operator.is_, map(_GRAD, self.params), self._grads))

    def ensure(self) -> None:
        """Re-seat the parameters if anything moved them."""
        if not self.intact():
            self.seat()

    def zero_grad(self) -> None:
        self.ensure()
        assert self.grad is not None
        self.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_``'s rule on every gradient at once: scale by
        ``max_norm / (norm + 1e-6)`` when that is below 1. Returns the norm before clipping."""
        self.ensure()
        assert self.grad is not None
        norm = torch.linalg.vector_norm(self.grad)
        if self.grad.device.type == "cpu":  # reading the norm is free here: skip the no-op scaling
            if float(norm) + 1e-6 > max_norm:
                self.grad.mul_(max_norm / (float(norm) + 1e-6))
        else:  # no host sync on an accelerator
            self.grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
        return norm

    @no_grad
    def lerp_(self, source: FlatParameters, weight: float) -> None:
        """``self <- self + weight * (source - self)`` (Polyak averaging; same layout required)."""
        if source.numel != self.numel:
            raise ValueError("lerp_ needs two FlatParameters of the same layout")
        self.ensure()
        source.ensure()
        self.data.lerp_(source.data, weight)


class FlatAdam(Adam):
    """:class:`Adam` over the parameters of a :class:`FlatParameters`, one kernel per step.

    The moments live in two flat buffers laid out like the parameters. ``state_dict`` and
    ``load_state_dict`` still speak ``torch.optim.Adam``'s per-parameter format, so checkpoints of
    either kind load into the other. Every parameter is updated on every step (one with no
    gradient counts as a zero gradient, where ``torch.optim`` would skip it); a single group.
    """

    def __init__(self, flat: FlatParameters, lr: float = 1e-3, **kwargs: Any) -> None:
        if flat.grad is None:
            raise ValueError("FlatAdam needs FlatParameters that hold gradients")
        super().__init__(flat.params, lr=lr, **kwargs)
        self.flat = flat
        self.param_groups[0]["fused"] = _fusable([flat.data])
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), dtype=torch.float32, device=flat.data.device)
        self.started = False  # no state before the first step (as torch.optim)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the flat gradient in place (``set_to_none`` would break the views: ignored)."""
        self.flat.zero_grad()

    @no_grad
    def step(self) -> None:
        flat = self.flat
        flat.ensure()
        assert flat.grad is not None
        # _update advances step_count by one, then applies the update to the whole buffer.
        self._update(self.param_groups[0], [flat.data], [flat.grad], [self.exp_avg], [self.exp_avg_sq],
                     [self.step_count])  # fmt: skip
        self.started = True

    def state_dict(self) -> dict[str, Any]:
        if self.started:
            self.state = {
                p: {"step": self.step_count.clone(), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
                for p, m, v in zip(self.flat.params, self.flat.views(self.exp_avg),
                                   self.flat.views(self.exp_avg_sq), strict=True)
            }  # fmt: skip
        out = super().state_dict()
        self.state = {}
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # checks the layout, sets hyperparameters and self.state
        loaded, self.state = self.state, {}
        self.exp_avg.zero_()
        self.exp_avg_sq.zero_()
        self.step_count.zero_()
        self.started = bool(loaded)
        if not loaded:
            return
        steps = {float(s["step"]) for s in loaded.values()}
        if len(loaded) != len(self.flat.params) or len(steps) != 1:
            raise ValueError("FlatAdam loads only a state in which every parameter took the same number of steps")
        for p, m, v in zip(self.flat.params, self.flat.views(self.exp_avg), self.flat.views(self.exp_avg_sq),
                           strict=True):  # fmt: skip
            m.copy_(loaded[p]["exp_avg"])
            v.copy_(loaded[p]["exp_avg_sq"])
        self.step_count.fill_(steps.pop())
