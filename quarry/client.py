"""The CLI's access to a running service: URL and admin token from the state folder.

JSON calls go through :class:`ServiceClient`; a manifest named by ID or unique ID prefix is
resolved by :func:`resolve_manifest` and comes onto the node through the loader's one
delivery path (:func:`node_manifest`), into the state folder's manifest folder. No such
manifest is :class:`NotFoundError` (exit 4) in every command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from loader.config import ManifestConfig
from loader.delivery import deliver_manifest
from loader.errors import ManifestDeliveryError
from manifests import is_manifest_id, manifest_ref
from manifests.errors import ManifestIdError
from quarry.errors import (
    AuthError,
    BadInputError,
    NotFoundError,
    QuarryError,
    StackError,
)
from quarry.settings import Settings
from quarry.stack.paths import StatePaths

_BY_STATUS: dict[int, type[QuarryError]] = {
    400: BadInputError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    408: BadInputError,
    413: BadInputError,
    422: BadInputError,
    503: StackError,
}
_UP_HINT = "is the stack up? `quarry status` shows each part, `quarry up` starts it"


class ServiceClient:
    """Calls the service of one state folder, as its local admin."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 600.0) -> None:
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout_s, headers={"Authorization": f"Bearer {token}"}
        )

    @classmethod
    def for_state(cls, settings: Settings) -> ServiceClient:
        paths: StatePaths = settings.paths
        url = _read(settings.paths.service_url, "the service URL")
        token = _read(paths.admin_token, "the admin token")
        return cls(url, token)

    def get_json(self, path: str, **params: Any) -> Any:
        return _checked(self._http.get(path, params=params)).json()

    def get_text(self, path: str, accept: str) -> str:
        return _checked(self._http.get(path, headers={"Accept": accept})).text

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return _checked(self._http.post(path, json=body)).json()

    def patch_json(self, path: str, body: dict[str, Any]) -> Any:
        return _checked(self._http.patch(path, json=body)).json()

    def delete_json(self, path: str) -> Any:
        return _checked(self._http.delete(path)).json()

    def post(self, path: str, body: dict[str, Any], accept: str) -> httpx.Response:
        """POST ``body`` as JSON asking for ``accept``; the checked response (bytes read)."""
        return _checked(self._http.post(path, json=body, headers={"Accept": accept}))


def manifest_key(text: str) -> str:
    """``text`` checked to be a manifest ID or an ID prefix of at least 8 hex digits (lower
    case), as the service takes it in a URL.

    :raises BadInputError: it is neither (exit 2).
    """
    try:
        return manifest_ref(text)
    except ManifestIdError as error:
        raise BadInputError(error.message) from None


def resolve_manifest(settings: Settings, text: str) -> str:
    """The full ID of the manifest ``text`` names: an ID as it is; a unique prefix of at
    least 8 hex digits as the service resolves it, or, when the stack is down, among this
    state folder's manifest files.

    :raises BadInputError: not an ID or prefix, or a prefix several manifests share (exit 2).
    :raises NotFoundError: no manifest has it (exit 4).
    """
    key = manifest_key(text)
    if is_manifest_id(key):
        return key
    if settings.paths.service_url.exists():
        detail = ServiceClient.for_state(settings).get_json(f"/v1/manifests/{key}")
        return str(detail["id"])
    found = sorted(p.name[:64] for p in settings.paths.manifests.glob(f"{key}*.arrow"))
    found = [name for name in found if is_manifest_id(name)]
    if not found:
        raise NotFoundError(
            f"no manifest {key!r} in {settings.paths.manifests} (the stack is down, so only "
            "this state folder's manifest files were searched)",
            manifest_id=key,
        )
    if len(found) > 1:
        raise BadInputError(
            f"manifest ID prefix {key!r} is ambiguous: {', '.join(found)}; give more of its digits"
        )
    return found[0]


def manifest_source(settings: Settings, manifest_id: str) -> ManifestConfig:
    """Where manifest ``manifest_id`` comes from: this state folder's service (no URL when the
    stack is down), as its local admin. ``quarry train`` hands the same source to the trainer."""
    paths = settings.paths
    url = paths.service_url.read_text().strip() if paths.service_url.exists() else None
    return ManifestConfig(id=manifest_id, service_url=url, token_file=paths.admin_token)


def node_manifest(settings: Settings, manifest_id: str) -> Path:
    """The node's verified copy of manifest ``manifest_id``, ``<state>/manifests/<id>.arrow``,
    downloaded from the service only when it is not there yet (a run of ``quarry train`` on
    this state folder then finds it).

    :raises QuarryError: the service's refusal by its status (404: :class:`NotFoundError`),
        :class:`StackError` when the stack is down, else the delivery's message (exit 1).
    """
    source = manifest_source(settings, manifest_id)
    try:
        return deliver_manifest(source, settings.paths.manifests)
    except ManifestDeliveryError as exc:
        raise _delivery_error(exc, source) from exc


def _delivery_error(exc: ManifestDeliveryError, source: ManifestConfig) -> QuarryError:
    if exc.status is not None:
        return _BY_STATUS.get(exc.status, QuarryError)(str(exc), status=exc.status)
    if source.service_url is None and is_manifest_id(exc.key or ""):
        return StackError(f"{exc.message}; is the stack up? run `quarry up`")
    if exc.retryable:  # the service did not answer
        return StackError(f"{exc}; {_UP_HINT}")
    return QuarryError(str(exc))


def _read(path: Path, what: str) -> str:
    if not path.exists():
        raise StackError(f"{what} is not there ({path}); is the stack up? run `quarry up`")
    return path.read_text().strip()


def _checked(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    response.read()
    try:
        problem = response.json()
        detail = problem.get("detail") or problem
    except ValueError:
        detail = response.text[:500]
    error = _BY_STATUS.get(response.status_code, QuarryError)
    raise error(f"{response.status_code}: {detail}", status=response.status_code)
