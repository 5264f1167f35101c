"""The table bandit env: loading, encoding, contexts, and clear errors on bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agilerl.errors import AgileRLError, ManifestError
from agilerl.models import load_manifest, make_env
from agilerl.models.env import make_bandit_env
from agilerl_plugin_bandit.env import BanditDataError, BanditEnv, encode_features
from agilerl_plugin_bandit.specs import BanditEnvSpec


def test_iris_by_name_loads_sklearns_shipped_copy() -> None:
    env = make_bandit_env(BanditEnvSpec(name="iris"), seed=0)
    assert isinstance(env, BanditEnv)
    assert (env.arms, env.num_features, env.context_dim) == (3, 4, 12)
    assert len(env) == 150
    # standardised numeric columns
    assert np.allclose(env.features.mean(0), 0, atol=1e-5)
    assert np.allclose(env.features.std(0), 1, atol=1e-4)


def test_context_puts_the_row_in_arm_blocks_and_rewards_the_true_class() -> None:
    env = make_bandit_env(BanditEnvSpec(name="wine"), seed=1)
    context = env.reset()
    d = env.num_features
    assert context.shape == (env.arms, env.arms * d)
    row = env.features[env._row]
    for k in range(env.arms):
        block = context[k].reshape(env.arms, d)
        assert np.array_equal(block[k], row)
        assert not np.delete(block, k, axis=0).any()
    truth = int(env.targets[env._row])
    _, reward = env.step(truth)
    assert reward == 1.0
    wrong = (int(env.targets[env._row]) + 1) % env.arms
    _, reward = env.step(wrong)
    assert reward == 0.0


def test_categorical_columns_are_one_hot_and_numeric_standardised(mushrooms: dict[str, str]) -> None:
    env = make_bandit_env(BanditEnvSpec(**mushrooms))
    names = env.feature_names
    assert "odor=foul" in names and "cap_color=red" in names and "stem_height" in names
    onehot = [i for i, n in enumerate(names) if n.startswith("odor=")]
    assert np.all(env.features[:, onehot].sum(1) == 1)
    assert abs(env.features[:, names.index("stem_height")].mean()) < 1e-5
    assert env.classes == ["edible", "inedible", "poisonous"]


def test_in_memory_tables_parquet_and_target_column(tmp_path: Path, mushrooms: dict[str, str]) -> None:
    feats = pd.read_csv(mushrooms["features"])
    targs = pd.read_csv(mushrooms["targets"])
    from_frames = make_bandit_env(BanditEnvSpec(), features=feats, targets=targs, seed=0)
    feats.to_parquet(tmp_path / "f.parquet")
    targs.to_parquet(tmp_path / "t.parquet")
    from_parquet = make_env(BanditEnvSpec(path=str(tmp_path), features="f.parquet", targets="t.parquet"), seed=0)
    joined = feats.assign(verdict=targs.verdict)
    joined.to_csv(tmp_path / "joined.csv", index=False)
    one_file = make_bandit_env(
        BanditEnvSpec(features=str(tmp_path / "joined.csv"), env_config={"target_column": "verdict"}), seed=0
    )
    for env in (from_parquet, one_file):
        assert np.array_equal(env.features, from_frames.features)
        assert np.array_equal(env.targets, from_frames.targets)


def test_forced_categorical_integer_column() -> None:
    table = pd.DataFrame({"code": [1, 2, 3, 1, 2, 3], "x": [0.0, 1, 2, 3, 4, 5]})
    x, names = encode_features(table, categorical=["code"])
    assert names == ["code=1", "code=2", "code=3", "x"]
    assert x.shape == (6, 4)


# --- bad input -------------------------------------------------------------------------------


def test_features_and_targets_of_different_lengths() -> None:
    with pytest.raises(BanditDataError, match=r"features has 5 rows but targets has 4"):
        make_bandit_env(
            BanditEnvSpec(), features=pd.DataFrame({"a": range(5)}), targets=pd.DataFrame({"y": [0, 1, 0, 1]})
        )


def test_target_column_with_one_class() -> None:
    with pytest.raises(BanditDataError, match=r"one class .*at least two arms"):
        make_bandit_env(
            BanditEnvSpec(), features=pd.DataFrame({"a": range(4)}), targets=pd.DataFrame({"y": ["cat"] * 4})
        )


def test_nans_in_features_name_the_column() -> None:
    feats = pd.DataFrame({"ok": [1.0, 2, 3, 4], "holes": [1.0, np.nan, 3, np.nan]})
    with pytest.raises(BanditDataError, match=r"NaN.*\['holes'\].*rows \[1, 3\]"):
        make_bandit_env(BanditEnvSpec(), features=feats, targets=pd.DataFrame({"y": [0, 1, 0, 1]}))


def test_missing_file_names_field_and_path(tmp_path: Path, mushrooms: dict[str, str]) -> None:
    spec = BanditEnvSpec(features=str(tmp_path / "nope.csv"), targets=mushrooms["targets"])
    with pytest.raises(BanditDataError, match=r"environment\.features: file not found: .*nope\.csv"):
        make_bandit_env(spec)


def test_unsupported_format_and_multi_column_targets(tmp_path: Path, mushrooms: dict[str, str]) -> None:
    (tmp_path / "f.json").write_text("{}")
    with pytest.raises(BanditDataError, match=r"unsupported format; use \.csv or \.parquet"):
        make_bandit_env(BanditEnvSpec(features=str(tmp_path / "f.json"), targets=mushrooms["targets"]))
    with pytest.raises(BanditDataError, match=r"exactly one column"):
        make_bandit_env(BanditEnvSpec(features=mushrooms["features"], targets=mushrooms["features"]))


def _write_module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))


def test_entrypoint_that_is_not_a_bandit_env(tmp_path: Path) -> None:
    _write_module(
        tmp_path,
        "not_a_bandit_mod",
        """
        class Gridworld:
            def reset(self):
                return 0
        """,
    )
    spec = BanditEnvSpec(entrypoint="not_a_bandit_mod:Gridworld", path=str(tmp_path))
    with pytest.raises(
        BanditDataError, match=r"built a Gridworld, which is not a bandit env \(missing step, arms, context_dim\)"
    ):
        make_bandit_env(spec)
    with pytest.raises(
        BanditDataError, match=r"environment.entrypoint: module 'not_a_bandit_mod' has no attribute 'Nothing'"
    ):
        make_bandit_env(BanditEnvSpec(entrypoint="not_a_bandit_mod:Nothing", path=str(tmp_path)))


def test_entrypoint_custom_env_gets_env_config(tmp_path: Path) -> None:
    _write_module(
        tmp_path,
        "two_arm_mod",
        """
        import numpy as np

        class TwoArms:
            def __init__(self, dim):
                self.arms, self.context_dim = 2, dim
            def reset(self):
                return np.eye(2, self.context_dim, dtype="float32")
            def step(self, arm):
                return self.reset(), float(arm == 1)
        """,
    )
    env = make_bandit_env(BanditEnvSpec(entrypoint="two_arm_mod:TwoArms", path=str(tmp_path), env_config={"dim": 5}))
    assert (env.arms, env.context_dim) == (2, 5)


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"features": "f.csv"}, "features given without targets"),
        ({"targets": "t.csv"}, "targets given without features"),
        ({"entrypoint": "m:E", "features": "f.csv"}, "either entrypoint or features/targets"),
        ({"entrypoint": "no_colon"}, "module:callable"),
        ({"name": "iris", "env_config": {"sed": 1}}, "not used by table bandits"),
    ],
)
def test_manifest_validation_names_the_environment_field(environment: dict[str, object], message: str) -> None:
    with pytest.raises(ManifestError, match=message) as info:
        load_manifest({"algorithm": {"name": "NeuralUCB"}, "environment": environment})
    assert "environment" in str(info.value)


def test_unknown_dataset_name_without_tables_is_a_clear_error() -> None:
    # refused at validation now (before training starts), naming the field
    with pytest.raises(
        AgileRLError, match=r"environment.name: 'titanic' is not a shipped dataset \(breast_cancer, iris, wine\)"
    ):
        load_manifest({"algorithm": {"name": "NeuralTS"}, "environment": {"name": "titanic"}})


def test_cli_validate_reports_bad_bandit_manifest(write_manifest, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = write_manifest(
        {"algorithm": {"name": "NeuralUCB", "lamb": -1}, "environment": {"env_type": "bandit", "features": "x.csv"}}
    )
    code, _out, err = run_cli("validate", path)
    assert code == 1
    assert "algorithm.lamb" in err and "features given without targets" in err
