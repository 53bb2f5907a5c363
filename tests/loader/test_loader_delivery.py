"""Manifest delivery: once per node, verified against its ID, atomic, other local ranks wait."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

import pytest

from loader.config import ManifestConfig
from loader.delivery import deliver_manifest, stamp_matches
from loader.errors import LoaderError, ManifestDeliveryError
from manifests import open_manifest
from tests.fixtures.manifest_server import ManifestServer

from .conftest import Corpus, EpisodeSet, sha

LEADER = True  # local rank 0: downloads
FOLLOWER = False  # another local rank: waits for local rank 0's copy


def source(
    server: ManifestServer, manifest_id: str, tmp_path: Path, **more: object
) -> ManifestConfig:
    token = tmp_path / "token"
    token.write_text(server.token + "\n")
    return ManifestConfig(
        id=manifest_id, service_url=server.url, token_file=token, wait_s=10, **more
    )  # type: ignore[arg-type]


def test_leader_downloads_verifies_and_publishes(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    store = tmp_path / "manifests"
    path = deliver_manifest(
        source(manifest_server, corpus.manifest_id, tmp_path), store, leader=LEADER
    )
    assert path == store / f"{corpus.manifest_id}.arrow"
    assert sha(path.read_bytes()) == corpus.manifest_id
    assert stamp_matches(path)
    assert open_manifest(path).num_samples == corpus.num_samples
    assert [p.name for p in store.iterdir() if p.name.startswith(".tmp")] == []


def test_a_verified_copy_is_reused_without_a_download(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    store = tmp_path / "manifests"
    src = source(manifest_server, corpus.manifest_id, tmp_path)
    deliver_manifest(src, store, leader=LEADER)
    deliver_manifest(src, store, leader=LEADER)
    assert deliver_manifest(src, store, leader=FOLLOWER).is_file()
    assert manifest_server.requests == 1


def test_a_damaged_local_copy_is_fetched_again(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    store = tmp_path / "manifests"
    src = source(manifest_server, corpus.manifest_id, tmp_path)
    path = deliver_manifest(src, store, leader=LEADER)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))  # changes mtime, so the stamp no longer matches
    deliver_manifest(src, store, leader=LEADER)
    assert sha(path.read_bytes()) == corpus.manifest_id
    assert manifest_server.requests == 2


def test_corrupt_download_is_refused_and_nothing_published(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    manifest_server.corrupt = True
    store = tmp_path / "manifests"
    with pytest.raises(ManifestDeliveryError) as caught:
        deliver_manifest(
            source(manifest_server, corpus.manifest_id, tmp_path), store, leader=LEADER
        )
    assert "hash" in str(caught.value)
    assert not (store / f"{corpus.manifest_id}.arrow").exists()


def test_wrong_etag_is_refused(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    manifest_server.etag = "0" * 64
    with pytest.raises(ManifestDeliveryError, match="ETag"):
        deliver_manifest(
            source(manifest_server, corpus.manifest_id, tmp_path), tmp_path / "m", leader=LEADER
        )


@pytest.mark.parametrize(("token", "status"), [("wrong", "401"), (None, "404")])
def test_service_refusals_are_clear_and_terminal(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path, token: str | None, status: str
) -> None:
    src = source(manifest_server, "f" * 64 if token is None else corpus.manifest_id, tmp_path)
    if token is not None:
        assert src.token_file is not None
        src.token_file.write_text(token)
    with pytest.raises(ManifestDeliveryError) as caught:
        deliver_manifest(src, tmp_path / "m", leader=LEADER)
    assert status in str(caught.value)
    assert not caught.value.retryable
    # The exit code is the trainer's: its exit boundary maps the loader's error onto it.
    from trainer.__main__ import as_trainer_error  # imports torch (the spawned ranks do not)
    from trainer.errors import ExitCode
    from trainer.world import World

    assert as_trainer_error(caught.value, World()).exit_code == ExitCode.MANIFEST


def test_unreachable_service_is_retryable(corpus: Corpus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    src = ManifestConfig(
        id=corpus.manifest_id, service_url="http://127.0.0.1:9", token_file=token, attempts=1
    )
    with pytest.raises(ManifestDeliveryError) as caught:
        deliver_manifest(src, tmp_path / "m", leader=LEADER)
    assert caught.value.retryable


def test_follower_times_out_when_the_leader_never_publishes(corpus: Corpus, tmp_path: Path) -> None:
    src = ManifestConfig(id=corpus.manifest_id, wait_s=0.3)
    with pytest.raises(ManifestDeliveryError, match="local rank 0"):
        deliver_manifest(src, tmp_path / "m", leader=FOLLOWER)


def test_bad_manifest_id(tmp_path: Path) -> None:
    with pytest.raises(ManifestDeliveryError, match="not a manifest ID"):
        deliver_manifest(ManifestConfig(id="latest"), tmp_path, leader=LEADER)


def test_local_path_is_used_as_is(corpus: Corpus, tmp_path: Path) -> None:
    src = ManifestConfig(path=corpus.manifest_path)
    assert deliver_manifest(src, tmp_path / "m", leader=FOLLOWER) == corpus.manifest_path
    with pytest.raises(ManifestDeliveryError):
        deliver_manifest(ManifestConfig(path=tmp_path / "missing.arrow"), tmp_path, leader=LEADER)


def _rank(args: tuple[ManifestConfig, Path, int]) -> str:
    src, store, local_rank = args
    return str(deliver_manifest(src, store, leader=local_rank == 0))


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


def test_another_manifests_bytes_are_refused(
    corpus: Corpus, episode_set: EpisodeSet, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    # A real manifest, but another one, served under the ID (its ETag says the ID too).
    manifest_server.files[corpus.manifest_id] = episode_set.with_bad.read_bytes()
    store = tmp_path / "manifests"
    with pytest.raises(ManifestDeliveryError) as caught:
        deliver_manifest(source(manifest_server, corpus.manifest_id, tmp_path), store)
    assert caught.value.key == corpus.manifest_id
    assert [p.name for p in store.iterdir() if not p.name.endswith(".lock")] == []


def test_a_malformed_id_never_reaches_the_service(
    manifest_server: ManifestServer, tmp_path: Path
) -> None:
    with pytest.raises(LoaderError, match="not a manifest ID"):
        deliver_manifest(source(manifest_server, "../etc", tmp_path), tmp_path / "m")
    assert manifest_server.requests == 0
    assert not (tmp_path / "m").exists()


def test_the_error_pickles_with_its_status(
    corpus: Corpus, manifest_server: ManifestServer, tmp_path: Path
) -> None:
    src = source(manifest_server, "f" * 64, tmp_path)
    with pytest.raises(ManifestDeliveryError) as caught:
        deliver_manifest(src, tmp_path / "m")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is ManifestDeliveryError and str(copy) == str(caught.value)
    assert (copy.status, copy.key, copy.retryable) == (404, "f" * 64, False)
    assert copy.uri == f"{manifest_server.url}/v1/manifests/{'f' * 64}/arrow"
