"""Episodes: enrichment labels (and labelled segments), retraction, lineage.

Labels and retractions are written to the operational database and reach the curation views
by CDC, like every other change; lineage is read from the manifest registry there.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from curation.labels import Label, add_labels, list_labels, retract_episode
from curation.registry import manifests_containing, parse_episode_id, require_episode
from service.api.deps import Context, Curator, Reader
from service.api.problems import problem_responses
from service.api.schemas import (
    EpisodeLabels,
    EpisodeManifests,
    LabelPublic,
    LabelsCreate,
    ManifestRef,
    RetractCreate,
    RetractionPublic,
)

router = APIRouter(prefix="/v1/episodes", tags=["episodes"])


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
        retraction = retract_episode(conn, key, reason, principal.name)
    return RetractionPublic.model_validate(retraction)


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
        rows = manifests_containing(conn, key, limit)
    return EpisodeManifests(episode_id=str(key), manifests=[ManifestRef(**row) for row in rows])
