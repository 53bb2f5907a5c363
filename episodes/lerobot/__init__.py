"""LeRobot datasets (format v3.0): read one into Quarry episodes, write episodes as one.

Read with pyarrow and PyAV only (lerobot itself is never imported): :mod:`.source` opens a
dataset's metadata and locates each episode's rows and video spans, :mod:`.ingest` turns an
episode into a Quarry container and registers it, :mod:`.writer` writes a v3.0 dataset.
"""
