"""Fixture modules shared by every package's tests live in tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.warehouse",
    "tests.fixtures.stack",
    "tests.fixtures.clickhouse",
    "tests.fixtures.multihost",
    "tests.fixtures.crashes",
]
