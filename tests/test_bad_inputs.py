"""The bad-input corpus (tests/data/bad/): every file is refused by ``agilerl validate`` with the
documented exit code 1 (invalid input), one screen of text, no traceback, and a message naming the
field path (or file:line:column for a syntax error) given by the file's ``# expect:`` line.

Most files run in-process (fast); a few also run as a real subprocess to check the exit status
the shell sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agilerl.cli import main

ROOT = Path(__file__).resolve().parents[1]
BAD = ROOT / "tests" / "data" / "bad"
CASES = sorted(p for p in BAD.iterdir() if p.is_file() and p.suffix in {".yaml", ".json"})


def expected(path: Path) -> str:
    header = path.with_name(path.name + ".expect") if path.suffix == ".json" else path
    for line in header.read_bytes().decode("utf-8", "replace").splitlines()[:3]:
        if line.startswith("# expect: "):
            return line.removeprefix("# expect: ").strip()
    raise AssertionError(f"{path.name} has no '# expect:' line")


def test_the_corpus_is_large_and_covers_every_paradigm() -> None:
    assert len(CASES) >= 60
    names = {p.stem.split("_")[0] for p in CASES}
    assert {"ppo", "dqn", "td3", "ippo", "maddpg", "bandit", "sft", "grpo", "custom"} <= names


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_validate_refuses(path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the corpus names its tables and env modules relative to the repository
    rc = main(["validate", str(path.relative_to(ROOT))])
    out = capsys.readouterr()
    # Data paths are reported resolved (absolute); the corpus states them relative to the repository.
    text = (out.out + out.err).replace(f"{ROOT}/", "")
    assert rc == 1, text
    assert "Traceback" not in text and "AGILERL_TRACEBACK" not in text, text
    assert expected(path) in text, text
    assert len(text.splitlines()) <= 12, text


@pytest.mark.parametrize(
    "name", ["ppo_lr_inf.yaml", "alias_bomb.yaml", "binary_garbage.yaml", "custom_env_wrong_shape.yaml"]
)
def test_validate_refuses_in_a_subprocess(name: str) -> None:
    path = BAD / name
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("AGILERL_TRACEBACK", None)
    proc = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "validate", str(path.relative_to(ROOT))],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert expected(path) in (proc.stdout + proc.stderr).replace(f"{ROOT}/", "")


def test_check_env_false_opts_out_of_the_custom_env_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    text = (BAD / "custom_env_wrong_shape.yaml").read_text() + "validation:\n  check_env: false\n"
    (tmp_path / "m.yaml").write_text(text)
    assert main(["validate", str(tmp_path / "m.yaml")]) == 0, capsys.readouterr().err


def test_a_well_behaved_custom_env_passes_the_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["validate", "examples/custom_env/ppo_corridor.yaml"]) == 0, capsys.readouterr().err


#: Corpus files whose check needs torch: a CUDA device is asked torch whether it exists.
NEEDS_TORCH = ("device_cuda",)


def test_no_refusal_imports_torch_or_an_engine() -> None:
    """Every refusal comes from cheap checks (the reason they take well under 5 s): validating the
    whole corpus in one process imports neither torch, transformers, datasets, vLLM nor Ray,
    except where a CUDA device is named (measured without a clock, so a loaded machine cannot flake it)."""
    script = """
import contextlib, io, sys
from pathlib import Path
from agilerl.cli import main
HEAVY = ("torch", "transformers", "datasets", "vllm", "ray", "peft")
NEEDS_TORCH = NEEDS_TORCH_VALUE
files = sorted(sys.argv[1:], key=lambda p: any(n in p for n in NEEDS_TORCH))
for p in files:
    before = {m for m in HEAVY if m in sys.modules}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["validate", p])
    new = sorted({m for m in HEAVY if m in sys.modules} - before)
    if new:
        print("IMPORTED", Path(p).name, new)
""".replace("NEEDS_TORCH_VALUE", repr(NEEDS_TORCH))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script, *(str(p.relative_to(ROOT)) for p in CASES)],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    imported = [line for line in proc.stdout.splitlines() if line.startswith("IMPORTED")]
    assert all(any(n in line for n in NEEDS_TORCH) for line in imported), imported


@pytest.mark.parametrize(
    ("value", "got"),
    [("64,64", "unable to parse string as an integer (got '64,64')"), ("[64,64]", "(got [64, 64])"),
     ("0.5,0.6", "unable to parse string as an integer (got '0.5,0.6')")],
)  # fmt: skip
def test_set_gives_a_list_where_one_value_goes_and_is_told_the_fix(
    value: str, got: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--set algorithm.learn_step=64,64`` (YAML reads text) and ``=[64,64]`` (a list) name the same fix."""
    monkeypatch.chdir(ROOT)
    rc = main(["validate", "examples/ppo_cartpole.yaml", "--set", f"algorithm.learn_step={value}"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "algorithm.learn_step: Input should be a valid integer" in err, err
    assert f"{got}; this field takes one value, not a list" in err, err
