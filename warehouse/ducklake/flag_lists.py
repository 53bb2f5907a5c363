"""``mirror.episode_flag_lists``: each episode's quality flags as one sorted list (warehouse
migration 0008), kept in the same commit as the flags it is made of.

The ``episodes`` view joins this table for its ``quality_flags`` column. Computing the lists
in the view meant aggregating the whole flags table for every curation, whichever episodes it
selected; here a batch rewrites only the lists of the episodes whose flags it changed. A batch
that truncates the flags table, or a snapshot load of it (which tombstones the rows the
snapshot lacks, whatever the staged rows say), rebuilds the whole table instead.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ducklake.statements import table_ref

#: The mirrored table the lists are made of, and the lists' own table (both schema mirror).
FLAGS = "episode_quality_flags"
LISTS = "episode_flag_lists"
_CHANGED = "_quarry_flag_episodes"  # the ids of the episodes whose flags a batch changed


def _lists_of(flags: str, where: str = "") -> str:
    return (
        f"SELECT episode_id, list_sort(list(flag)) FROM {flags} "
        f"WHERE NOT _deleted{where} GROUP BY episode_id"
    )


def refresh_lists(con: duckdb.DuckDBPyConnection, alias: str, staged: pa.Table) -> None:
    """Rewrite the lists of the episodes that ``staged`` (a batch's staged rows of the flags
    table, text columns) names, after those rows were applied, on the writer connection
    inside the batch's transaction."""
    if staged.num_rows == 0:
        return
    flags, lists = table_ref(alias, "mirror", FLAGS), table_ref(alias, "mirror", LISTS)
    changed = pa.table({"episode_id": pc.unique(staged.column("episode_id").combine_chunks())})
    ids = f"(SELECT CAST(episode_id AS UUID) FROM {_CHANGED})"
    con.register(_CHANGED, changed)
    try:
        con.execute(f"DELETE FROM {lists} WHERE episode_id IN {ids}")
        con.execute(f"INSERT INTO {lists} {_lists_of(flags, f' AND episode_id IN {ids}')}")
    finally:
        con.unregister(_CHANGED)


def rebuild_lists(con: duckdb.DuckDBPyConnection, alias: str) -> None:
    """Rewrite every list from the flags table (after a truncate or a snapshot load of it)."""
    flags, lists = table_ref(alias, "mirror", FLAGS), table_ref(alias, "mirror", LISTS)
    con.execute(f"DELETE FROM {lists}")
    con.execute(f"INSERT INTO {lists} {_lists_of(flags)}")
