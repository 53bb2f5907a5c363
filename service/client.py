"""The CLI's HTTP client for a running service: URL and admin token from the state folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from service.errors import (
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    ServiceError,
    StackError,
    UnauthorizedError,
)
from service.paths import StatePaths
from service.server import url_file
from service.settings import Settings

_BY_STATUS: dict[int, type[ServiceError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
}


class ServiceClient:
    """Calls the service of one state folder, as its local admin."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 600.0) -> None:
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout_s, headers={"Authorization": f"Bearer {token}"}
        )

    @classmethod
    def for_state(cls, settings: Settings) -> ServiceClient:
        paths: StatePaths = settings.paths
        url = _read(url_file(settings), "the service URL")
        token = _read(paths.admin_token, "the admin token")
        return cls(url, token)

    def get_json(self, path: str, **params: Any) -> Any:
        return _checked(self._http.get(path, params=params)).json()

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return _checked(self._http.post(path, json=body)).json()

    def download(self, path: str, target: Path) -> None:
        with self._http.stream("GET", path) as response:
            _checked(response)
            with target.open("wb") as file:
                for chunk in response.iter_bytes():
                    file.write(chunk)


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
    error = _BY_STATUS.get(response.status_code, ServiceError)
    raise error(f"{response.status_code}: {detail}", status=response.status_code)
