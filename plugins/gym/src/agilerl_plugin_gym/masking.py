"""Action masks: which discrete actions an env allows now, and the policy logits restricted to them.

An env says which actions are legal in one of three ways (the first that applies is used):

* ``info["action_mask"]`` after ``reset``/``step`` (AgileRL's convention);
* an ``"action_mask"`` key of a Dict observation (PettingZoo's classic envs; the key is taken out
  of the observation before the policy sees it);
* an ``action_masks()`` method (sb3-contrib's ``MaskablePPO`` convention).

A mask is a boolean array with one row per env and one column per action (``True``: allowed); for
MultiDiscrete actions the columns are every dimension's choices side by side. The algorithm's
``action_masking: true`` turns masking on; an env that gives masks to an algorithm without it, or
none to one with it, is an error naming both sides (:func:`check_masking`).

PettingZoo envs (IPPO) report a mask per agent: ``infos[agent]["action_mask"]`` or the
``action_mask`` key of the agent's Dict observation (PettingZoo's ``{"observation", "action_mask"}``;
the policy then sees the rest, :func:`policy_space` / :func:`policy_observation`). The PettingZoo
vector env carries them as ``infos["action_mask"][agent]`` (:mod:`agilerl_plugin_gym.multi_agent.vec_env`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.errors import AgileRLError

if TYPE_CHECKING:
    import torch

__all__ = [
    "MASK_KEY",
    "MaskSource",
    "check_masking",
    "mask_logits",
    "policy_observation",
    "policy_space",
    "strip_mask_key",
]

MASK_KEY = "action_mask"
#: The logit of a masked action: its probability is exactly 0 and ``0 * log p`` stays finite (an
#: ``-inf`` would make the entropy NaN).
MASKED_LOGIT = -1e8

_SOURCES = f"info['{MASK_KEY}'], a Dict observation's '{MASK_KEY}' key, or an action_masks() method"


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with every disallowed action's logit set to :data:`MASKED_LOGIT` (``mask`` None: as is)."""
    if mask is None:
        return logits
    import torch  # deferred: validation (check_env) reads the mask sources without torch

    return logits.masked_fill(~mask.to(device=logits.device, dtype=torch.bool), MASKED_LOGIT)


def strip_mask_key(obs: Any) -> Any:
    """A Dict observation without its ``action_mask`` key (others as they are)."""
    if isinstance(obs, Mapping) and MASK_KEY in obs:
        return {k: v for k, v in obs.items() if k != MASK_KEY}
    return obs


def policy_space(space: Any) -> Any:
    """The observation space a multi-agent policy sees: a Dict's ``action_mask`` key taken out, and
    a Dict left with PettingZoo's ``observation`` key alone unwrapped to that space."""
    from gymnasium import spaces  # deferred: mask_logits and the checks need no gymnasium

    if not (isinstance(space, spaces.Dict) and MASK_KEY in space.spaces):
        return space
    rest = {k: v for k, v in space.spaces.items() if k != MASK_KEY}
    return rest["observation"] if set(rest) == {"observation"} else spaces.Dict(rest)


def policy_observation(obs: Any) -> Any:
    """One agent's observation as :func:`policy_space` describes it (others as they are)."""
    if isinstance(obs, Mapping) and MASK_KEY in obs:
        rest = {k: v for k, v in obs.items() if k != MASK_KEY}
        return rest["observation"] if set(rest) == {"observation"} else rest
    return obs


class MaskSource:
    """Where an env's masks come from (``"obs"``, ``"info"``, ``"method"``), found from its first
    ``reset``; :meth:`read` then gives the masks after every ``reset``/``step``.

    :param vector: the env is a gymnasium vector env (masks per sub-env, from ``env.call``).
    """

    def __init__(self, kind: str | None, vector: bool) -> None:
        self.kind = kind
        self.vector = vector

    @classmethod
    def of(cls, env: Any, obs: Any, info: Any) -> MaskSource:
        vector = hasattr(env, "num_envs") and hasattr(env, "call")
        if isinstance(obs, Mapping) and MASK_KEY in obs:
            return cls("obs", vector)
        if isinstance(info, Mapping) and MASK_KEY in info:
            return cls("info", vector)
        # Looked for before it is called: a sub-env of an async vector env that raises (no such method) is
        # shut down for good. A method that exists may still say "not here" by raising AttributeError.
        has = all(env.call("has_wrapper_attr", "action_masks")) if vector else env.has_wrapper_attr("action_masks")
        if not has:
            return cls(None, vector)
        try:
            (env.call("action_masks") if vector else env.get_wrapper_attr("action_masks")())
        except AttributeError:
            return cls(None, vector)
        return cls("method", vector)

    def read(self, env: Any, obs: Any, info: Any) -> np.ndarray | None:
        """The masks now, as a bool array (a batch for a vector env), or None without a source."""
        if self.kind == "obs":
            raw = obs[MASK_KEY]
        elif self.kind == "info":
            raw = info[MASK_KEY]
        elif self.kind == "method":
            raw = np.stack(env.call("action_masks")) if self.vector else env.get_wrapper_attr("action_masks")()
        else:
            return None
        if isinstance(raw, np.ndarray) and raw.dtype == object:  # a vector env's info with rows missing
            raw = np.stack([np.asarray(r) for r in raw])
        return np.asarray(raw).astype(bool, copy=False)


def check_masking(
    source: MaskSource, enabled: bool, name: str, *, supported: bool = True, masking_sibling: str = "PPO"
) -> None:
    """An error when the env's masks and the algorithm's ``action_masking`` disagree (``supported``:
    the algorithm has the field at all; ``masking_sibling``: an algorithm that masks, named in the fix)."""
    if enabled and source.kind is None:
        raise AgileRLError(
            f"algorithm.action_masking: {name} is set to mask actions, but the env gives no action mask "
            f"({_SOURCES}); make the env report its masks, or remove action_masking"
        )
    if not enabled and source.kind is not None:
        where = {"obs": f"its observations' '{MASK_KEY}' key", "info": f"info['{MASK_KEY}']"}.get(
            source.kind, "an action_masks() method"
        )
        fix = (
            "set algorithm.action_masking: true"
            if supported
            else f"{name} does not mask actions yet ({masking_sibling} does)"
        )
        raise AgileRLError(
            f"algorithm.action_masking: the env gives action masks ({where}) but {name} would ignore them and "
            f"take forbidden actions; {fix}"
        )
