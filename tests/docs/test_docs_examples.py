"""Every ```console block of README.md and docs/*.md runs as written against a real stack.

One stack for the module: ``quarry up`` in a temporary state folder with a small synthetic
fleet, the real service and real CLI subprocesses. Each file's blocks run in one bash session
(tests/docs/examples.py) with the environment docs/README.md promises an example; a failing
block is reported by file and line with the session's output.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from episodes.ingest import ingest_synth
from quarry.settings import Settings
from quarry.stack.lifecycle import Stack
from tests.docs.examples import REPO_ROOT, Block, blocks, doc_files, run_blocks
from tests.episodes.foreign_files import source_episode, write_ros2
from tests.fixtures.postgres import private_folder
from tests.fixtures.stack import TEST_FLEET, run_quarry, wait_for_episodes

# As many as the examples ingest (`quarry ingest synth --episodes 10`, seed 0): theirs are
# then already registered and skipped, so the examples run on this small, quick fleet.
FLEET_EPISODES = 10
# README.md last: its tour ends with `quarry down`.
FILES = sorted((p for p in doc_files() if blocks(p)), key=lambda p: p.name == "README.md")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ROS 2 recording, as `$RECORDING` (written with mcap_ros2's own writer)."""
    folder = tmp_path_factory.mktemp("recording")
    return write_ros2(folder / "rec.mcap", source_episode(seed=8))


@pytest.fixture(scope="module")
def docs_stack() -> Iterator[Stack]:
    with private_folder("quarry-test-docs-") as folder:
        state = folder / "state"
        try:
            run_quarry(state, "up", timeout=300)
            stack = Stack(Settings(state_dir=state))
            with psycopg.connect(stack.settings.operational_dsn(), autocommit=True) as conn:
                ingest_synth(conn, stack.paths.objects, FLEET_EPISODES, seed=0, config=TEST_FLEET)
            wait_for_episodes(stack, FLEET_EPISODES)
            yield stack
        finally:
            run_quarry(state, "down", check=False, timeout=120)


def example_env(stack: Stack, recording: Path, scratch: Path) -> dict[str, str]:
    """What an example may assume (docs/README.md, "Examples that run")."""
    url = stack.status().service_url
    assert url is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    bin_dir = str(Path(sys.executable).parent)
    return {
        **env,
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "QUARRY_STATE_DIR": str(stack.settings.state_dir),
        "URL": url,
        "TOKEN": stack.paths.admin_token.read_text().strip(),
        "RECORDING": str(recording),
        "SCRATCH": str(scratch),
    }


def test_examples_are_found() -> None:
    """The discovery itself: README's tour is a console block; its set-up commands are not."""
    readme = blocks(REPO_ROOT / "README.md")
    assert readme and all("make demo" not in b.script for b in readme)
    assert any("quarry up" in b.script for b in readme)


def test_a_failing_block_is_reported_by_file_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```console\nX=1\n```\n\n```text\nnot run\n```\n\n"
        '```console\necho ok\ntest "$X" = 2\necho never\n```\n\n```console\necho later\n```\n'
    )
    found = blocks(page)
    assert [b.line for b in found] == [3, 11, 17]
    outcome = run_blocks(found, dict(os.environ), timeout_s=60, cwd=tmp_path)
    assert outcome.failed == found[1] and outcome.returncode == 1
    assert (
        "ok" in outcome.output and "never" not in outcome.output and "later" not in outcome.output
    )
    assert run_blocks(found[:1], dict(os.environ), timeout_s=60, cwd=tmp_path).failed is None
    page.write_text("```console\necho open\n")
    with pytest.raises(AssertionError, match="never closed"):
        blocks(page)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_console_blocks_run(path: Path, docs_stack: Stack, recording: Path, tmp_path: Path) -> None:
    found = blocks(path)
    outcome = run_blocks(found, example_env(docs_stack, recording, tmp_path), timeout_s=600)
    if outcome.failed is not None:
        pytest.fail(_report(outcome.failed, outcome.returncode, outcome.output), pytrace=False)


def _report(block: Block, returncode: int, output: str) -> str:
    tail = "\n".join(output.splitlines()[-40:])
    return f"{block.where}: the example exited {returncode}\n{block.script}\n--- output ---\n{tail}"
