#!/usr/bin/env bash
# Build every package's wheel (hatchling), install the wheels alone into a fresh virtualenv (plus the
# CPU torch where there is no CUDA), and run the README's main job there, from outside the
# checkout. Catches what editable installs hide: package data left out of a wheel, a dependency
# used but not declared, a console script that does not start.
# Usage: bash .ci/wheels.sh [PYTHON_WITH_HATCHLING]   (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
builder=${1:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
packages=(./core)
for dir in plugins/*/; do
  [ -f "$dir/pyproject.toml" ] && packages+=("./${dir%/}")
done
echo "[wheels] building: ${packages[*]}"
"$builder" -m pip --disable-pip-version-check wheel -q --no-deps --no-build-isolation -w "$work/dist" "${packages[@]}"
ls "$work/dist"
python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
constraints=()
if ! command -v nvidia-smi >/dev/null 2>&1; then
  constraints=(-c "$repo/constraints/cpu.txt")
  "${pip[@]}" install -q "${constraints[@]}" torch
fi
"${pip[@]}" install -q "${constraints[@]}" "$work"/dist/*.whl
cd "$work"
export OMP_NUM_THREADS=1 AGILERL_STRICT_PLUGINS=1
"$work/venv/bin/agilerl" plugins
echo "[wheels] the README's main job: agilerl train examples/ppo_cartpole.yaml"
"$work/venv/bin/agilerl" train "$repo/examples/ppo_cartpole.yaml" --run-dir "$work/run" --no-progress
"$work/venv/bin/agilerl" eval "$work/run" --episodes 3
"$work/venv/bin/python" -m agilerl --version
echo "[wheels] ok"
