"""Small helpers the gRPC tests share: a token's call metadata, and the status of a failing call."""

from __future__ import annotations

import grpc
import pytest

from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel


def token_auth(api_server, agent, read, write, level=AccessLevel.INTERNAL, ns="default") -> list[tuple[str, str]]:
    """Metadata of a new token for ``agent`` created in the test server's store."""
    _, token = create_token(api_server.app.core.store, agent, read, write, level, ns)
    return [("authorization", f"Bearer {token}")]


def status(fn) -> tuple[grpc.StatusCode, str]:
    """(code, details) of the RpcError that ``fn()`` raises."""
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


__all__ = ["status", "token_auth"]
