"""The CLI's HTTP client for a running service: URL and admin token from the state folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

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
        url = _read(settings.paths.service_url, "the service URL")
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
    error = _BY_STATUS.get(response.status_code, QuarryError)
    raise error(f"{response.status_code}: {detail}", status=response.status_code)
