#!/usr/bin/env bash
# The LLM plugin's GPU path, checked on a CUDA machine in a few minutes:
#   1. installs the vllm extra (into $AGILERL_VENV, default .venv, made by scripts/install.sh);
#   2. full fine-tuning keeps float32 master weights on the GPU (a bf16 checkpoint loads as fp32);
#   3. GRPO with colocated vLLM (use_vllm: true) and full-weight sync trains a tiny model for a few
#      iterations: the held-out reward rises;
#   4. the log-probs vLLM reports for its own samples agree with the HF model's on the same tokens;
#   5. prints the timings.
# Exit 0: all held. 1: a check failed. 2: no GPU or vLLM could not be installed (nothing was checked).
#
#   bash scripts/gpu_check.sh            # AGILERL_VENV=/path/to/venv bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${AGILERL_VENV:-.venv}
py="$venv/bin/python"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "[gpu_check] no NVIDIA GPU (nvidia-smi not found): nothing to check"; exit 2
fi
[ -x "$py" ] || bash scripts/install.sh
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "[gpu_check] no CUDA device: nothing to check"; exit 2
fi
start=$(date +%s)
if ! "$py" -c "import vllm" 2>/dev/null; then
  echo "[gpu_check] installing the vllm extra"
  # vLLM pins torch and transformers; keep the torch already installed (see docs/llm.md for versions).
  if ! "$venv/bin/python" -m pip install -q -e "plugins/llm[vllm]"; then
    echo "[gpu_check] could not install vllm (offline machine or no matching wheel): nothing checked"; exit 2
  fi
fi
echo "[gpu_check] vllm $("$py" -c 'import vllm; print(vllm.__version__)') on $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"

"$py" -m agilerl_plugin_llm.testing build-tiny-model "$work/model" >/dev/null

"$py" - "$work" <<'EOF'
import json, sys, time
from pathlib import Path

import torch
import yaml

from agilerl.cli import main

work = Path(sys.argv[1])
model_dir = work / "model"
examples = Path("examples/llm").resolve()
failures = []

# 2. fp32 master weights for full fine-tuning on the GPU.
from transformers import AutoModelForCausalLM
from agilerl_plugin_llm.model import load_model

bf16 = work / "model-bf16"
AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).save_pretrained(bf16)
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
    if (model_dir / name).exists():
        (bf16 / name).write_bytes((model_dir / name).read_bytes())
dtypes = {p.dtype for p in load_model(bf16, device="cuda").parameters()}
print(f"[gpu_check] full fine-tuning weight dtypes on cuda: {dtypes}")
if dtypes != {torch.float32}:
    failures.append(f"full fine-tuning weights are {dtypes}, not float32")

# 3. GRPO with colocated vLLM and full-weight sync.
run = work / "run"
manifest = {
    "algorithm": {"name": "GRPO", "batch_size": 4, "group_size": 4, "lr": 0.01, "beta": 0.04,
                  "max_output_tokens": 16, "temperature": 1.0, "gradient_checkpointing": False,
                  "use_vllm": True, "vllm_config": {"gpu_memory_utilization": 0.2, "sleep_mode": True},
                  "vllm_engine_args": {"enforce_eager": True, "dtype": "float32"}},
    "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
    "environment": {"env_type": "reasoning", "dataset_path": str(examples / "say_eight.jsonl"),
                    "rubric_file_path": str(examples / "say_word_rubric.py"), "max_reward": 1.0},
    "training": {"max_steps": 30, "evo_steps": 10, "seed": 0, "progress": False, "run_dir": str(run),
                 "device": "cuda"},
}
path = work / "grpo_vllm.yaml"
path.write_text(yaml.safe_dump(manifest))
t0 = time.perf_counter()
code = main(["train", str(path)])
wall = time.perf_counter() - t0
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] if code == 0 else []
fitness = [r["fitness"] for r in rows if "fitness" in r]
steps = [r for r in rows if r.get("generation", -1) >= 0]
rollout_s = [r["train/rollout_s"] for r in steps if "train/rollout_s" in r]
print(f"[gpu_check] GRPO+vLLM: exit {code}, fitness {fitness}, {wall:.1f}s for 30 iterations "
      f"({wall / 30:.3f} s/iter; rollout {sum(rollout_s) / max(len(rollout_s), 1):.3f} s/iter)")
if code != 0 or len(fitness) < 2 or not fitness[-1] > fitness[0] + 0.2:
    failures.append(f"GRPO with vLLM did not learn: exit {code}, fitness {fitness}")

# 4. vLLM's log-probs of its samples vs the HF model's on the same tokens.
from vllm import LLM, SamplingParams
from agilerl_plugin_llm.algorithms.base import sequence_logprobs

llm = LLM(model=str(model_dir), dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True, seed=0)
prompt = [4, 90, 266, 87, 204]
out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=12, temperature=1.0, logprobs=0, seed=0))[0]
sample = out.outputs[0]
vllm_lp = torch.tensor([next(iter(d.values())).logprob for d in sample.logprobs])
hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
ids = torch.tensor([prompt + list(sample.token_ids)], device="cuda")
mask = torch.zeros_like(ids)
mask[:, len(prompt):] = 1
with torch.no_grad():
    hf_lp = sequence_logprobs(hf, ids, torch.ones_like(ids), mask)[0, len(prompt):].cpu()
gap = float((hf_lp - vllm_lp).abs().max())
print(f"[gpu_check] max |log p_HF - log p_vLLM| over {len(vllm_lp)} sampled tokens: {gap:.2e}")
if gap > 1e-2:
    failures.append(f"vLLM and HF log-probs disagree by {gap:.3g}")

if failures:
    print("[gpu_check] FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("[gpu_check] all checks held")
EOF
echo "[gpu_check] done in $(( $(date +%s) - start ))s"
