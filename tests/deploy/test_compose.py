"""``docker-compose.yml`` and the ``Dockerfile``, checked without Docker (none on these
machines): the file validates against the Compose specification's JSON schema (kept in
``deploy/compose-spec/`` with its version), every ``QUARRY_`` variable it sets is one the
settings read (the settings are built from each service's environment and every variable is
found in them with its value), every command it runs is one the real CLI accepts, and the
image's build step is the README's install."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest
import yaml
from pydantic import BaseModel, SecretStr

from quarry.settings import Settings
from tests.fixtures.stack import QUARRY

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SCHEMA_DIR = ROOT / "deploy" / "compose-spec"
#: Variables Quarry's containers get that are not Quarry settings: read by botocore (s3fs).
NOT_SETTINGS = {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
_INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


def interpolate(value: str) -> str:
    """``${NAME:-default}`` as Compose resolves it with ``NAME`` unset (its default)."""

    def default(match: re.Match[str]) -> str:
        if match.group(2) is None:
            raise AssertionError(f"{match.group(0)} has no default: `docker compose up` fails")
        return match.group(2)

    return _INTERPOLATION.sub(default, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def quarry_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("image") == "quarry:local"
    }


def test_the_file_validates_against_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    schema = json.loads((SCHEMA_DIR / "compose-spec.json").read_text())
    version = (SCHEMA_DIR / "VERSION").read_text()
    assert "compose-spec/compose-spec" in version and "schema/compose-spec.json" in version
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(compose, schema, cls=jsonschema.Draft7Validator)
    # and a broken file is refused, so the check has teeth
    broken = {**compose, "services": {"x": {"image": "a", "deploy": {"replicas": [2]}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft7Validator)


def test_the_topology(compose: dict[str, Any]) -> None:
    services = compose["services"]
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16" and "wal_level=logical" in postgres["command"]
    assert any(v.startswith("postgres-data:") for v in postgres["volumes"])
    assert services["quarry-service"]["deploy"]["replicas"] >= 2
    assert services["quarry-cdc"]["deploy"]["replicas"] == 1  # one follower per slot
    assert services["quarry-cdc"]["profiles"] == ["pgoutput"]
    assert services["debezium-server"]["profiles"] == ["debezium"]
    assert services["clickhouse"]["profiles"] == ["clickhouse"]
    worker = services["quarry-worker"]  # one pipeline worker, an executor ID of its own
    assert worker["command"] == ["worker", "--executor-id", "compose-worker-1"]
    assert "compose-worker-1" in worker["healthcheck"]["test"][-1]
    assert "replicas" not in worker.get("deploy", {})  # replicas would share the ID
    for name, service in services.items():
        if service.get("restart") != "no" and not name.startswith("quarry-service-"):
            assert "healthcheck" in service, name
    named = set(compose["volumes"])
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source.startswith("./") or source in named, volume


def test_no_quarry_container_keeps_state_on_a_volume(compose: dict[str, Any]) -> None:
    """The replicas share Postgres and MinIO only: manifests in S3, no shared volume."""
    for name, service in quarry_services(compose).items():
        assert "volumes" not in service, name
        env = {k: interpolate(str(v)) for k, v in service["environment"].items()}
        assert env["QUARRY_MANIFESTS__URL"].startswith("s3://"), name
        settings = settings_from({k: v for k, v in env.items() if k.startswith("QUARRY_")})
        assert settings.service_settings().manifests.url == env["QUARRY_MANIFESTS__URL"]
    assert "quarry-data" not in compose["volumes"]


def test_every_quarry_variable_is_a_setting_with_its_value(compose: dict[str, Any]) -> None:
    for name, service in quarry_services(compose).items():
        env = {k: interpolate(str(v)) for k, v in service["environment"].items()}
        quarry = {k: v for k, v in env.items() if k.startswith("QUARRY_")}
        assert set(env) - set(quarry) <= NOT_SETTINGS, name
        settings = settings_from(quarry)
        for variable, value in quarry.items():
            assert same(found(settings, variable), value), (name, variable)
        settings.service_settings()  # the service's settings resolve: nothing embedded needed
        settings.warehouse_config().check_complete()


def settings_from(env: dict[str, str]) -> Settings:
    saved = {k: v for k, v in os.environ.items() if k.startswith("QUARRY_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(env)
    try:
        return Settings()
    finally:
        for key in env:
            del os.environ[key]
        os.environ.update(saved)


def same(setting: Any, text: str) -> bool:
    """Whether the setting holds what the variable's text says."""
    if isinstance(setting, bool):
        return setting == (text.lower() in ("1", "true", "yes", "on"))
    if isinstance(setting, int | float):
        return setting == float(text)
    return str(setting) == text


def found(settings: Settings, variable: str) -> Any:
    """The value ``variable`` set in ``settings`` (fails if it names no setting)."""
    value: Any = settings
    for part in variable.removeprefix("QUARRY_").lower().split("__"):
        assert isinstance(value, BaseModel) and part in type(value).model_fields, variable
        value = getattr(value, part)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_debezium_server_posts_to_the_service_it_can_authenticate_to(
    compose: dict[str, Any], pg_conn: psycopg.Connection[Any]
) -> None:
    services = compose["services"]
    debezium = {
        k: interpolate(str(v)) for k, v in services["debezium-server"]["environment"].items()
    }
    service_env = services["quarry-service"]["environment"]
    assert debezium["DEBEZIUM_SINK_HTTP_URL"] == "http://quarry-service:8000/v1/cdc/debezium"
    assert debezium["DEBEZIUM_SINK_HTTP_AUTHENTICATION_TYPE"] == "standard-webhooks"
    secret = interpolate(service_env["QUARRY_SERVICE__WEBHOOK_SECRET"])
    assert debezium["DEBEZIUM_SINK_HTTP_AUTHENTICATION_WEBHOOK_SECRET"] == secret
    tables = debezium["DEBEZIUM_SOURCE_TABLE_INCLUDE_LIST"].split(",")
    assert sorted(tables) == sorted(f"public.{t}" for t in published_tables(pg_conn))
    assert debezium["DEBEZIUM_SOURCE_SLOT_NAME"] != "quarry_cdc"  # not the follower's slot


def commands(compose: dict[str, Any]) -> list[list[str]]:
    """Every ``quarry`` command line the file runs: commands and health checks."""
    out = []
    for service in quarry_services(compose).values():
        out.append(list(service["command"]))
        test = service.get("healthcheck", {}).get("test", [])
        if test[:2] == ["CMD", "quarry"]:
            out.append(test[2:])
    return out


# Parses each line with the real command tree in one process (``--help`` after the options:
# click parses each option first, and an unknown one is a usage error, exit 2).
_PARSE = """
import json, sys
import click
from quarry.cli import cli
codes = []
for line in json.loads(sys.argv[1]):
    try:
        cli.main([*line, "--help"], prog_name="quarry", standalone_mode=False)
        codes.append(0)
    except click.UsageError as error:
        codes.append(error.exit_code)
print(json.dumps(codes))
"""


def test_every_command_exists_in_the_cli(compose: dict[str, Any]) -> None:
    lines = sorted({tuple(line) for line in commands(compose)})
    assert ("migrate",) in lines and ("cdc", "follow") in lines and ("cdc", "status") in lines
    probe = [*lines, ("serve", "--no-such-flag"), ("no-such-command",)]
    python = str(Path(QUARRY).with_name("python"))
    result = subprocess.run(
        [python, "-c", _PARSE, json.dumps(probe)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    codes = json.loads(result.stdout.strip().splitlines()[-1])
    assert codes == [0] * len(lines) + [2, 2], list(zip(probe, codes, strict=True))


def test_the_image_builds_with_the_readme_install() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    readme = (ROOT / "README.md").read_text()
    installs = re.findall(r"```text\n(make \.venv/\.installed)\n```", readme)
    assert installs == ["make .venv/.installed"]
    runs = [line.removeprefix("RUN ").strip() for line in dockerfile.splitlines()]
    assert installs[0] in runs
    assert re.search(r"^FROM python:3\.11", dockerfile, re.M)
    makefile = (ROOT / "Makefile").read_text()
    assert "$(BIN)/python -m pip install -qq -e '.[dev]'" in makefile
    assert 'ENTRYPOINT ["quarry"]' in dockerfile


def published_tables(conn: psycopg.Connection[Any]) -> list[str]:
    """The tables of the pgoutput publication (what the follower mirrors) in a database
    every migration has run on: Debezium must read the same ones."""
    rows = conn.execute(
        "SELECT tablename FROM pg_publication_tables WHERE pubname = 'quarry_cdc'"
    ).fetchall()
    assert rows, "the migrations create no publication quarry_cdc"
    return [str(row[0]) for row in rows]
