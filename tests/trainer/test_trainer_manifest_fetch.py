"""Manifest fetch: once per node, verified against its ID, atomic, other local ranks wait."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from manifests import open_manifest
from trainer.config import ManifestSection
from trainer.errors import ExitCode, ManifestFetchError
from trainer.manifest_fetch import resolve_manifest, stamp_matches
from trainer.world import World

from .conftest import Corpus, ManifestServer, sha256

LEADER = World(rank=0, world_size=2, local_rank=0, local_world_size=2, launched=True)
FOLLOWER = World(rank=1, world_size=2, local_rank=1, local_world_size=2, launched=True)


def source(
    server: ManifestServer, manifest_id: str, tmp_path: Path, **more: object
) -> ManifestSection:
    token = tmp_path / "token"
    token.write_text(server.token + "\n")
    return ManifestSection(
        id=manifest_id, service_url=server.url, token_file=token, wait_s=10, **more
    )  # type: ignore[arg-type]


def test_leader_downloads_verifies_and_publishes(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    store = tmp_path / "manifests"
    path = resolve_manifest(source(manifest_server, corpus.manifest_id, tmp_path), store, LEADER)
    assert path == store / f"{corpus.manifest_id}.arrow"
    assert sha256(path.read_bytes()) == corpus.manifest_id
    assert stamp_matches(path)
    assert open_manifest(path).num_samples == corpus.num_samples
    assert [p.name for p in store.iterdir() if p.name.startswith(".tmp")] == []


def test_a_verified_copy_is_reused_without_a_download(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    store = tmp_path / "manifests"
    src = source(manifest_server, corpus.manifest_id, tmp_path)
    resolve_manifest(src, store, LEADER)
    resolve_manifest(src, store, LEADER)
    assert resolve_manifest(src, store, FOLLOWER).is_file()
    assert manifest_server.requests == 1


def test_a_damaged_local_copy_is_fetched_again(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    store = tmp_path / "manifests"
    src = source(manifest_server, corpus.manifest_id, tmp_path)
    path = resolve_manifest(src, store, LEADER)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))  # changes mtime, so the stamp no longer matches
    resolve_manifest(src, store, LEADER)
    assert sha256(path.read_bytes()) == corpus.manifest_id
    assert manifest_server.requests == 2


def test_corrupt_download_is_refused_and_nothing_published(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    manifest_server.corrupt = True
    store = tmp_path / "manifests"
    with pytest.raises(ManifestFetchError) as caught:
        resolve_manifest(source(manifest_server, corpus.manifest_id, tmp_path), store, LEADER)
    assert "hash" in str(caught.value)
    assert not (store / f"{corpus.manifest_id}.arrow").exists()


def test_wrong_etag_is_refused(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    manifest_server.etag = "0" * 64
    with pytest.raises(ManifestFetchError, match="ETag"):
        resolve_manifest(
            source(manifest_server, corpus.manifest_id, tmp_path), tmp_path / "m", LEADER
        )


@pytest.mark.parametrize(("token", "status"), [("wrong", "401"), (None, "404")])
def test_service_refusals_are_clear_and_terminal(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path, token: str | None, status: str
) -> None:
    src = source(manifest_server, "f" * 64 if token is None else corpus.manifest_id, tmp_path)
    if token is not None:
        assert src.token_file is not None
        src.token_file.write_text(token)
    with pytest.raises(ManifestFetchError) as caught:
        resolve_manifest(src, tmp_path / "m", LEADER)
    assert status in str(caught.value)
    assert not caught.value.retryable
    assert caught.value.exit_code == ExitCode.MANIFEST


def test_unreachable_service_is_retryable(corpus: Corpus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    src = ManifestSection(
        id=corpus.manifest_id, service_url="http://127.0.0.1:9", token_file=token, attempts=1
    )
    with pytest.raises(ManifestFetchError) as caught:
        resolve_manifest(src, tmp_path / "m", LEADER)
    assert caught.value.retryable


def test_follower_times_out_when_the_leader_never_publishes(corpus: Corpus, tmp_path: Path) -> None:
    src = ManifestSection(id=corpus.manifest_id, wait_s=0.3)
    with pytest.raises(ManifestFetchError, match="local rank 0"):
        resolve_manifest(src, tmp_path / "m", FOLLOWER)


def test_bad_manifest_id(tmp_path: Path) -> None:
    with pytest.raises(ManifestFetchError, match="not a manifest ID"):
        resolve_manifest(ManifestSection(id="latest"), tmp_path, LEADER)


def test_local_path_is_used_as_is(corpus: Corpus, tmp_path: Path) -> None:
    src = ManifestSection(path=corpus.manifest_path)
    assert resolve_manifest(src, tmp_path / "m", FOLLOWER) == corpus.manifest_path
    with pytest.raises(ManifestFetchError):
        resolve_manifest(ManifestSection(path=tmp_path / "missing.arrow"), tmp_path, LEADER)


def _rank(args: tuple[ManifestSection, Path, int]) -> str:
    src, store, local_rank = args
    world = World(rank=local_rank, world_size=4, local_rank=local_rank, local_world_size=4)
    return str(resolve_manifest(src, store, world))


def test_four_local_ranks_download_once(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    src = source(manifest_server, corpus.manifest_id, tmp_path)
    store = tmp_path / "manifests"
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        paths = pool.map(_rank, [(src, store, r) for r in (3, 2, 1, 0)])
    assert len(set(paths)) == 1
    assert manifest_server.requests == 1
