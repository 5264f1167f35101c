"""vLLM server mode (``vllm_config.mode: server``): generation on a separately started vLLM server.

The trainer keeps the GPU(s) it trains on; a vLLM OpenAI-compatible server runs elsewhere (another
GPU of the machine, or another machine sharing a filesystem), started for example with::

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve ./my-model --enable-lora --max-lora-rank 16 --port 8000

What the client uses of the server (all standard vLLM endpoints, JSON over HTTP):

* ``GET /health`` (waited for at start, up to ``server_timeout`` seconds) and ``GET /v1/models``
  (the served base model's name);
* weight sync, before every rollout: the ``actor`` adapter is written to a fresh directory under
  ``vllm_lora_export_dir`` (which the server must be able to read), loaded with
  ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` under a new versioned name, and the
  previous version is dropped with ``POST /v1/unload_lora_adapter {"lora_name"}``;
* generation: one ``POST /v1/completions`` per prompt, sent concurrently (the server batches
  them), with the prompt as token ids, the adapter's name as ``model``, our sampling fields, the
  stop token ids and ``return_token_ids`` / ``return_tokens_as_token_ids`` so the reply comes back
  as token ids (never re-tokenised text).

Only LoRA runs sync this way (an adapter is a few MB on disk); full-weight sync to a server needs a
collective (NCCL) channel and is refused at validation.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agilerl_plugin_llm.rollout.generation import (
    GenerationError,
    LoRAExporter,
    SamplingConfig,
    _cut,
    vllm_sampling_kwargs,
)


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


class VLLMServerBackend:
    """Generation backend that talks to a running vLLM server (see the module docstring).

    :param base_url: the server, e.g. ``http://127.0.0.1:8000``.
    :param stop_ids: token ids that end a reply.
    :param timeout: seconds to wait for ``/health`` at start, and for each request.
    :param export_dir: ``vllm_lora_export_dir`` (None: a temporary directory; the server must see it).
    """

    name = "vllm_server"

    def __init__(
        self, base_url: str, *, stop_ids: list[int], timeout: float = 240.0, export_dir: str | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.stop_ids = list(stop_ids)
        self.timeout = float(timeout)
        self.exporter = LoRAExporter(export_dir)
        self.adapter: str | None = None
        self.closed = False
        self._wait_for_health()
        models = self._request("GET", "/v1/models").get("data") or []
        if not models:
            raise GenerationError(f"the vLLM server at {self.base_url} serves no model (GET /v1/models is empty)")
        self.base_model = str(models[0]["id"])

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
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise GenerationError(
                    f"vllm_config.mode: server: no vLLM server answered at {self.base_url}/health within "
                    f"{self.timeout:g} s ({last}); start one first, e.g. VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                    "vllm serve MODEL --enable-lora --max-lora-rank R --port PORT, and point "
                    "vllm_config.server_base_url (or server_host/server_port) at it"
                )
            time.sleep(1.0)

    # --- GenerationBackend ----------------------------------------------------------------------
    def sync_weights(self, model: Any) -> None:
        """Write the actor adapter and make the server serve it under a new name."""
        name, _, path = self.exporter.export(model)
        self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        previous, self.adapter = self.adapter, name
        if previous is not None:
            self._request("POST", "/v1/unload_lora_adapter", {"lora_name": previous})

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
        if self.closed:
            return
        self.closed = True
        if self.adapter is not None:
            try:
                self._request("POST", "/v1/unload_lora_adapter", {"lora_name": self.adapter})
            except GenerationError:
                pass  # the server may be gone already; nothing of ours is left on it then
            self.adapter = None
        self.exporter.close()


__all__ = ["VLLMServerBackend", "completion_request", "completion_token_ids"]
