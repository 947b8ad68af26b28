"""Bearer-token authentication: tokens map to an agent, its namespaces and an access level.

A token looks like ``teleo_<token_id>_<secret>``. Only its sha256 is stored; the secret has 256 bits
of entropy, so a fast hash is enough (there is nothing to brute-force).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

import structlog

from teleo_server.domain import AccessLevel, Principal
from teleo_server.errors import InvalidArgument, Unauthenticated
from teleo_server.store.base import MemoryStore, StoredToken

log = structlog.get_logger(__name__)

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_SCOPE_RE = re.compile(r"^(\*|[A-Za-z0-9_.:-]{1,128}\*?)$")
_TOKEN_RE = re.compile(r"^teleo_([0-9a-f]{12})_[A-Za-z0-9_-]{20,}$")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(
    store: MemoryStore,
    agent_id: str,
    read_namespaces: Iterable[str],
    write_namespaces: Iterable[str],
    access_level: AccessLevel = AccessLevel.INTERNAL,
    default_namespace: str = "default",
    note: str = "",
) -> tuple[StoredToken, str]:
    """Create and store a token; returns (record, the token string — shown once, never stored)."""
    read = tuple(sorted(set(read_namespaces)))
    write = tuple(sorted(set(write_namespaces)))
    if not agent_id or len(agent_id) > 128:
        raise InvalidArgument("must be 1..128 characters", field="agent_id")
    for scope in read + write:
        if not _SCOPE_RE.match(scope):
            raise InvalidArgument(f"{scope!r} is not a namespace, 'prefix*' or '*'", field="namespaces")
    if not NAMESPACE_RE.match(default_namespace):
        raise InvalidArgument(f"{default_namespace!r} is not a valid namespace", field="default_namespace")
    token_id = secrets.token_hex(6)
    token = f"teleo_{token_id}_{secrets.token_urlsafe(32)}"
    record = StoredToken(
        token_id=token_id,
        agent_id=agent_id,
        read_namespaces=read,
        write_namespaces=write,
        access_level=AccessLevel(access_level),
        default_namespace=default_namespace,
        created=time.time(),
        revoked=None,
        note=note,
    )
    store.add_token(record, hash_token(token))
    log.info("auth.token_created", token_id=token_id, agent_id=agent_id)
    return record, token


def principal_of(record: StoredToken) -> Principal:
    return Principal(
        agent_id=record.agent_id,
        token_id=record.token_id,
        read_namespaces=frozenset(record.read_namespaces),
        write_namespaces=frozenset(record.write_namespaces),
        access_level=record.access_level,
        default_namespace=record.default_namespace,
    )


# Used when auth is switched off in config: a local, single-user experiment.
ANONYMOUS_ADMIN = Principal(
    agent_id="anonymous",
    token_id="",
    read_namespaces=frozenset({"*"}),
    write_namespaces=frozenset({"*"}),
    access_level=AccessLevel.RESTRICTED,
    default_namespace="default",
)


class Authenticator:
    def __init__(self, store: MemoryStore, enabled: bool = True) -> None:
        self._store = store
        self._enabled = enabled

    def authenticate(self, authorization: str | None) -> Principal:
        """Resolve an ``authorization`` metadata value to a Principal or raise Unauthenticated."""
        if not self._enabled:
            return ANONYMOUS_ADMIN
        if not authorization:
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata; create a token with `teleo token create`")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("authorization metadata must be 'Bearer <token>'")
        token = token.strip()
        if not _TOKEN_RE.match(token):
            raise Unauthenticated("malformed token")
        record = self._store.token_by_hash(hash_token(token))
        if record is None:
            raise Unauthenticated("unknown token")
        if record.revoked is not None:
            raise Unauthenticated(f"token {record.token_id} was revoked")
        return principal_of(record)


def ensure_dev_token(store: MemoryStore, path: Path) -> str | None:
    """On a first start with no tokens at all, create an all-namespace development token.

    It is written to ``path`` with mode 0600, where the CLI looks for it. Returns the token when one
    was created, else None.
    """
    if store.list_tokens():
        return None
    _, token = create_token(
        store,
        agent_id="dev",
        read_namespaces=["*"],
        write_namespaces=["*"],
        access_level=AccessLevel.RESTRICTED,
        default_namespace="default",
        note="local development token created on first start",
    )
    write_token_file(path, token)
    return token


def write_token_file(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


__all__ = [
    "ANONYMOUS_ADMIN",
    "Authenticator",
    "NAMESPACE_RE",
    "create_token",
    "ensure_dev_token",
    "hash_token",
    "principal_of",
    "write_token_file",
]
