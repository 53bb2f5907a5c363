"""Placeholders of curation SQL (``'<name>'``) bound to params as literal nodes, then guarded."""

from __future__ import annotations

import pytest

from curation.guard import CurationRefusedError, check_curation
from curation.params import ParamValue
from quarry.settings import SQL_ROOT

VIEWS = frozenset({"episodes", "manifest_episodes"})
STALE = (SQL_ROOT / "curations" / "stale_episodes_of_manifest.sql").read_text()


def refusal(sql: str, params: dict[str, ParamValue] | None = None) -> CurationRefusedError:
    with pytest.raises(CurationRefusedError) as caught:
        check_curation(sql, VIEWS, params)
    return caught.value


def test_an_unfilled_placeholder_is_refused_by_name() -> None:
    error = refusal(STALE, {"pipeline_version_below": "2"})
    assert error.context == {"reason": "placeholder", "placeholder": "manifest_id"}
    assert "'<manifest_id>' is not filled" in error.message
    assert "--param manifest_id=VALUE" in error.message
    assert refusal(STALE).context["placeholder"] == "manifest_id"  # the first one spelled


def test_values_bind_as_literals_not_text() -> None:
    hostile = "x' UNION SELECT id FROM secrets --"
    checked = check_curation(STALE, VIEWS, {"manifest_id": hostile, "pipeline_version_below": "3"})
    rendered = checked.render()
    assert "'x'' UNION SELECT id FROM secrets --'" in rendered  # one quoted string
    assert "<manifest_id>" not in rendered and "secrets" not in str(checked.relations)
    assert "CAST('3' AS INT)" in rendered


def test_typed_values_become_typed_literals() -> None:
    sql = "SELECT id FROM episodes WHERE steps > '<n>' AND success = '<ok>' AND id <> '<s>'"
    rendered = check_curation(sql, VIEWS, {"n": -3, "ok": True, "s": "a"}).render()
    assert rendered.endswith("WHERE steps > -3 AND success = TRUE AND id <> 'a'")
    assert "1.5" in check_curation(sql, VIEWS, {"n": 1.5, "ok": False, "s": ""}).render()


def test_the_guard_checks_the_bound_query() -> None:
    # a value is data: it cannot become a function call or a relation
    checked = check_curation(
        "SELECT id FROM episodes WHERE id = '<x>'", VIEWS, {"x": "read_csv('/etc/passwd')"}
    )
    assert checked.relations == frozenset({"episodes"})
    error = refusal("SELECT getenv('<x>') FROM episodes", {"x": "HOME"})
    assert error.context["reason"] == "function"


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"manifest": "a", "manifest_id": "b"}, "'manifest' fills no placeholder"),
        ({"manifest_id": "<other>"}, "is itself a placeholder"),
        ({"manifest_id": "a\x00b"}, "NUL"),
        ({"manifest_id": float("nan")}, "not a finite number"),
        ({"manifest_id": 2**64}, "does not fit in 64 bits"),
        ({"bad name": "a", "manifest_id": "b"}, "not a word"),
        ({"manifest_id": "x" * 70_000}, "longer than"),
    ],
)
def test_bad_params_are_refused(params: dict[str, ParamValue], needle: str) -> None:
    sql = "SELECT id FROM episodes WHERE id = '<manifest_id>'"
    error = refusal(sql, params)
    assert needle in error.message
    assert error.context["reason"] in ("params", "size")


def test_a_query_without_placeholders_is_unchanged() -> None:
    sql = "SELECT id FROM episodes WHERE task_id = '<b>' OR task_id = 'a<b>'"
    assert "'a<b>'" in check_curation(sql, VIEWS, {"b": "pick"}).render()
    plain = "SELECT id FROM episodes WHERE task_id LIKE 'pick%'"
    assert check_curation(plain, VIEWS, {}).render() == check_curation(plain, VIEWS).render()
