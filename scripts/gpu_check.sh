#!/usr/bin/env bash
# The LLM plugin's GPU path, checked on a CUDA machine in a few minutes (scripts/gpu_check.py):
#   1. installs the vllm and qlora extras (into $AGILERL_VENV, default .venv, made by scripts/install.sh);
#   2. fp32: full fine-tuning keeps float32 master weights on the GPU (a bf16 checkpoint loads as fp32);
#   3. vllm: the colocated-vLLM tests CI runs on CPU (plugins/llm/tests/test_vllm_engine.py), here on
#      CUDA: weight sync changes generation, log-probs agree with the policy's, the five rollout
#      algorithms learn with use_vllm: true, failures are named;
#   4. server: the server-mode tests (test_vllm_server.py) against vLLM's own server on 127.0.0.1;
#   5. qlora: SFT on a bitsandbytes nf4 base under LoRA: the held-out loss falls;
#   6. nccl: data-parallel GRPO in 2 processes (nccl, one GPU each) takes 1 process's steps (the CPU
#      suite's test_distributed.py comparison, gloo there); skipped, saying so, with fewer than 2 GPUs;
# each check prints its timings. Exit 0: all held. 1: a check failed. 2: no GPU, or the extras could
# not be installed (nothing was checked).
#
#   bash scripts/gpu_check.sh [CHECK ...]     # AGILERL_VENV=/path/to/venv bash scripts/gpu_check.sh server qlora
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
if ! "$py" -c "import vllm, bitsandbytes" 2>/dev/null; then
  echo "[gpu_check] installing the vllm and qlora extras"
  # vLLM pins torch and transformers; keep the torch already installed (see docs/llm.md for versions).
  if ! "$py" -m pip install -q -e "plugins/llm[vllm,qlora]"; then
    echo "[gpu_check] could not install vllm/bitsandbytes (offline machine or no matching wheel): nothing checked"; exit 2
  fi
fi
echo "[gpu_check] vllm $("$py" -c 'import vllm; print(vllm.__version__)') on $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"
status=0
"$py" scripts/gpu_check.py "$work" "$@" || status=$?
echo "[gpu_check] done in $(( $(date +%s) - start ))s"
exit "$status"
