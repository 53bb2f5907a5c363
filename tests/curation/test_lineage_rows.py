"""lineage_rows: each (episode id, SHA-256) once, sorted, whether the rows come in a
manifest's order (sorted by episode id: the one-pass path) or in any other."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from curation.lineage import lineage_rows

rows = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["s1", "s2", "s3"])),
    max_size=25,
)


def expected(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"episode_id": e, "sha256": s} for e, s in sorted(set(pairs))]


@given(rows, st.booleans(), st.integers(min_value=0, max_value=25))
def test_the_lineage_is_each_pair_once_in_order(
    pairs: list[tuple[str, str]], in_manifest_order: bool, split: int
) -> None:
    if in_manifest_order:
        pairs = sorted(pairs, key=lambda pair: pair[0])  # by id only: SHA-256s stay unsorted
    table = pa.table(
        {
            "episode_id": [e for e, _ in pairs],
            "sha256": [s for _, s in pairs],
            "start_ns": list(range(len(pairs))),
        }
    )
    cut = min(split, table.num_rows)
    chunked = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    assert lineage_rows(chunked).to_pylist() == expected(pairs)
    assert lineage_rows(chunked).column_names == ["episode_id", "sha256"]


def test_a_manifest_of_one_row_is_its_own_lineage() -> None:
    table = pa.table({"episode_id": ["a"], "sha256": ["s"], "start_ns": [0]})
    assert lineage_rows(table).to_pylist() == [{"episode_id": "a", "sha256": "s"}]
