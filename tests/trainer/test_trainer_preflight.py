"""Preflight checks: each failure names its check and maps to its own exit code."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from trainer.cluster import Cluster
from trainer.config import PreflightSection
from trainer.errors import ExitCode, PreflightError
from trainer.preflight import (
    PreflightReport,
    check_collective,
    check_device,
    check_disk,
    check_manifest,
    required_disk_bytes,
)
from trainer.world import World

from .conftest import Corpus


def test_manifest_check_hashes_a_file_named_by_its_id(corpus: Corpus, tmp_path: Path) -> None:
    detail = check_manifest(corpus.manifest_path, World())
    assert detail == {"rows": 8, "samples": corpus.num_samples, "hashed": True}
    damaged = tmp_path / corpus.manifest_path.name
    data = bytearray(corpus.manifest_path.read_bytes())
    data[300] ^= 0xFF
    damaged.write_bytes(bytes(data))
    report = PreflightReport()
    with pytest.raises(PreflightError) as caught:
        report.run("manifest", lambda: check_manifest(damaged, World()), rank=0)
    assert caught.value.exit_code == ExitCode.PREFLIGHT_MANIFEST
    assert "hashes to" in str(caught.value)


def test_manifest_check_on_other_local_ranks_only_opens(corpus: Corpus, tmp_path: Path) -> None:
    copy = tmp_path / "renamed.arrow"
    shutil.copy(corpus.manifest_path, copy)
    follower = World(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert check_manifest(copy, follower)["hashed"] is False


def test_disk_check(tmp_path: Path) -> None:
    assert check_disk(tmp_path / "not" / "yet", 1)["free_bytes"] > 0
    with pytest.raises(PreflightError) as caught:
        check_disk(tmp_path, 1 << 62)
    assert caught.value.check == "disk"
    assert caught.value.exit_code == ExitCode.PREFLIGHT_DISK


def test_disk_requirement_estimate_covers_the_kept_checkpoints() -> None:
    model = torch.nn.Linear(100, 100)  # 10,100 float32 parameters
    needed = required_disk_bytes(PreflightSection(), model, keep_last=3)
    assert needed >= 10_100 * 4 * 3 * 4
    assert required_disk_bytes(PreflightSection(min_free_disk_bytes=7), model, 3) == 7


def test_device_check_on_cpu() -> None:
    detail = check_device(torch.device("cpu"))
    assert detail["rel_error"] < 1e-3 and detail["threads"] == 1


def test_report_times_checks_and_wraps_unexpected_errors() -> None:
    report = PreflightReport()
    report.run("device", lambda: {"ok": 1}, rank=0)
    assert report.checks["device"]["ok"] == 1 and report.checks["device"]["seconds"] >= 0

    def broken() -> dict[str, object]:
        raise RuntimeError("CUDA error: device-side assert")

    with pytest.raises(PreflightError) as caught:
        report.run("device", broken, rank=3)
    assert caught.value.rank == 3 and caught.value.exit_code == ExitCode.PREFLIGHT_DEVICE


@pytest.fixture
def lone_cluster() -> Iterator[Cluster]:
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    group = dist.new_group(backend="gloo")
    assert group is not None
    yield Cluster(World(), torch.device("cpu"), "gloo", group)
    dist.destroy_process_group()


def test_collective_smoke_test(lone_cluster: Cluster) -> None:
    detail = check_collective(lone_cluster, PreflightSection(smoke_bytes=1 << 16))
    assert detail["world_size"] == 1 and detail["round_s"] >= 0


def test_collective_smoke_test_fails_when_too_slow(lone_cluster: Cluster) -> None:
    with pytest.raises(PreflightError) as caught:
        check_collective(lone_cluster, PreflightSection(max_smoke_s=1e-9))
    assert caught.value.exit_code == ExitCode.PREFLIGHT_COLLECTIVE
