"""Settings, the launcher's environment, and errors: built once, validated, picklable."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from trainer.config import TrainerConfig, load_config, parse_override
from trainer.errors import (
    PREFLIGHT_CODES,
    CheckpointError,
    ConfigError,
    ExitCode,
    ManifestFetchError,
    PreflightError,
    TrainerError,
)
from trainer.world import World


def test_defaults_put_the_cache_under_the_state_dir_and_share_the_seed(tmp_path: Path) -> None:
    config = load_config(values={"state_dir": str(tmp_path), "seed": 11})
    assert config.loader.cache.root == tmp_path / "cache"
    assert config.loader.seed == 11
    assert config.checkpoints_dir == tmp_path / "checkpoints"


def test_file_then_overrides_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    path.write_text("steps = 5\n[optim]\nlr = 0.5\n[loader]\nbatch_size = 3\n")
    config = load_config(path, ["optim.lr=0.25", "checkpoint.mode=sync"], {"steps": 9})
    assert (config.steps, config.optim.lr, config.loader.batch_size) == (9, 0.25, 3)
    assert config.checkpoint.mode == "sync"


def test_json_round_trip_keeps_secrets(tmp_path: Path) -> None:
    config = load_config(values={"state_dir": str(tmp_path), "loader.store.s3_secret": "s3cr3t"})
    path = tmp_path / "config.json"
    path.write_text(config.to_json())
    again = load_config(path)
    assert again == config
    assert again.loader.store.s3_secret is not None
    assert again.loader.store.s3_secret.get_secret_value() == "s3cr3t"


@pytest.mark.parametrize(
    "override",
    [
        "steps=-1",
        "checkpoint.mode=sometimes",
        "nonsense.key=1",
        "run_name=a/b",
        "faults.step_delay_s=-1",
    ],
)
def test_invalid_settings_raise_config_error(override: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[override])
    assert caught.value.exit_code == ExitCode.CONFIG


@pytest.mark.parametrize("text", ["noequals", "=1", "a..b=1"])
def test_malformed_override(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_override(text)


def test_override_values_parse_as_json_else_text() -> None:
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_override("a=hello") == (["a"], "hello")


def test_malformed_config_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.path == str(path)


def test_world_from_torchrun_environment() -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_MAX_RESTARTS": "3",
        "TORCHELASTIC_RUN_ID": "job-1",
    }
    world = World.from_environ(env)
    assert (world.rank, world.node_rank, world.num_nodes, world.restart_count) == (3, 1, 2, 2)
    assert world.run_id == "job-1" and world.launched and not world.is_coordinator


def test_world_from_a_pytorchjob_without_local_variables() -> None:
    world = World.from_environ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1"})
    assert (world.local_rank, world.local_world_size, world.node_rank, world.num_nodes) == (
        0,
        1,
        1,
        2,
    )
    assert world.is_node_leader and world.run_id is None


def test_lone_process_is_a_world_of_one() -> None:
    world = World.from_environ({})
    assert (world.rank, world.world_size, world.launched) == (0, 1, False)


@pytest.mark.parametrize("env", [{"WORLD_SIZE": "x"}, {"WORLD_SIZE": "2", "RANK": "2"}])
def test_bad_launcher_environment(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        World.from_environ(env)


@pytest.mark.parametrize(
    "error",
    [
        TrainerError("boom", rank=1, retryable=True),
        ConfigError("bad", path="/x"),
        ManifestFetchError("gone", manifest_id="ab" * 32),
        CheckpointError("partial", path="/c"),
        PreflightError("disk full", check="disk", rank=0, path="/d"),
    ],
)
def test_errors_pickle_with_their_attributes(error: TrainerError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert again.to_dict() == error.to_dict()
    assert str(again) == str(error)
    json.dumps(again.to_dict())


def test_preflight_checks_have_distinct_exit_codes() -> None:
    codes = {PreflightError("x", check=name).exit_code for name in PREFLIGHT_CODES}
    assert len(codes) == len(PREFLIGHT_CODES)
    assert not codes & {ExitCode.OK, ExitCode.FAILED}


def test_trainer_config_needs_no_arguments() -> None:
    assert TrainerConfig.model_validate({}).launch.nproc_per_node == 2
