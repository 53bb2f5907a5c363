"""Manifest IDs people can type: ``quarry manifests list`` prints IDs that every command takes;
a unique prefix of at least 8 hex digits names a manifest everywhere an ID is taken (the CLI's
commands and every ``/v1/manifests/{id}`` route, resolved by the service: 404 for none, 400
naming the candidates for several); no such manifest exits 4 in every command."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from quarry.stack.lifecycle import Stack
from tests.fixtures.stack import run_json, run_quarry

PROBLEM = "application/problem+json"
UNKNOWN = "0badc0de" * 8
# Two registry rows whose IDs share their first 10 hex digits (no files: only the lookup).
TWINS = ("ab1e5ca1ab" + "0" * 54, "ab1e5ca1ab" + "1" * 54)


@pytest.fixture(scope="module")
def built(api: httpx.Client) -> dict[str, Any]:
    response = api.post("/v1/curations", json={"sql": "SELECT id, 'ids' AS case_ FROM episodes"})
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture
def twins(corpus: Stack) -> Iterator[tuple[str, str]]:
    with psycopg.connect(corpus.settings.operational_dsn(), autocommit=True) as conn:
        for twin in TWINS:
            conn.execute(
                "INSERT INTO manifests (id, reuse_key, sql, sample_spec, snapshot_id, "
                "cdc_position, rows, samples, size_bytes, uri, author) VALUES "
                "(%s, %s, 'SELECT 1', '{}', 1, '', 0, 0, 0, '/nowhere', 'test')",
                (twin, "twin-" + twin),
            )
        try:
            yield TWINS
        finally:
            conn.execute("DELETE FROM manifests WHERE id = ANY(%s)", (list(TWINS),))


def test_the_list_prints_ids_that_show_and_diff_take(corpus: Stack, built: dict[str, Any]) -> None:
    state = corpus.paths.root
    lines = run_quarry(state, "manifests", "list", "--limit", "1000").stdout.splitlines()
    listed = {line.split()[0] for line in lines}
    assert built["manifest_id"] in listed
    shown = run_json(state, "manifests", "show", built["manifest_id"])
    assert shown["id"] == built["manifest_id"]
    diff = run_json(state, "manifests", "diff", built["manifest_id"][:8], built["manifest_id"])
    assert diff["unchanged"] == built["rows"] and not diff["metadata"]


@pytest.mark.parametrize("length", [8, 13, 64])
def test_a_prefix_names_the_manifest_on_every_route(
    api: httpx.Client, built: dict[str, Any], length: int
) -> None:
    full = built["manifest_id"]
    ref = full[:length].upper() if length == 13 else full[:length]
    assert api.get(f"/v1/manifests/{ref}").json()["id"] == full
    download = api.get(f"/v1/manifests/{ref}/arrow")
    assert download.status_code == 200 and download.headers["etag"] == f'"{full}"'
    assert api.get(f"/v1/manifests/{ref}/episodes").json()["manifest_id"] == full
    assert api.get(f"/v1/manifests/{ref}/card").json()["manifest_id"] == full
    edited = api.patch(f"/v1/manifests/{ref}", json={"add_tags": ["ids"]})
    assert edited.status_code == 200 and edited.json()["id"] == full
    rebuilt = api.post(f"/v1/manifests/{ref}/rebuild").json()
    assert (rebuilt["manifest_id"], rebuilt["identical"]) == (full, True)


def test_an_unknown_id_or_prefix_is_a_404(api: httpx.Client) -> None:
    for ref in (UNKNOWN, UNKNOWN[:8]):
        for path in ("", "/arrow", "/episodes", "/card"):
            response = api.get(f"/v1/manifests/{ref}{path}")
            assert response.status_code == 404, (ref, path)
            assert response.headers["content-type"] == PROBLEM
        assert api.post(f"/v1/manifests/{ref}/rebuild").status_code == 404
        assert api.patch(f"/v1/manifests/{ref}", json={}).status_code == 404


@pytest.mark.parametrize("ref", ["0badc0d", "latest", "0badc0de" * 8 + "0", "0badc0dz"])
def test_what_is_no_id_or_prefix_is_a_400(api: httpx.Client, ref: str) -> None:
    response = api.get(f"/v1/manifests/{ref}")
    assert response.status_code == 400
    assert response.json()["reason"] == "manifest_id"
    assert "at least 8" in response.json()["detail"]


def test_an_ambiguous_prefix_is_a_400_naming_the_candidates(
    api: httpx.Client, twins: tuple[str, str]
) -> None:
    for path in ("", "/arrow", "/card", "/episodes"):
        response = api.get(f"/v1/manifests/{twins[0][:8]}{path}")
        assert response.status_code == 400, path
        body = response.json()
        assert body["reason"] == "ambiguous_manifest_id"
        assert body["candidates"] == list(twins)
        assert twins[0] in body["detail"] and twins[1] in body["detail"]
    assert api.get(f"/v1/manifests/{twins[1][:11]}").status_code == 404  # file-less twin


COMMANDS = [
    ("manifests", "show", "{}"),
    ("manifests", "diff", "{}", "{}"),
    ("manifests", "rebuild", "{}"),
    ("manifests", "card", "{}"),
    ("manifests", "episodes", "{}"),
    ("manifests", "edit", "{}", "--tag", "x"),
    ("cache", "warm", "--manifest", "{}", "--no-progress"),
    ("train", "--manifest", "{}", "--steps", "1"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_no_such_manifest_exits_4_in_every_command(corpus: Stack, command: tuple[str, ...]) -> None:
    for ref in (UNKNOWN, UNKNOWN[:8]):
        args = [part.format(ref) for part in command]
        done = run_quarry(corpus.paths.root, *args, check=False)
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and ref[:8] in done.stderr


def test_a_malformed_or_ambiguous_id_exits_2(corpus: Stack, twins: tuple[str, str]) -> None:
    for ref in ("0badc0d", "../../healthz", twins[0][:8]):
        for args in (("manifests", "show", ref), ("cache", "warm", "--manifest", ref)):
            done = run_quarry(corpus.paths.root, *args, check=False)
            assert done.returncode == 2, (args, done.stderr)
    ambiguous = run_quarry(corpus.paths.root, "manifests", "card", twins[0][:8], check=False)
    assert twins[0] in ambiguous.stderr and twins[1] in ambiguous.stderr
