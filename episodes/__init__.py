"""Episode containers: write, read and check robot episodes stored as MCAP files.

Light imports only: the reader side (spec, reader, sample, errors). Ingest lives in
``episodes.ingest`` and registration in ``episodes.registry`` (they import psycopg).
"""

from .errors import EpisodeError
from .info import ContainerInfo
from .reader import EpisodeReader
from .sample import Sample
from .spec import SampleSpec

__all__ = ["ContainerInfo", "EpisodeError", "EpisodeReader", "Sample", "SampleSpec"]
