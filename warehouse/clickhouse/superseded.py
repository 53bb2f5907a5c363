"""Each curated mirrored table's list of superseded versions, ``<meta>.<table>_superseded``.

A live view (``views.sql``) is the table's versions committed by its snapshot, tombstones left
out, minus the versions this list hides by then: an anti-join with a small set, where a
newest-version pick would sort or aggregate the whole table before a curation's filters. An
entry is a version's key and ``(_lsn, _seq)`` with, in ``_commit``, the commit that wrote a
newer version of its key (or a tombstone): a read at snapshot S hides the version when
``_commit <= S``, so a read pinned before the change still sees it. Because a version's
liveness no longer depends on the other rows a scan keeps, any filter may prune that scan.

The writer adds a commit's entries after the commit's rows, in the same commit
(:func:`record_statement`); repair deletes a failed write's entries with its rows (they carry
its commit number), and maintenance those of the versions it purged
(:func:`orphans_statement`). Tables without a list (migration 0005 creates them) are not read
by any live view and get no entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from clickhouse_connect.driver.client import Client

from warehouse.clickhouse.schema import Databases, quote

SUFFIX = "_superseded"


def list_name(table: str) -> str:
    """The name, in the meta database, of mirrored table ``table``'s list."""
    return f"{table}{SUFFIX}"


def listed_tables(client: Client, names: Databases) -> frozenset[str]:
    """The mirrored tables that have a list."""
    rows = client.query(
        "SELECT name FROM system.tables WHERE database = {m:String} AND endsWith(name, {s:String})",
        parameters={"m": names.meta, "s": SUFFIX},
    ).result_rows
    return frozenset(str(name).removesuffix(SUFFIX) for (name,) in rows)


def record_statement(target: str, listing: str, key: Sequence[str]) -> str:
    """Add to ``listing`` every version of the keys commit ``commit`` wrote in ``target`` that
    a newer version hides and that is not listed yet, as superseded at ``commit`` (parameter
    ``commit``). The LSN guard makes every version a commit writes newer than those stored, so
    this is the keys' previous newest version (and any version of the commit a later one of
    the same commit replaced). Reads only those keys' versions (the primary key, and the
    ``_commit`` skip index for the commit's own parts)."""
    keys = ", ".join(quote(k) for k in key)
    touched = f"({keys}) IN (SELECT {keys} FROM {target} WHERE _commit = {{commit:UInt64}})"
    return (
        f"INSERT INTO {listing} ({keys}, _lsn, _seq, _commit) "
        f"SELECT {keys}, _lsn, _seq, {{commit:UInt64}} FROM (SELECT {keys}, _lsn, _seq, "
        f"max((_lsn, _seq)) OVER (PARTITION BY {keys}) AS _top FROM {target} "
        f"WHERE _commit <= {{commit:UInt64}} AND {touched}) WHERE (_lsn, _seq) < _top "
        f"AND ({keys}, _lsn, _seq) NOT IN (SELECT {keys}, _lsn, _seq FROM {listing} "
        f"WHERE {touched})"
    )


def orphans_statement(target: str, listing: str, key: Sequence[str]) -> str:
    """Delete the entries of ``listing`` whose version ``target`` no longer holds (purged by
    maintenance). Reads only the listed keys' versions."""
    keys = ", ".join(quote(k) for k in key)
    return (
        f"DELETE FROM {listing} WHERE ({keys}, _lsn, _seq) NOT IN (SELECT {keys}, _lsn, _seq "
        f"FROM {target} WHERE ({keys}) IN (SELECT {keys} FROM {listing}))"
    )
