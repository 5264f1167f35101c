"""vLLM server mode (``vllm_config.mode: server``): generation on a separately started vLLM server.

The trainer keeps the GPU(s) it trains on; a vLLM OpenAI-compatible server runs elsewhere (another
GPU of the machine, or another machine sharing a filesystem), started for example with::

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve ./my-model --enable-lora --max-lora-rank 16 --port 8000
    VLLM_SERVER_DEV_MODE=1 vllm serve ./my-model --port 8000       # full fine-tuning (no LoRA)

What the client uses of the server (all vLLM's own endpoints, JSON over HTTP):

* ``GET /health`` (waited for at start, up to ``server_timeout`` seconds) and ``GET /v1/models``
  (the served base model's name and directory);
* weight sync, before every rollout, through a directory the trainer writes and the server reads
  (``vllm_lora_export_dir``, default a temporary directory: the two must share a filesystem):

  - LoRA: the ``actor`` adapter is written to a fresh directory, loaded with
    ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` under a new versioned name, and the
    previous version is dropped with ``POST /v1/unload_lora_adapter {"lora_name"}``;
  - full fine-tuning: the whole model is saved (safetensors) to a fresh directory and the server's
    workers reload every weight from it in place, ``POST /collective_rpc {"method": "reload_weights",
    "kwargs": {"weights_path": DIR, "is_checkpoint_format": true}}``, then ``POST /reset_prefix_cache``
    drops the KV blocks computed with the old weights. Both endpoints are vLLM's development API,
    served only when the server runs with ``VLLM_SERVER_DEV_MODE=1`` (checked at start). The server
    keeps serving the last synced weights after the run (every run syncs before its first rollout);
* generation: one ``POST /v1/completions`` per prompt, sent concurrently (the server batches
  them), with the prompt as token ids, the adapter's name (or the base model's) as ``model``, our
  sampling fields, the stop token ids and ``return_token_ids`` / ``return_tokens_as_token_ids`` so
  the reply comes back as token ids (never re-tokenised text).

vLLM's other way in, ``/init_weight_transfer_engine`` + ``/update_weights``, streams weights over
NCCL or CUDA IPC: CUDA only, so it is not used here (the directory works on CPU and GPU alike).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agilerl_plugin_llm.rollout.sampling import GenerationError, SamplingConfig, _cut
from agilerl_plugin_llm.rollout.specs import http_url_problem
from agilerl_plugin_llm.rollout.vllm_engine import LoRAExporter, vllm_sampling_kwargs


def completion_request(
    model: str,
    prompt: list[int],
    *,
    max_tokens: int,
    sampling: SamplingConfig,
    stop_ids: list[int],
    seed: int | None,
) -> dict[str, Any]:
    """The ``/v1/completions`` body for one prompt (vLLM's sampling extensions included)."""
    # The completions API takes SamplingParams' fields by the same names.
    sampling_fields = vllm_sampling_kwargs(sampling, max_tokens=max_tokens, seed=seed)
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt),
        **{k: v for k, v in sampling_fields.items() if v is not None},
        "stop_token_ids": list(stop_ids),
        "skip_special_tokens": False,
        "logprobs": 0,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
    }
    return body


def completion_token_ids(response: dict[str, Any]) -> list[int]:
    """The generated token ids of a ``/v1/completions`` response's first choice.

    vLLM >= 0.10.2 returns them as ``token_ids`` (with ``return_token_ids``); older servers spell
    each sampled token ``"token_id:<id>"`` in ``logprobs.tokens`` (``return_tokens_as_token_ids``).
    """
    choices = response.get("choices") or []
    if not choices:
        raise GenerationError(f"the vLLM server returned no choices: {json.dumps(response)[:300]}")
    choice = choices[0]
    ids = choice.get("token_ids")
    if ids is not None:
        return [int(t) for t in ids]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if tokens is None:
        raise GenerationError(
            "the vLLM server's completion carries no token ids (neither token_ids nor logprobs.tokens); "
            "it needs vLLM >= 0.6 (return_tokens_as_token_ids)"
        )
    out = []
    for tok in tokens:
        if not str(tok).startswith("token_id:"):
            raise GenerationError(f"the vLLM server returned a token as text ({tok!r}), not as token_id:<id>")
        out.append(int(str(tok).split(":", 1)[1]))
    return out


#: What the server needs for full-weight sync, named in every error about it.
DEV_MODE_HINT = (
    "full-weight sync in server mode reloads the weights through vLLM's development endpoints "
    "(POST /collective_rpc, /reset_prefix_cache): start the server with VLLM_SERVER_DEV_MODE=1, "
    "e.g. VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --port PORT; or train LoRA (network.lora_config), "
    "which syncs through /v1/load_lora_adapter"
)


class FullWeightsExporter:
    """Saves the whole policy for the server to reload, one fresh directory per version (``config.json``
    and one ``model.safetensors``); the previous version is deleted once the next is loaded.

    Every name of the state dict is written, tied weights under each of their names (a tied
    ``lm_head.weight`` too, which ``save_pretrained`` leaves out): vLLM's in-place reload puts a
    layer the file leaves out back to its old weights, so the served ``lm_head`` would keep the old
    embedding while the embedding took the new one.

    :param export_dir: the directory both processes can read (None: a temporary one, on this host).
    """

    def __init__(self, export_dir: str | None) -> None:
        self._owned = export_dir is None
        self.root = Path(export_dir) if export_dir else Path(tempfile.mkdtemp(prefix="agilerl-weights-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.version = 0
        self.current: Path | None = None
        self.previous: Path | None = None

    def export(self, model: Any) -> str:
        """Write the model's weights to a new version directory; return its path."""
        from safetensors.torch import save_file

        self.version += 1
        path = self.root / f"weights-v{self.version}"
        path.mkdir(parents=True, exist_ok=True)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        tensors: dict[str, Any] = {}
        seen: set[int] = set()
        for name, tensor in base.state_dict().items():
            tensor = tensor.detach().to("cpu").contiguous()
            if tensor.data_ptr() in seen:  # a tied weight: safetensors stores no shared memory twice
                tensor = tensor.clone()
            seen.add(tensor.data_ptr())
            tensors[name] = tensor
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        base.config.to_json_file(str(path / "config.json"))
        self.previous, self.current = self.current, path
        return str(path)

    def drop_previous(self) -> None:
        """Delete the version before the current one (the server reads only the current one now)."""
        if self.previous is not None:
            shutil.rmtree(self.previous, ignore_errors=True)
            self.previous = None

    def close(self) -> None:
        for path in (self.previous, self.current):
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        self.previous = self.current = None
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)


class VLLMServerBackend:
    """Generation backend that talks to a running vLLM server (see the module docstring).

    :param base_url: the server, e.g. ``http://127.0.0.1:8000``.
    :param stop_ids: token ids that end a reply.
    :param timeout: seconds to wait for ``/health`` at start, and for each request.
    :param export_dir: ``vllm_lora_export_dir`` (None: a temporary directory; the server must see it).
    :param lora: sync the LoRA adapter (True) or every weight (False: full fine-tuning, which needs
        the server's development endpoints, ``VLLM_SERVER_DEV_MODE=1``; checked here).
    """

    name = "vllm_server"

    def __init__(
        self,
        base_url: str,
        *,
        stop_ids: list[int],
        timeout: float = 240.0,
        export_dir: str | None = None,
        lora: bool = True,
    ) -> None:
        problem = http_url_problem(base_url)
        if problem is not None:  # another scheme never answers: refused now, not after server_timeout
            raise GenerationError(f"vllm_server_url: {problem}")
        self.base_url = base_url.rstrip("/")
        self.stop_ids = list(stop_ids)
        self.timeout = float(timeout)
        self.lora = bool(lora)
        self.exporter = LoRAExporter(export_dir) if self.lora else None
        self.weights = None if self.lora else FullWeightsExporter(export_dir)
        self.adapter: str | None = None
        self.syncs = 0
        self.closed = False
        self._wait_for_health()
        models = self._request("GET", "/v1/models").get("data") or []
        if not models:
            raise GenerationError(f"the vLLM server at {self.base_url} serves no model (GET /v1/models is empty)")
        self.base_model = str(models[0]["id"])
        if not self.lora:
            self._check_dev_mode()

    # --- HTTP -----------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode() or "{}"
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            hint = ""
            if path.endswith("lora_adapter"):
                hint = (" (start the server with --enable-lora, a --max-lora-rank of at least the adapter's rank, "
                        "and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)")  # fmt: skip
            raise GenerationError(f"vLLM server {method} {path} failed with HTTP {exc.code}: {detail}{hint}") from exc
        except (urllib.error.URLError, OSError) as exc:
            if _timed_out(exc):
                raise GenerationError(
                    f"the vLLM server at {self.base_url} gave no answer to {method} {path} within {self.timeout:g} s "
                    "(vllm_config.server_timeout bounds each request: raise it for long generations, or check that "
                    "the server is not hung)"
                ) from exc
            raise GenerationError(f"vLLM server {method} {self.base_url}{path} failed: {exc}") from exc
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return {"text": text}
        return parsed if isinstance(parsed, dict) else {"data": parsed}

    def _wait_for_health(self) -> None:
        deadline = time.monotonic() + self.timeout
        last: Exception | None = None
        while True:
            # Each try within what is left of server_timeout (at most 5 s): one that accepts and never
            # answers is given up at the deadline, not 5 s past it.
            attempt = min(5.0, max(0.05, deadline - time.monotonic()))
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=attempt) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise GenerationError(
                    f"vllm_config.mode: server: no vLLM server answered at {self.base_url}/health within "
                    f"{self.timeout:g} s, the vllm_config.server_timeout ({last}); start one first, e.g. "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                    "vllm serve MODEL --enable-lora --max-lora-rank R --port PORT, and point "
                    "vllm_config.server_base_url (or server_host/server_port) at it"
                )
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _check_dev_mode(self) -> None:
        """Full-weight sync needs ``POST /collective_rpc``: a GET answers 405 where the route exists
        (it takes POST only) and 404 where the server runs without ``VLLM_SERVER_DEV_MODE=1``."""
        req = urllib.request.Request(self.base_url + "/collective_rpc", method="GET")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout):
                return
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise GenerationError(
                    f"the vLLM server at {self.base_url} has no /collective_rpc: {DEV_MODE_HINT}"
                ) from exc
        except (urllib.error.URLError, OSError) as exc:
            if _timed_out(exc):
                raise GenerationError(
                    f"the vLLM server at {self.base_url} gave no answer to GET /collective_rpc within "
                    f"{self.timeout:g} s (vllm_config.server_timeout bounds each request)"
                ) from exc
            raise GenerationError(f"vLLM server GET {self.base_url}/collective_rpc failed: {exc}") from exc

    def _reload_from(self, path: str) -> None:
        """Make the server's workers reload every weight from ``path``, then empty its prefix cache."""
        body = {"method": "reload_weights", "kwargs": {"weights_path": path, "is_checkpoint_format": True}}
        try:
            self._request("POST", "/collective_rpc", body)
        except GenerationError as exc:
            raise GenerationError(
                f"{exc}; the server reloads the weights from {path}, which the trainer wrote: the two must share "
                "that filesystem (vllm_lora_export_dir names a directory both can read)"
            ) from exc
        # KV blocks computed with the old weights would be reused for any prompt filling a block. The
        # reset fails while blocks are held (another client's requests still running): try again.
        for attempt in range(10):
            if self._request("POST", "/reset_prefix_cache").get("success") is not False:
                return
            time.sleep(0.5 * (attempt + 1))
        raise GenerationError(
            f"the vLLM server at {self.base_url} could not empty its prefix cache after a weight sync (blocks still "
            "held by running requests for about 27 s): it would serve KV computed with the old weights; let other "
            "clients' requests finish, or give this run a server of its own"
        )

    # --- GenerationBackend ----------------------------------------------------------------------
    def sync_weights(self, model: Any) -> None:
        """LoRA: write the actor adapter and make the server serve it under a new name. Full
        fine-tuning: write every weight and make the server reload them (see the module docstring)."""
        if self.weights is not None:
            path = self.weights.export(model)
            self._reload_from(path)
            self.weights.drop_previous()
            self.syncs += 1
            return
        assert self.exporter is not None
        name, _, path = self.exporter.export(model)
        self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        previous, self.adapter = self.adapter, name
        if previous is not None:
            self._request("POST", "/v1/unload_lora_adapter", {"lora_name": previous})
        self.syncs += 1

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[int]]:
        if not prompts:
            return []
        model = self.adapter or self.base_model
        seeds = [None if seed is None else seed + i for i in range(len(prompts))]
        bodies = [
            completion_request(model, p, max_tokens=max(1, b), sampling=sampling, stop_ids=self.stop_ids, seed=s)
            for p, b, s in zip(prompts, max_new_tokens, seeds, strict=True)
        ]
        with ThreadPoolExecutor(max_workers=min(32, len(bodies))) as pool:
            responses = list(pool.map(lambda b: self._request("POST", "/v1/completions", b), bodies))
        stop = set(self.stop_ids)
        return [_cut(completion_token_ids(r), stop, b) for r, b in zip(responses, max_new_tokens, strict=True)]

    def close(self) -> None:
        """Unload our adapter (LoRA) and delete our weight files. With full fine-tuning the server keeps
        the last synced weights: they are in its memory, and reloading its own model directory would
        not restore them (vLLM's in-place reload from a ``save_pretrained`` directory leaves a tied
        ``lm_head`` at the synced weights; see :class:`FullWeightsExporter`)."""
        if self.closed:
            return
        self.closed = True
        if self.adapter is not None:
            try:
                self._request("POST", "/v1/unload_lora_adapter", {"lora_name": self.adapter})
            except GenerationError:
                pass  # the server may be gone already; nothing of ours is left on it then
            self.adapter = None
        if self.weights is not None:
            self.weights.close()
        if self.exporter is not None:
            self.exporter.close()


__all__ = ["DEV_MODE_HINT", "FullWeightsExporter", "VLLMServerBackend", "completion_request", "completion_token_ids"]


def _timed_out(exc: BaseException) -> bool:
    """Whether a urllib failure is a timeout (raised as is, or as a ``URLError`` around one)."""
    reason = getattr(exc, "reason", None)
    return isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError) or "timed out" in str(reason or "")
