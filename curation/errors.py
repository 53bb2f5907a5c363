"""Errors of the curation engine. One base class; the HTTP app answers each with its
``status`` and ``title`` (the problem document), so a job that failed records the same."""

from __future__ import annotations

from typing import Any


class CurationError(Exception):
    """Base of the curation engine's errors; structured context in ``context``; pickles."""

    status: int = 500
    retryable: bool = False
    title: str = "Curation error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))


def _rebuild(cls: type[CurationError], message: str, context: dict[str, Any]) -> CurationError:
    return cls(message, **context)


class NotFoundError(CurationError):
    """A manifest, episode or job that does not exist."""

    title = "Not found"
    status = 404


class BadRequestError(CurationError):
    """A request the engine refuses; the message says why."""

    title = "Bad request"
    status = 400


class EmptyCurationError(CurationError):
    """A curation that would build a manifest without a sample (no rows, or no slice long
    enough for one) and did not say ``allow_empty``."""

    title = "Empty curation"
    status = 422

    @classmethod
    def at(cls, snapshot: int, matched: int | None, anchor_step_ns: int) -> EmptyCurationError:
        """The refusal of a curation that matched ``matched`` slices (``None``: unknown) at
        warehouse snapshot ``snapshot``, none long enough for a sample (one every
        ``anchor_step_ns`` integer nanoseconds)."""
        if matched is None:
            found = f"the curation's manifest at warehouse snapshot {snapshot} holds no sample"
        elif matched == 0:
            found = f"the curation matched nothing at warehouse snapshot {snapshot}"
        else:
            found = (
                f"the curation matched {matched} slices at warehouse snapshot {snapshot}, "
                f"none long enough for a sample (one every {anchor_step_ns / 1e6:g} ms)"
            )
        return cls(
            f"{found}; nothing to build (to register an empty manifest anyway, send "
            "allow_empty: true, or quarry curate --allow-empty)",
            reason="empty",
            snapshot_id=snapshot,
            **({} if matched is None else {"matched_slices": matched}),
        )


class AmbiguousManifestError(BadRequestError):
    """A manifest ID prefix that more than one registered manifest starts with."""

    title = "Ambiguous manifest ID"


class WarehouseLagError(CurationError):
    """The warehouse's data is further behind the source than the curation bound allows."""

    title = "Warehouse too far behind"
    status = 409
    retryable = True
