"""Tokens map to an agent's scope; only hashes are stored; bad tokens are refused."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from teleo_server.auth import Authenticator, create_token, ensure_dev_token, hash_token
from teleo_server.domain import AccessLevel
from teleo_server.errors import InvalidArgument, Unauthenticated
from teleo_server.store import SQLiteStore


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "t.db")
    yield s
    s.close()


def test_token_resolves_to_its_scope(store):
    record, token = create_token(store, "planner", ["team:*", "shared"], ["team:planner"], AccessLevel.CONFIDENTIAL, "team:planner")
    p = Authenticator(store).authenticate(f"Bearer {token}")
    assert p.agent_id == "planner" and p.token_id == record.token_id
    assert p.can_read("team:x", AccessLevel.CONFIDENTIAL)
    assert p.can_read("shared", AccessLevel.PUBLIC)
    assert not p.can_read("shared", AccessLevel.RESTRICTED)
    assert not p.can_read("other", AccessLevel.PUBLIC)
    assert p.can_write("team:planner", AccessLevel.INTERNAL)
    assert not p.can_write("shared", AccessLevel.PUBLIC)


def test_only_the_hash_is_stored(store, tmp_path):
    _, token = create_token(store, "a", ["x"], ["x"])
    dump = "\n".join(sqlite3.connect(tmp_path / "t.db").iterdump())
    assert token not in dump and hash_token(token) in dump


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("Basic abc", id="wrong-scheme"),
        pytest.param("Bearer ", id="no-token"),
        pytest.param("Bearer teleo_000000000000_" + "x" * 43, id="unknown"),
        pytest.param("Bearer not-a-token", id="malformed"),
    ],
)
def test_bad_credentials_are_unauthenticated(store, header):
    create_token(store, "a", ["x"], ["x"])
    with pytest.raises(Unauthenticated):
        Authenticator(store).authenticate(header)


def test_revoked_token_is_refused(store):
    record, token = create_token(store, "a", ["x"], ["x"])
    auth = Authenticator(store)
    auth.authenticate(f"Bearer {token}")
    store.revoke_token(record.token_id, 1.0)
    with pytest.raises(Unauthenticated, match="revoked"):
        auth.authenticate(f"Bearer {token}")


def test_bad_scopes_are_rejected(store):
    with pytest.raises(InvalidArgument, match="namespaces"):
        create_token(store, "a", ["bad ns"], [])


def test_dev_token_is_created_once_with_user_only_permissions(store, tmp_path):
    path = tmp_path / "cfg" / "token"
    token = ensure_dev_token(store, path)
    assert token and path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Authenticator(store).authenticate(f"Bearer {token}").can_write("anything", AccessLevel.RESTRICTED)
    assert ensure_dev_token(store, path) is None
