"""The rank's data feed: batches across epochs through a prefetching stream, and what it charges
as data wait; the goodput meter's books for it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psutil
import pytest

from loader.sampler import EpochSampler
from trainer.config import load_config
from trainer.data import DataFeed
from trainer.goodput import GoodputMeter, Ledger, Phase
from trainer.world import World

from .conftest import Corpus

HOOK_S = 1.0


def feed_for(corpus: Corpus, tmp_path: Path, **values: object) -> DataFeed:
    settings = {
        "state_dir": str(tmp_path / "state"),
        "manifest.path": str(corpus.manifest_path),
        "loader.batch_size": 32,
        "data.num_workers": 1,
        **values,
    }
    return DataFeed(load_config(values=settings), World(), corpus.manifest_path)


def test_feed_crosses_epochs_in_order_and_charges_only_data_time(
    corpus: Corpus, tmp_path: Path
) -> None:
    feed = feed_for(corpus, tmp_path)
    before = {p.pid for p in psutil.Process().children()}
    assert feed.block == 8  # the default sampler order
    epoch0 = EpochSampler(
        corpus.num_samples, feed._row_offsets, seed=feed.config.seed, block=feed.block
    )
    expected = epoch0.indices().tolist()
    # Stands for a checkpoint write finishing before the next epoch's workers fork: charged
    # to the checkpoint phase by the trainer, so never part of the data wait.
    feed.before_new_epoch = lambda: time.sleep(HOOK_S)
    feed.start()
    got: list[int] = []
    switches = 0
    try:
        while feed.epochs_started < 2 or feed.sampler.epoch == 0:
            started = time.perf_counter()
            fetch = feed.next_batch()
            elapsed = time.perf_counter() - started
            assert 0 <= fetch.wait_s <= elapsed
            if feed.sampler.epoch == 0:
                got += fetch.batch["sample_index"].tolist()
            feed.consumed(fetch.batch)
            if elapsed >= HOOK_S:  # this call started the next epoch's workers
                switches += 1
                assert fetch.epoch_start_s > 0 and fetch.wait_s <= elapsed - HOOK_S + 0.05
        workers = [p for p in psutil.Process().children() if p.pid not in before]
        assert workers
    finally:
        feed.close()
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert got == expected and not alive and switches == 1
    assert feed.sampler.epoch == 1 and feed.epochs_started == 2


def test_feed_plans_the_block_order_of_its_config(corpus: Corpus, tmp_path: Path) -> None:
    feed = feed_for(corpus, tmp_path, **{"loader.sampler_block": 4})
    try:
        assert feed.sampler.block == 4
        expected = EpochSampler(
            corpus.num_samples, feed._row_offsets, seed=feed.config.seed, block=4
        )
        assert feed.sampler.indices().tolist() == expected.indices().tolist()
    finally:
        feed.close()


def test_feed_resumes_in_the_block_of_its_checkpoint(
    corpus: Corpus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint of the plain shuffle (block 1, the default before 8) resumes in its own
    order, in this epoch and the next, instead of being refused."""
    feed = feed_for(corpus, tmp_path)
    try:
        old = EpochSampler(corpus.num_samples, feed._row_offsets, seed=feed.config.seed)
        old.mark_consumed(5)
        state = old.state_dict()
        assert "block" not in state  # as written before blocks existed
        with caplog.at_level(logging.WARNING, logger="trainer.data"):
            feed.load_state_dict(state)
        assert "checkpoint's sampler block 1" in caplog.text
        assert feed.block == 1 and feed.sampler.block == 1
        assert feed.sampler.indices().tolist() == old.indices().tolist()
        assert feed._sampler(1).block == 1
    finally:
        feed.close()


def test_data_wait_is_blocked_time_plus_epoch_starts_after_warm_up() -> None:
    meter = GoodputMeter(Ledger(run_started_wall=time.time()), time.time())
    meter.record_step(2.0, 1.0, 8, 1.0)  # warm-up: the first batch waits for the workers
    for _ in range(4):
        meter.record_step(0.0, 1.0, 8, 1.0)
    meter.record_step(0.1, 1.0, 8, 1.0, epoch_start_s=0.4)
    assert meter.ledger.seconds[Phase.DATA_WAIT] == 2.5
    assert meter.ledger.seconds[Phase.COMPUTE] == 6.0
    assert meter.data_sites == {"blocked": 2.1, "epoch_start": 0.4}
    assert meter.data_wait_share(1) == 0.5 / 5.5
    assert meter.data_wait_share(0) == 2.5 / 8.5
    assert meter.data_wait_share(6) is None
