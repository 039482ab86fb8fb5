"""Personal API tokens: made, looked up and revoked here (the token page and the API's
authentication both call in). The secret is 32 random bytes, shown once; the database
keeps its SHA-256 and a short prefix, so a leaked database holds no usable token."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from stacks import audit
from stacks.models import ApiToken

# Every secret starts with this, so a scanner (and a person) can tell what leaked.
SCHEME = "cdkd_"
PREFIX_CHARS = len(SCHEME) + 6
# Writing `last_used_at` on every call would make each read a write: once a minute is enough.
LAST_USED_EVERY = timedelta(minutes=1)
MAX_TOKEN_CHARS = 200


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def create_token(
    user, name: str, *, expires_at: datetime | None, read_only: bool, client_address: str | None = None
) -> tuple[ApiToken, str]:
    """A new token of `user` and its secret (the only time the secret exists outside the
    caller's hands). Audited (the id, never the secret)."""
    secret = SCHEME + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            token_hash=hash_secret(secret),
            prefix=secret[:PREFIX_CHARS],
            read_only=read_only,
            expires_at=expires_at,
        )
        audit.record(
            "api-token.created",
            actor=user.get_username(),
            actor_user=user,
            result="ok",
            client_address=client_address,
            details={
                "token": token.pk,
                "prefix": token.prefix,
                "name": name,
                "readOnly": read_only,
                "expires": expires_at.isoformat() if expires_at else None,
            },
        )
    return token, secret


def revoke_token(user, token: ApiToken, *, client_address: str | None = None) -> bool:
    """Revoke one of the person's own tokens; False when it was revoked already."""
    with transaction.atomic():
        done = ApiToken.objects.filter(pk=token.pk, user=user, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if done:
            audit.record(
                "api-token.revoked",
                actor=user.get_username(),
                actor_user=user,
                result="ok",
                client_address=client_address,
                details={"token": token.pk, "prefix": token.prefix, "name": token.name},
            )
    return bool(done)


def token_for(secret: str) -> ApiToken | None:
    """The usable token whose secret this is (not revoked, not expired, its person active),
    or None. Looked up by hash: the secret itself is never compared or stored."""
    if not secret.startswith(SCHEME) or len(secret) > MAX_TOKEN_CHARS:
        return None
    token = ApiToken.objects.select_related("user").filter(token_hash=hash_secret(secret)).first()
    now = timezone.now()
    if token is None or not token.usable(now) or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
