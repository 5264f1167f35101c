"""vLLM server mode (``vllm_config.mode: server``): the client's request and weight-sync protocol.

vLLM itself needs a CUDA GPU, so it cannot run here. :class:`StandInServer` is a small real HTTP
server written for these tests that implements the vLLM endpoints the client uses (``/health``,
``/v1/models``, ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``, ``/v1/completions``) with the
same request and response fields, and generates with the real tiny model plus the adapter it was
told to load (``peft.PeftModel.from_pretrained`` on the path it was sent). It stands in for a
GPU-only program; the real server is exercised by ``scripts/gpu_check.sh`` on a CUDA machine.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout.generation import GenerationError, HFGenerateBackend, SamplingConfig
from agilerl_plugin_llm.rollout.vllm_server import VLLMServerBackend, completion_token_ids

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


class StandInServer:
    """The vLLM OpenAI-server endpoints the client uses, on 127.0.0.1 (see the module docstring)."""

    def __init__(self, model_dir: Path, *, token_ids_field: bool = True) -> None:
        self.model_dir = model_dir
        self.token_ids_field = token_ids_field  # vLLM >= 0.10.2 (token_ids) or older (logprobs.tokens)
        self.adapters: dict[str, Any] = {}
        self.loaded: list[str] = []
        self.unloaded: list[str] = []
        self.completions: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, "")
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": str(owner.model_dir), "object": "model"}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                code, out = owner.handle(self.path, body)
                self._send(code, out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        with self.lock:
            if path == "/v1/load_lora_adapter":
                if body["lora_name"] in self.adapters:
                    return 400, {"error": f"The lora adapter '{body['lora_name']}' has already been loaded."}
                base = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
                self.adapters[body["lora_name"]] = PeftModel.from_pretrained(base, body["lora_path"]).eval()
                self.loaded.append(body["lora_name"])
                return 200, "Success"
            if path == "/v1/unload_lora_adapter":
                if self.adapters.pop(body["lora_name"], None) is None:
                    return 404, {"error": f"The lora adapter '{body['lora_name']}' cannot be found."}
                self.unloaded.append(body["lora_name"])
                return 200, "Success"
            if path == "/v1/completions":
                self.completions.append(body)
                model = self.adapters.get(body["model"])
                if model is None:
                    return 404, {"error": f"The model `{body['model']}` does not exist."}
                ids = self.generate(model, body)
                choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": "stop"}
                if self.token_ids_field:
                    choice["token_ids"] = ids
                else:
                    choice["logprobs"] = {"tokens": [f"token_id:{t}" for t in ids]}
                return 200, {"object": "text_completion", "model": body["model"], "choices": [choice]}
        return 404, {"error": "not found"}

    @staticmethod
    def generate(model: Any, body: dict[str, Any]) -> list[int]:
        prompt = torch.tensor([body["prompt"]])
        kwargs: dict[str, Any] = {"max_new_tokens": body["max_tokens"], "eos_token_id": body["stop_token_ids"],
                                  "pad_token_id": body["stop_token_ids"][0]}  # fmt: skip
        if body["temperature"] > 0:
            torch.manual_seed(int(body.get("seed") or 0))
            top_k = body["top_k"] if body["top_k"] > 0 else 0
            kwargs.update(do_sample=True, temperature=body["temperature"], top_p=body["top_p"], top_k=top_k)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.no_grad():
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **kwargs)
        return [int(t) for t in out[0, prompt.shape[1] :]]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def server_manifest(model_dir: Path, run_dir: Path, url: str | None, *, lora: bool = True) -> dict[str, Any]:
    vllm_config: dict[str, Any] = {"mode": "server", "server_timeout": 30}
    if url is not None:
        vllm_config["server_base_url"] = url
    network: dict[str, Any] = {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128}
    if lora:
        network["lora_config"] = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.05, "beta": 0.0,
                      "max_output_tokens": 5, "temperature": 1.0, "gradient_checkpointing": False,
                      "use_vllm": True, "vllm_config": vllm_config,
                      "vllm_lora_export_dir": str(run_dir / "lora")},
        "network": network,
        "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": 1, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip


def test_server_mode_validates_without_vllm_installed(tiny_model_dir: Path, tmp_path: Path) -> None:
    m = load_manifest(server_manifest(tiny_model_dir, tmp_path, None))
    assert m.algorithm.generation_backend == "vllm_server"
    assert m.algorithm.vllm_server_url == "http://127.0.0.1:8000"  # server_host/server_port defaults
    data = server_manifest(tiny_model_dir, tmp_path, None)
    data["algorithm"]["vllm_config"].update(server_host="10.0.0.7", server_port=9001)
    assert load_manifest(data).algorithm.vllm_server_url == "http://10.0.0.7:9001"


def test_server_mode_refuses_full_fine_tuning(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(server_manifest(tiny_model_dir, tmp_path, None, lora=False))
    (problem,) = info.value.problems
    assert "full-weight sync to a separate server is not implemented" in problem.message


def test_no_server_is_a_clear_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(GenerationError, match=r"no vLLM server answered at http://127\.0\.0\.1:\d+/health"):
        VLLMServerBackend(f"http://127.0.0.1:{port}", stop_ids=[0], timeout=1.0)


def test_token_ids_are_read_from_either_response_form() -> None:
    assert completion_token_ids({"choices": [{"token_ids": [5, 6]}]}) == [5, 6]
    assert completion_token_ids({"choices": [{"logprobs": {"tokens": ["token_id:5", "token_id:6"]}}]}) == [5, 6]
    with pytest.raises(GenerationError, match="as text"):
        completion_token_ids({"choices": [{"logprobs": {"tokens": ["hello"]}}]})


def greedy_on_both(agent: Any, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """The server's greedy replies (after syncing the adapter) and the trainer's own HF ones."""
    greedy = SamplingConfig(temperature=0.0)
    backend = agent.backend()
    backend.sync_weights(agent.model)
    served = backend.generate(prompts, max_new_tokens=[5] * len(prompts), sampling=greedy)
    local = HFGenerateBackend(agent.model, agent.tokenizer, stop_ids=agent.stop_ids)
    return served, local.generate(prompts, max_new_tokens=[5] * len(prompts), sampling=greedy)


@pytest.mark.parametrize("token_ids_field", [True, False])
def test_grpo_generates_on_the_server_and_syncs_each_new_adapter(
    token_ids_field: bool, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    server = StandInServer(tiny_model_dir, token_ids_field=token_ids_field)
    try:
        m = load_manifest(server_manifest(tiny_model_dir, tmp_path, server.url))
        env = select_strategy(m.algorithm).make_env(m, seed=0)
        agent = select_builder(m.algorithm).build_for_run(
            m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
        )
        tok = agent.tokenizer
        prompts = [
            tok("what is the", add_special_tokens=False)["input_ids"],
            tok("hi", add_special_tokens=False)["input_ids"],
        ]
        with torch.no_grad():  # an adapter that changes what the model says
            for n, p in agent.model.named_parameters():
                if "lora_B" in n and ".actor." in n:
                    p.normal_(0, 0.5)
        served, local = greedy_on_both(agent, prompts)
        assert served == local  # the server generates from the trainer's adapter
        with agent.model.disable_adapter():
            base = HFGenerateBackend(agent.model, tok, stop_ids=agent.stop_ids)
            assert base.generate(prompts, max_new_tokens=[5, 5], sampling=SamplingConfig(temperature=0.0)) != served
        first = server.loaded[-1]
        # The two prompts' requests run concurrently: either may reach the server last.
        body = next(b for b in reversed(server.completions) if b["prompt"] == prompts[1])
        assert body["model"] == first and body["temperature"] == 0.0
        assert set(agent.stop_ids) == set(body["stop_token_ids"])

        stats = agent.learn_iteration(env)  # sampled rollouts on the server, then an optimizer step
        assert stats["optimizer_steps"] == 1.0
        sampled = [b for b in server.completions if b["temperature"] == 1.0]
        assert len(sampled) == 4  # 2 prompts x group 2, one request each
        served, local = greedy_on_both(agent, prompts)
        assert served == local  # and follows the adapter after training
        assert len(server.loaded) == 3 and len(set(server.loaded)) == 3  # a new name per sync
        assert server.unloaded == server.loaded[:-1]  # the previous version is dropped
        assert list(server.adapters) == [server.loaded[-1]]
        assert agent.clone(1).backend() is agent.backend()  # population members share the client
        agent.backend().close()
        assert server.adapters == {}
    finally:
        server.close()


def test_agilerl_train_runs_through_the_server_and_releases_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    import yaml

    from agilerl.cli import main

    server = StandInServer(tiny_model_dir)
    try:
        data = server_manifest(tiny_model_dir, tmp_path / "run", server.url)
        data["training"].update(max_steps=2, evo_steps=2)
        path = tmp_path / "server.yaml"
        path.write_text(yaml.safe_dump(data))
        assert main(["train", str(path)]) == 0
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        assert any(r.get("generation") == -1 for r in rows) and any("train/reward" in r for r in rows)
        assert server.completions and all(isinstance(b["prompt"], list) for b in server.completions)
        assert server.adapters == {}  # the run unloaded its adapter when it ended
    finally:
        server.close()


def test_server_mode_is_never_silently_ignored(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``vllm_config.mode: server`` picks the server backend with use_vllm unset too, and contradicting
    it with use_vllm: false is a validation error, not a run that generates locally."""
    data = server_manifest(tiny_model_dir, tmp_path, "http://127.0.0.1:9")
    del data["algorithm"]["use_vllm"]
    assert load_manifest(data).algorithm.generation_backend == "vllm_server"  # type: ignore[union-attr]
    data["algorithm"]["use_vllm"] = False
    with pytest.raises(ManifestError, match=r"vllm_config\.mode: server generates on a vLLM server"):
        load_manifest(data)


def test_server_mode_refuses_several_processes(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agilerl_plugin_llm.rollout.generation import GenerationError, select_backend

    spec = load_manifest(server_manifest(tiny_model_dir, tmp_path, "http://127.0.0.1:9")).algorithm
    monkeypatch.setenv("WORLD_SIZE", "2")  # what every launcher sets in each of 2 processes
    with pytest.raises(GenerationError, match="mode: server trains in one process"):
        select_backend(spec, None, None, stop_ids=[0], device="cpu", lora_rank=None)
