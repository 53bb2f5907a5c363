"""The authentication Debezium Server's HTTP sink can do, beside Quarry's own bearer tokens.

- Standard Webhooks signatures (``debezium.sink.http.authentication.type=standard-webhooks``):
  each request carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
  ``webhook-signature`` (``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body`` under the
  shared ``whsec_`` secret, ``service.webhook_secret``). Checked with the ``standardwebhooks``
  package, which refuses a timestamp more than 5 minutes from now (a replayed request).
  A valid signature admits the request to ``POST /v1/cdc/debezium`` only.
- JWT (``authentication.type=jwt``): Debezium posts ``{"username", "password",
  "token_expiry_in_minutes", "refresh_token_expiry_in_minutes"}`` to ``<jwt.url>auth/
  authenticate`` and sends the ``jwt`` it gets back as ``Authorization: Bearer: <jwt>`` (with
  a colon), renewing it at ``<jwt.url>auth/refreshToken`` with ``jwt_refresh_token``;
  ``expires_in`` is in milliseconds. Here the username is a Quarry token's name and the
  password the token itself: the JWT (HS256 under ``service.jwt_secret``, shared by every
  replica) names the token by its digest, so it carries the token's scopes and a revoked token
  revokes its JWTs within ``service.token_cache_s``.
"""

from __future__ import annotations

import binascii
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from service.errors import UnauthorizedError

ISSUER = "quarry"
ALGORITHM = "HS256"
WEBHOOK_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
_KINDS = ("access", "refresh")


def is_jwt(token: str) -> bool:
    """A JWT's three dot-separated parts (Quarry's own tokens have no dots)."""
    return token.count(".") == 2


def has_webhook_headers(headers: Mapping[str, str]) -> bool:
    return any(name in headers for name in WEBHOOK_HEADERS)


def verify_webhook(secret: SecretStr | None, body: bytes, headers: Mapping[str, str]) -> None:
    """Check a Standard Webhooks signature of ``body``.

    :raises UnauthorizedError: no secret is set, a header is missing, the timestamp is more
        than 5 minutes off, or no signature matches.
    """
    if secret is None:
        raise UnauthorizedError(
            "this request is signed as a Standard Webhook, but the service has no webhook "
            "secret (set QUARRY_SERVICE__WEBHOOK_SECRET to Debezium's "
            "debezium.sink.http.authentication.webhook.secret)",
            error="invalid_token",
        )
    picked = {name: headers[name] for name in WEBHOOK_HEADERS if name in headers}
    try:
        Webhook(secret.get_secret_value()).verify(body, picked)
    except WebhookVerificationError as error:
        raise UnauthorizedError(
            f"bad Standard Webhooks signature: {error}", error="invalid_token"
        ) from None
    except (ValueError, binascii.Error):  # a signature that is not "v1,<base64>"
        raise UnauthorizedError(
            "bad Standard Webhooks signature: webhook-signature must be 'v1,<base64>' "
            "(space-separated when several)",
            error="invalid_token",
        ) from None


@dataclass(frozen=True)
class Grant:
    """What the token endpoints answer, as Debezium's ``JWTAuthorizationResponse`` reads it
    (times in milliseconds)."""

    jwt: str
    jwt_refresh_token: str
    expires_in: int
    refresh_token_expires_in: int


class JwtIssuer:
    """Issues and checks the JWTs of one service (every replica shares ``secret``).

    :param secret: the HMAC key (``service.jwt_secret``, at least 32 characters).
    :param max_minutes: the longest access-token lifetime granted, in minutes.
    :param max_refresh_minutes: the longest refresh-token lifetime granted, in minutes.
    """

    def __init__(self, secret: SecretStr, max_minutes: int, max_refresh_minutes: int) -> None:
        self._key = secret.get_secret_value()
        self._max = {"access": max_minutes, "refresh": max_refresh_minutes}

    def grant(self, name: str, token_digest: str, minutes: int, refresh_minutes: int) -> Grant:
        """A new access and refresh token for the Quarry token ``name`` (by its digest);
        lifetimes are capped at the issuer's maxima."""
        access_s = 60 * max(1, min(minutes, self._max["access"]))
        refresh_s = 60 * max(1, min(refresh_minutes, self._max["refresh"]))
        return Grant(
            jwt=self._encode(name, token_digest, "access", access_s),
            jwt_refresh_token=self._encode(name, token_digest, "refresh", refresh_s),
            expires_in=access_s * 1000,
            refresh_token_expires_in=refresh_s * 1000,
        )

    def digest_of(self, token: str, kind: str = "access") -> str:
        """The Quarry token digest a valid JWT of ``kind`` names.

        :raises UnauthorizedError: a bad signature, an expired token or one of another kind.
        """
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                issuer=ISSUER,
                options={"require": ["exp", "iat", "sub", "typ", "qtd"]},
            )
        except jwt.ExpiredSignatureError:
            raise UnauthorizedError("the JWT has expired", error="invalid_token") from None
        except jwt.InvalidTokenError as error:
            raise UnauthorizedError(f"invalid JWT: {error}", error="invalid_token") from None
        if claims["typ"] != kind:
            named = {"access": "an access token", "refresh": "a refresh token"}
            raise UnauthorizedError(
                f"this JWT is {named.get(claims['typ'], 'of no kind')}, not {named[kind]}",
                error="invalid_token",
            )
        return str(claims["qtd"])

    def _encode(self, name: str, token_digest: str, kind: str, lifetime_s: int) -> str:
        assert kind in _KINDS
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": name,
            "typ": kind,
            "qtd": token_digest,
            "iat": now,
            "exp": now + lifetime_s,
        }
        return jwt.encode(claims, self._key, algorithm=ALGORITHM)
