"""External mode: a DuckLake whose catalog is a Postgres database reached by its DSN and whose
Parquet data is in S3, served by moto's S3 server on a loopback port and reached through
DuckDB's ``httpfs`` loaded from the ``duckdb-extension-httpfs`` wheel (signature checks on).
The readers stay locked down: the lake's prefix is the one place outside the catalog they
may read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from quarry.settings import Settings
from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.s3 import moto_s3, s3_section
from tests.warehouse.conftest import batch, episode_row, event, robot
from warehouse.changes import Op
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.errors import QueryError, WarehouseError


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """moto's S3 server with buckets ``lake`` and ``other``, and objects outside the lake."""
    with moto_s3("lake", "other") as client:
        client.put_object(Bucket="other", Key="secret.csv", Body=b"a\n1\n")
        client.put_object(Bucket="lake", Key="outside/x.csv", Body=b"a\n1\n")
        yield client


def s3_config(postgres: EmbeddedPostgres, s3: Any, name: str) -> DuckLakeConfig:
    postgres.ensure_database(name)
    return DuckLakeConfig(
        catalog_dsn=SecretStr(postgres.dsn(name)),
        data_url=f"s3://lake/{name}",
        s3=s3_section(s3),
        data_inlining_row_limit=0,  # every commit writes Parquet: the bucket must hold it
    )


def keys(s3: Any, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket="lake", Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", [])]


def test_the_lake_writes_and_reads_its_data_in_s3(
    postgres: EmbeddedPostgres, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may land in a local folder
    config = s3_config(postgres, s3, "s3_lake")
    a, b = episode_row(), episode_row()
    with DuckLakeWarehouse(config) as lake:
        lake.bootstrap()
        lake.apply(
            batch(
                event(Op.CREATE, "robots", 100, after=robot()),
                event(Op.CREATE, "episodes", 100, 2, after=a),
                event(Op.CREATE, "episodes", 100, 3, after=b),
            )
        )
        lake.apply(batch(event(Op.DELETE, "episodes", 200, before={"id": b["id"]})))
        rows = lake.query_arrow("SELECT id FROM episodes").column(0).to_pylist()
        assert [str(r) for r in rows] == [a["id"]]
        checks = lake.query_arrow("SELECT current_setting('allow_unsigned_extensions') AS u")
        assert checks.to_pylist() == [{"u": False}]  # httpfs came signed from its wheel
        lake.maintain()
    assert any(k.endswith(".parquet") for k in keys(s3, "s3_lake/"))
    assert list(tmp_path.iterdir()) == []
    with DuckLakeWarehouse(config) as again:  # another process's view: catalog + bucket
        assert again.query_arrow("SELECT count(*) AS n FROM episodes").to_pylist() == [{"n": 1}]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('s3://other/secret.csv')",
        "SELECT * FROM read_csv('s3://lake/outside/x.csv')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SET enable_external_access = true",
        "CREATE SECRET escape (TYPE s3, KEY_ID 'k', SECRET 's')",
    ],
)
def test_readers_reach_the_lake_prefix_only(postgres: EmbeddedPostgres, s3: Any, sql: str) -> None:
    config = s3_config(postgres, s3, "s3_guard")
    with DuckLakeWarehouse(config) as lake:
        lake.bootstrap()
        with pytest.raises(QueryError):
            lake.query_arrow(sql)


def test_a_missing_bucket_is_a_clear_error(postgres: EmbeddedPostgres, s3: Any) -> None:
    """(moto does not check credentials unless told to, so a missing bucket stands in for
    an S3 that refuses the writer.)"""
    config = s3_config(postgres, s3, "s3_missing").model_copy(
        update={"data_url": "s3://no-such-bucket/lake"}
    )
    with DuckLakeWarehouse(config) as lake, pytest.raises(WarehouseError) as caught:
        lake.bootstrap()
    assert "no-such-bucket" in str(caught.value)


def test_settings_take_the_lake_in_s3_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {
        "QUARRY_WAREHOUSE__CATALOG_DSN": "host=db user=quarry dbname=quarry_catalog",
        "QUARRY_WAREHOUSE__DATA_URL": "s3://quarry-lake/lake",
        "QUARRY_WAREHOUSE__S3__ENDPOINT": "minio:9000",
        "QUARRY_WAREHOUSE__S3__USE_SSL": "false",
        "QUARRY_WAREHOUSE__S3__URL_STYLE": "path",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = Settings(state_dir=tmp_path).warehouse_config()
    assert isinstance(config, DuckLakeConfig) and config.data_path is None
    assert config.data_location == "s3://quarry-lake/lake/"
    assert config.s3.endpoint == "minio:9000" and not config.s3.use_ssl
    with pytest.raises(ValueError, match="data_url"):
        DuckLakeConfig(data_url="https://not-s3/x")
