"""The curation guard against a corpus of allowed and hostile queries."""

from __future__ import annotations

import pytest

from curation.guard import CurationRefusedError, check_curation

VIEWS = frozenset(
    {
        "episodes",
        "episode_labels",
        "episode_quality_flags",
        "episode_stats",
        "robots",
        "tasks",
        "manifests",
        "manifest_episodes",
    }
)

ALLOWED = [
    "SELECT * FROM episodes",
    "select id from episodes where success and task_id = 'pick' limit 10",
    "SELECT e.id, e.robot_id FROM episodes e JOIN robots r ON r.id = e.robot_id "
    "WHERE r.site = 'lab-a' ORDER BY e.id",
    "SELECT id FROM episodes WHERE id NOT IN (SELECT episode_id FROM episode_quality_flags "
    "WHERE flag = 'camera_blackout')",
    "WITH picks AS (SELECT * FROM episodes WHERE task_id = 'pick') SELECT id FROM picks",
    "SELECT id FROM episodes QUALIFY row_number() OVER (PARTITION BY task_id ORDER BY id) <= 5",
    "SELECT id FROM episodes WHERE abs(hash_bucket) < 3".replace("hash_bucket", "steps % 10"),
    "SELECT id FROM episodes WHERE ('0x' || substring(md5(CAST(id AS VARCHAR)), 1, 2)) < '0x80'",
    "SELECT l.episode_id AS id, l.start_ns, l.end_ns FROM episode_labels l WHERE key = 'phase'",
    "SELECT task_id, count(*), sum(end_ns - start_ns) / 1e9 AS seconds FROM episodes "
    "GROUP BY task_id HAVING count(*) > 1",
    "SELECT id FROM episodes WHERE started_at >= TIMESTAMP '2026-01-01' AND pipeline_version "
    "BETWEEN 1 AND 3",
    "SELECT id FROM episodes -- a trailing comment is fine\n",
]

HOSTILE = [
    ("DROP TABLE episodes", "statement"),
    ("DELETE FROM episodes", "statement"),
    ("INSERT INTO episodes VALUES (1)", "statement"),
    ("UPDATE episodes SET success = true", "statement"),
    ("CREATE TABLE x AS SELECT 1", "statement"),
    ("SELECT 1; DROP TABLE episodes", "statements"),
    ("SELECT * FROM episodes; SELECT 1", "statements"),
    ("ATTACH 'x.db' AS x", "statement"),
    ("COPY episodes TO '/tmp/x.csv'", "statement"),
    ("PRAGMA database_list", "statement"),
    ("SET memory_limit = '100GB'", "statement"),
    ("INSTALL httpfs", "statement"),
    ("LOAD httpfs", "statement"),
    ("SELECT * FROM read_parquet('/etc/passwd')", "table_function"),
    ("SELECT * FROM read_csv('/etc/passwd')", "table_function"),
    ("SELECT * FROM read_text('/etc/passwd')", "table_function"),
    ("SELECT * FROM glob('/*')", "table_function"),
    ("SELECT * FROM query('SELECT 1')", "table_function"),
    (
        "SELECT * FROM postgres_query('wh', 'SELECT pg_read_file(''/etc/passwd'')')",
        "table_function",
    ),
    ("SELECT postgres_query('wh', 'SELECT 1')", "function"),
    ("SELECT * FROM '/etc/passwd'", "relation"),
    ("SELECT * FROM 'https://example.com/x.parquet'", "relation"),
    ("SELECT * FROM wh.main.episodes", "qualified_name"),
    ("SELECT * FROM main.episodes", "qualified_name"),
    ("SELECT * FROM __ducklake_metadata_wh.ducklake_snapshot", "qualified_name"),
    ("SELECT * FROM duckdb_settings()", "table_function"),
    ("SELECT * FROM pg_catalog.pg_tables", "qualified_name"),
    ("SELECT * FROM information_schema.tables", "qualified_name"),
    ("SELECT * FROM secrets", "relation"),
    ("SELECT * FROM episodes AT (VERSION => 1)", "time_travel"),
    ("SELECT getenv('HOME')", "function"),
    ("SELECT current_setting('access_mode')", "function"),
    ("SELECT random() FROM episodes", "nondeterministic"),
    ("SELECT now()", "function"),
    ("SELECT * FROM episodes WHERE id IN (SELECT * FROM read_json('/x'))", "table_function"),
    ("WITH x AS (SELECT * FROM glob('/*')) SELECT * FROM x", "table_function"),
    ("SELECT count(*) FROM range(1000000000000)", "table_function"),
    ("SELECT", "syntax"),
    ("SELEC * FROM episodes", "syntax"),
    ('SELECT * FROM "episodes', "syntax"),  # unterminated quotes fail in the tokenizer
    ("SELECT id FROM episodes WHERE task_id = 'pick", "syntax"),
    ('"\u00f6', "syntax"),
    ("SELECT id FROM episodes WHERE task_id = 'a\x00'", "syntax"),  # NUL: no text column holds it
    ("", "statements"),
    # More table functions: other scanners, catalog and settings listings.
    ("SELECT * FROM generate_series(1, 100)", "table_function"),
    ("SELECT * FROM postgres_scan('host=/tmp', 'public', 'api_tokens')", "table_function"),
    ("SELECT * FROM sqlite_scan('x.db', 't')", "table_function"),
    ("SELECT * FROM read_blob('/etc/passwd')", "table_function"),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", "table_function"),
    ("SELECT * FROM parquet_scan('/x.parquet')", "table_function"),
    ("SELECT * FROM iceberg_scan('s3://b/t')", "table_function"),
    ("SELECT * FROM ducklake_snapshots('wh')", "table_function"),
    ("SELECT * FROM wh.snapshots()", "table_function"),
    ("SELECT * FROM duckdb_secrets()", "table_function"),
    ("SELECT * FROM query_table('episodes')", "table_function"),
    # Catalog, schema and database names, quoted or not.
    ("SELECT * FROM mirror.episodes", "qualified_name"),
    ('SELECT * FROM "wh"."main"."episodes"', "qualified_name"),
    ("SELECT * FROM quarry_catalog.public.ducklake_snapshot", "qualified_name"),
    ('SELECT * FROM "__ducklake_metadata_wh"."ducklake_snapshot"', "qualified_name"),
    ("SELECT * FROM pg_catalog.pg_authid", "qualified_name"),
    ("SELECT e.id FROM episodes e WHERE wh.main.episodes.success", "qualified_name"),
    ('SELECT * FROM "/etc/passwd"', "relation"),
    # postgres_query and friends, in every position.
    ("SELECT postgres_execute('wh', 'DROP TABLE episodes')", "function"),
    ("CALL postgres_execute('wh', 'DROP TABLE episodes')", "statement"),
    (
        "SELECT id FROM episodes WHERE id IN (SELECT * FROM postgres_query('wh', 'SELECT 1'))",
        "table_function",
    ),
    ("SELECT current_database()", "function"),
    ("SELECT version()", "function"),
    ("SELECT load_extension('x')", "function"),
    ("SELECT getvariable('x')", "function"),
    # Several statements, however they are hidden.
    ("SELECT 1 AS id; -- x\n; DROP TABLE episodes", "statements"),
    ("SELECT id FROM episodes;\nATTACH 'x.db'", "statements"),
    ("/* a */ SELECT id FROM episodes /* b */; /* c */ COPY episodes TO '/tmp/x'", "statements"),
    # Statements that are not queries.
    ("CHECKPOINT", "statement"),
    ("DETACH wh", "statement"),
    ("USE wh", "statement"),
    ("DESCRIBE episodes", "statement"),
    ("SET VARIABLE x = 1", "statement"),
    ("EXPORT DATABASE '/tmp/x'", "syntax"),
    # Runaway queries the guard can see: generated rows, recursion, huge strings, sampling.
    (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n AS id FROM r",
        "recursive",
    ),
    ("SELECT unnest(range(1000000000000)) AS id", "function"),
    ("SELECT repeat('x', 1000000000) AS id FROM episodes", "function"),
    ("SELECT * FROM episodes USING SAMPLE 10", "node"),
    ("SELECT * FROM episodes e POSITIONAL JOIN episodes f", "nondeterministic"),
    ("SELECT * FROM episodes WHERE id = $1", "node"),
    ("SELECT * FROM episodes AT (TIMESTAMP => TIMESTAMP '2026-01-01')", "time_travel"),
]


@pytest.mark.parametrize("sql", ALLOWED)
def test_allowed_queries_pass(sql: str) -> None:
    checked = check_curation(sql, VIEWS)
    # What runs is re-rendered from the tree, never the user's text.
    assert "--" not in checked.render()
    check_curation(checked.render(), VIEWS)


@pytest.mark.parametrize(("sql", "reason"), HOSTILE)
def test_hostile_queries_are_refused(sql: str, reason: str) -> None:
    with pytest.raises(CurationRefusedError) as refused:
        check_curation(sql, VIEWS)
    assert refused.value.status == 400
    assert refused.value.context["reason"] == reason, refused.value.message


def test_refusal_names_the_node() -> None:
    with pytest.raises(CurationRefusedError) as refused:
        check_curation("SELECT id FROM episodes WHERE getenv('X') = 'y'", VIEWS)
    assert "getenv" in refused.value.message
    assert "GETENV" in refused.value.context["node"].upper()


def test_oversized_query_is_refused() -> None:
    sql = "SELECT id FROM episodes WHERE " + " OR ".join(["success"] * 20_000)
    with pytest.raises(CurationRefusedError):
        check_curation(sql, VIEWS)


def test_renders_for_clickhouse() -> None:
    checked = check_curation("SELECT id FROM episodes WHERE md5(CAST(id AS VARCHAR)) < '8'", VIEWS)
    assert "MD5" in checked.render("clickhouse").upper()


def test_normalized_text_is_stable_across_spelling() -> None:
    a = check_curation("select id from episodes where success", VIEWS).normalized
    b = check_curation("SELECT  id\nFROM episodes   WHERE success -- note", VIEWS).normalized
    assert a == b


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("SELECT unnest(topics) FROM episodes", "function unnest"),
        ("SELECT * FROM range(10)", "table function 'range'"),
        ("SELECT * FROM generate_series(1, 3)", "table function 'generate_series'"),
        ("SELECT list_transform([1], x -> x) AS y FROM episodes", "function list_transform"),
        ("SELECT Getenv('HOME') FROM episodes", "function getenv"),
    ],
)
def test_refusals_quote_the_users_own_function_names(sql: str, named: str) -> None:
    """sqlglot maps unnest to EXPLODE and range to GENERATE_SERIES; a refusal names what the
    user wrote."""
    with pytest.raises(CurationRefusedError) as refused:
        check_curation(sql, VIEWS)
    assert named in refused.value.message


@pytest.mark.parametrize("sql", ["SELEC * FROM episodes", "  selec id from episodes", "SELECTT 1"])
def test_a_typo_in_the_first_keyword_is_a_syntax_error_that_says_so(sql: str) -> None:
    with pytest.raises(CurationRefusedError) as refused:
        check_curation(sql, VIEWS)
    assert refused.value.context["reason"] == "syntax"
    word = sql.split()[0]
    assert f"{word!r} at line 1" in refused.value.message
    assert "starts with SELECT or WITH" in refused.value.message
