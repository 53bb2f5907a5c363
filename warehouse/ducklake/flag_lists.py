"""``mirror.episode_flag_lists``: each flagged episode's quality flags as one sorted list, with
the episode's robot and task (warehouse migration 0008), kept in the same commit as the rows
it is made of.

The ``episodes`` view joins this table for its ``quality_flags`` column on the episode's id,
robot and task. Computing the lists in the view meant aggregating the whole flags table for
every curation, whichever episodes it selected. The robot and task are in the join so that a
curation's filters on them reach this table too: the table is sorted by them, and the engine
reads only the row groups of the robots and tasks the curation names.

What keeps the table true, batch by batch, after the batch's rows are applied:

- Flags changed: the lists of those episodes are rewritten from the flags table. Their robot
  and task come from the episode rows this batch wrote, else from the list the episode had,
  else (the first flag of an episode written before this batch) from the episode table.
- Episodes changed: a list whose robot or task no longer matches its episode's row (written in
  this batch) is updated. The source never changes them, but the join would lose the flags of
  an episode that moved.
- A truncate of either table, or a snapshot load of either (which tombstones the rows the
  snapshot lacks, whatever the staged rows say): the whole table is rebuilt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ducklake.statements import table_ref

#: The mirrored tables the lists are made of, and the lists' own table (all schema mirror).
FLAGS = "episode_quality_flags"
EPISODES = "episodes"
LISTS = "episode_flag_lists"
_CHANGED = "_quarry_flag_episodes"  # ids (text, ``episode_id``) a batch's lists lookups read
_PLACES = "_quarry_flag_places"  # robots and tasks by episode id (text, ``id``)


class FlagLists:
    """The statements that keep the lists of one lake (``alias``), run on the writer
    connection inside a batch's transaction."""

    def __init__(self, alias: str) -> None:
        self._flags = table_ref(alias, "mirror", FLAGS)
        self._episodes = table_ref(alias, "mirror", EPISODES)
        self._lists = table_ref(alias, "mirror", LISTS)

    def after_batch(
        self,
        con: duckdb.DuckDBPyConnection,
        flags: pa.Table | None,
        episodes: pa.Table | None,
    ) -> None:
        """Bring the lists up to date with a batch whose staged rows of the flags table and
        of the episode table (text columns, with ``_lsn``) are ``flags`` and ``episodes``,
        after the batch applied them. Two lookups in the common case (new episodes and their
        flags): the episode rows the batch wrote and the lists of the episodes it named; then
        the rewritten lists."""
        flagged = _ids(flags, "episode_id")
        named = (
            pa.concat_tables([flagged, _ids(episodes, "id")]).group_by("episode_id").aggregate([])
        )
        if named.num_rows == 0:
            return
        since = None if episodes is None else pc.min(episodes.column("_lsn")).as_py()
        with _registered(con, _CHANGED, named):
            # The rows this batch wrote are at its versions or newer; an episode whose staged
            # row was older than the stored one kept a row (and a list) that already agree.
            fresh = (
                _EMPTY
                if since is None
                else self._select(con, _FRESH.format(self._episodes), [since])
            )
            listed = self._select(con, _LISTED.format(self._lists))
        moved = _moved(listed, fresh, flagged)
        if moved.num_rows:
            with _registered(con, _PLACES, moved):
                con.execute(
                    f"UPDATE {self._lists} AS l SET robot_id = p.robot_id, task_id = p.task_id "
                    f"FROM {_PLACES} AS p WHERE l.episode_id = CAST(p.id AS UUID)"
                )
        if flagged.num_rows:
            self._rewrite(con, flagged, fresh, listed)

    def rebuild(self, con: duckdb.DuckDBPyConnection) -> None:
        """Rewrite every list from the flags and episode tables."""
        con.execute(f"DELETE FROM {self._lists}")
        con.execute(
            f"INSERT INTO {self._lists} "
            "SELECT f.episode_id, e.robot_id, e.task_id, list_sort(list(f.flag)) "
            f"FROM {self._flags} AS f LEFT JOIN {self._episodes} AS e "
            "ON e.id = f.episode_id AND NOT e._deleted "
            "WHERE NOT f._deleted GROUP BY f.episode_id, e.robot_id, e.task_id"
        )

    def _rewrite(
        self,
        con: duckdb.DuckDBPyConnection,
        flagged: pa.Table,
        fresh: pa.Table,
        listed: pa.Table,
    ) -> None:
        """Rewrite the lists of the episodes ``flagged`` names from the flags table, each with
        its robot and task: from the row this batch wrote, else from its list, else (an
        episode's first flag, raised in a later transaction than the episode) from the
        episode table, the one lookup that reads every episode's id."""
        known = pa.concat_tables([fresh, _without(listed, fresh.column("id"))])
        rest = _without(flagged.rename_columns(["id"]), known.column("id"))
        with _registered(con, _CHANGED, flagged):
            if rest.num_rows:
                found = self._select(con, _ANY.format(self._episodes, _REST), tables={_REST: rest})
                known = pa.concat_tables([known, found])
            had_lists = pc.any(pc.is_in(flagged.column("episode_id"), listed.column("id")))
            if had_lists.as_py():
                con.execute(f"DELETE FROM {self._lists} WHERE episode_id IN {_UUIDS}")
            with _registered(con, _PLACES, known):
                con.execute(
                    f"INSERT INTO {self._lists} "
                    "SELECT f.episode_id, p.robot_id, p.task_id, list_sort(list(f.flag)) "
                    f"FROM {self._flags} AS f LEFT JOIN {_PLACES} AS p "
                    "ON CAST(p.id AS UUID) = f.episode_id "
                    f"WHERE NOT f._deleted AND f.episode_id IN {_UUIDS} "
                    "GROUP BY f.episode_id, p.robot_id, p.task_id"
                )

    @staticmethod
    def _select(
        con: duckdb.DuckDBPyConnection,
        sql: str,
        params: list[object] | None = None,
        *,
        tables: dict[str, pa.Table] | None = None,
    ) -> pa.Table:
        """Rows of (``id`` text, ``robot_id``, ``task_id``)."""
        with contextlib.ExitStack() as stack:
            for name, rows in (tables or {}).items():
                stack.enter_context(_registered(con, name, rows))
            return con.execute(sql, params or []).to_arrow_table().cast(_PLACE)


_PLACE = pa.schema([("id", pa.string()), ("robot_id", pa.string()), ("task_id", pa.string())])
_EMPTY = _PLACE.empty_table()
_REST = "_quarry_flag_rest"  # flagged episodes found neither in the batch nor in a list
_UUIDS = f"(SELECT CAST(episode_id AS UUID) FROM {_CHANGED})"
_COLUMNS = "CAST(id AS VARCHAR) AS id, robot_id, task_id"
#: The episode rows of ``_CHANGED`` at versions of this batch or newer ($1: its lowest LSN).
_FRESH = f"SELECT {_COLUMNS} FROM {{}} WHERE _lsn >= $1 AND NOT _deleted AND id IN {_UUIDS}"
#: The lists of ``_CHANGED``.
_LISTED = (
    "SELECT CAST(episode_id AS VARCHAR) AS id, robot_id, task_id FROM {} "
    f"WHERE episode_id IN {_UUIDS}"
)
#: The live episode rows of a registered table of ids (``id``), whatever their version.
_ANY = (
    f"SELECT {_COLUMNS} FROM {{}} WHERE NOT _deleted AND id IN (SELECT CAST(id AS UUID) FROM {{}})"
)


def _ids(staged: pa.Table | None, column: str) -> pa.Table:
    """The distinct ids of a staged table's ``column``, as ``episode_id`` (text)."""
    if staged is None:
        return pa.table({"episode_id": pa.array([], pa.string())})
    values = pc.unique(staged.column(column).combine_chunks()).cast(pa.string())
    return pa.table({"episode_id": values})


def _without(table: pa.Table, ids: pa.ChunkedArray) -> pa.Table:
    """The rows of ``table`` whose ``id`` is not in ``ids``."""
    if table.num_rows == 0 or len(ids) == 0:
        return table
    return table.filter(pc.invert(pc.is_in(table.column("id"), ids.combine_chunks())))


def _moved(listed: pa.Table, fresh: pa.Table, flagged: pa.Table) -> pa.Table:
    """The rows of ``fresh`` (episode rows this batch wrote) whose robot or task differ from
    their list's, but for episodes whose lists the batch rewrites anyway (``flagged``)."""
    if listed.num_rows == 0 or fresh.num_rows == 0:
        return _EMPTY
    both = fresh.join(listed, "id", right_suffix="_listed", join_type="inner")
    differ = pc.or_(
        pc.invert(
            pc.equal(both.column("robot_id"), both.column("robot_id_listed")).fill_null(False)
        ),
        pc.invert(pc.equal(both.column("task_id"), both.column("task_id_listed")).fill_null(False)),
    )
    moved = both.filter(differ).select(["id", "robot_id", "task_id"])
    return _without(moved, flagged.column("episode_id"))


@contextmanager
def _registered(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> Iterator[None]:
    con.register(name, rows)
    try:
        yield
    finally:
        con.unregister(name)
