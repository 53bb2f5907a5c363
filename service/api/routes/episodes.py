"""Episodes: list and describe (retracted ones too), enrichment labels (and labelled
segments), retraction and restore, lineage.

Labels, retractions and restores are written to the operational database and reach the
curation views by CDC, like every other change; lineage is read from the warehouse's lineage
rows, kept to the manifests the registry holds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Path, Query

from curation.catalog import get_episode, list_episodes
from curation.labels import (
    Label,
    add_labels,
    list_labels,
    remove_label,
    restore_episode,
    retract_episode,
)
from curation.registry import manifests_containing, parse_episode_id, require_episode
from service.api.deps import Context, Curator, Reader
from service.api.problems import problem_responses
from service.api.schemas import (
    NO_NUL,
    EpisodeDetail,
    EpisodeLabels,
    EpisodeManifests,
    EpisodePage,
    EpisodeSummary,
    LabelPublic,
    LabelsCreate,
    ManifestRef,
    RestorationPublic,
    RetractCreate,
    RetractionPublic,
)

router = APIRouter(prefix="/v1/episodes", tags=["episodes"])
Name = Annotated[str | None, Query(min_length=1, max_length=200, pattern=NO_NUL)]
LabelId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@router.get("", responses=problem_responses(400))
def list_(
    context: Context,
    _: Reader,
    robot_id: Name = None,
    task_id: Name = None,
    status: Literal["active", "retracted"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=100)] = None,
) -> EpisodePage:
    """Episodes by id (retracted ones too, unless ``status`` says), optionally of one robot or
    task."""
    with context.connect() as conn:
        rows, next_cursor = list_episodes(
            conn, limit=limit, cursor=cursor, robot_id=robot_id, task_id=task_id, status=status
        )
    return EpisodePage(items=[EpisodeSummary(**row) for row in rows], next_cursor=next_cursor)


@router.get("/{episode_id}", responses=problem_responses(404))
def show(episode_id: str, context: Context, _: Reader) -> EpisodeDetail:
    """One episode: its row, quality flags, label and manifest counts, retraction log."""
    key = parse_episode_id(episode_id)
    with context.connect() as conn:
        return EpisodeDetail.model_validate(get_episode(conn, context.warehouse(), key))


@router.post("/{episode_id}/labels", status_code=201, responses=problem_responses(400, 404, 422))
def create_labels(
    episode_id: str, body: LabelsCreate, context: Context, principal: Curator
) -> EpisodeLabels:
    """Add labels to an episode; a label with ``start_ns``/``end_ns`` labels that segment
    (log time, integer nanoseconds, inside the episode). Curations see them once CDC has
    carried them to the warehouse."""
    key = parse_episode_id(episode_id)
    labels = [Label(x.key, x.value, x.start_ns, x.end_ns) for x in body.labels]
    with context.connect() as conn:
        rows = add_labels(conn, key, labels, principal.name)
    return EpisodeLabels(episode_id=str(key), labels=[LabelPublic(**row) for row in rows])


@router.get("/{episode_id}/labels", responses=problem_responses(404))
def show_labels(episode_id: str, context: Context, _: Reader) -> EpisodeLabels:
    """The episode's labels, oldest first."""
    key = parse_episode_id(episode_id)
    with context.connect() as conn:
        rows = list_labels(conn, key)
    return EpisodeLabels(episode_id=str(key), labels=[LabelPublic(**row) for row in rows])


@router.post("/{episode_id}/retract", responses=problem_responses(400, 404))
def retract(
    episode_id: str,
    context: Context,
    principal: Curator,
    body: Annotated[RetractCreate | None, Body()] = None,
) -> RetractionPublic:
    """Retract an episode: it leaves every new curation (once CDC carries the change); the
    answer lists the existing manifests that hold it. Retracting twice changes nothing."""
    key = parse_episode_id(episode_id)
    reason = body.reason if body is not None else ""
    with context.connect() as conn:
        retraction = retract_episode(conn, context.warehouse(), key, reason, principal.name)
    return RetractionPublic.model_validate(retraction)


@router.delete("/{episode_id}/labels/{label_id}", responses=problem_responses(404))
def delete_label(episode_id: str, label_id: LabelId, context: Context, _: Curator) -> LabelPublic:
    """Remove one label of the episode; the answer is the label removed. Curations stop seeing
    it once CDC carries the delete."""
    key = parse_episode_id(episode_id)
    with context.connect() as conn:
        return LabelPublic(**remove_label(conn, key, label_id))


@router.post("/{episode_id}/restore", responses=problem_responses(404))
def restore(episode_id: str, context: Context, principal: Curator) -> RestorationPublic:
    """Undo a retraction: the episode is back in new curations once CDC carries the change.
    Restoring an active episode changes nothing (``already_active``)."""
    key = parse_episode_id(episode_id)
    with context.connect() as conn:
        return RestorationPublic.model_validate(restore_episode(conn, key, principal.name))


@router.get("/{episode_id}/manifests", responses=problem_responses(404))
def manifests(
    episode_id: str,
    context: Context,
    _: Reader,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> EpisodeManifests:
    """The registered manifests that hold the episode, newest first."""
    key = parse_episode_id(episode_id)
    with context.connect() as conn:
        require_episode(conn, key)
        rows = manifests_containing(conn, context.warehouse(), key, limit)
    return EpisodeManifests(episode_id=str(key), manifests=[ManifestRef(**row) for row in rows])
