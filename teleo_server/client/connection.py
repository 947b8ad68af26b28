"""What the sync and asyncio clients share: where to connect, the token, TLS, deadlines, retries and
the one error type a call raises."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from teleo_server.errors import RETRY_AFTER_KEY
from teleo_server.paths import default_token_file

DEFAULT_ADDRESS = "127.0.0.1:50051"


def resolve_token(token: str | None = None) -> str | None:
    """The bearer token: ``token``, else ``TELEO_TOKEN``, else the file named by
    ``TELEO_DEV_TOKEN_FILE``, else ``~/.config/teleo/token`` (the places the ``teleo`` CLI reads)."""
    if token:
        return token
    if os.environ.get("TELEO_TOKEN"):
        return os.environ["TELEO_TOKEN"]
    path = Path(os.environ.get("TELEO_DEV_TOKEN_FILE") or default_token_file())
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def resolve_address(address: str | None = None) -> str:
    return address or os.environ.get("TELEO_ADDRESS") or DEFAULT_ADDRESS


def credentials(ca_cert: str | Path | bytes | None) -> grpc.ChannelCredentials | None:
    """TLS credentials trusting ``ca_cert`` (a path or PEM bytes); None for a plaintext channel."""
    if ca_cert is None:
        return None
    pem = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
    return grpc.ssl_channel_credentials(pem)


CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 0),
]


class ClientError(Exception):
    """A call that failed: the gRPC status name (``code``), the server's message, and the request id
    to quote when reporting it."""

    def __init__(self, code: str, message: str, request_id: str = "", retry_after: float | None = None) -> None:
        self.code, self.message, self.request_id, self.retry_after = code, message, request_id, retry_after
        super().__init__(f"{code}: {message}" if message else code)

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError) -> "ClientError":
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        trailers = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
        retry_after = None
        if RETRY_AFTER_KEY in trailers:
            try:
                retry_after = max(0.0, float(trailers[RETRY_AFTER_KEY]) / 1e3)
            except ValueError:
                retry_after = None
        return cls(code.name if code is not None else "UNKNOWN", details or "", trailers.get("x-request-id", ""),
                   retry_after)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries with exponential backoff and jitter, within the call's deadline.

    A call is retried when the server refused it saying it did nothing and when to come back
    (RESOURCE_EXHAUSTED with a retry-after), or when the server could not be reached (UNAVAILABLE)
    and the method is safe to repeat: reads, and stores (the server de-duplicates content, so a
    repeated store answers ``duplicate`` with the first one's id). Nothing else is retried.
    """

    attempts: int = 4                 # in all, the first included; 1 = never retry
    initial_backoff: float = 0.1      # seconds before the first retry
    max_backoff: float = 2.0
    multiplier: float = 2.0
    unavailable: frozenset[str] = field(default_factory=lambda: frozenset({"UNAVAILABLE"}))

    def delay(self, attempt: int, error: ClientError) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` >= 1)."""
        backoff = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        wait = random.uniform(0.5 * backoff, backoff)
        return max(wait, error.retry_after or 0.0)

    def should_retry(self, error: ClientError, idempotent: bool, attempt: int) -> bool:
        if attempt >= self.attempts:
            return False
        if error.code == "RESOURCE_EXHAUSTED":
            return error.retry_after is not None
        return idempotent and error.code in self.unavailable


NO_RETRY = RetryPolicy(attempts=1)


def metadata(token: str | None, request_id: str | None = None) -> list[tuple[str, str]]:
    md = [("authorization", f"Bearer {token}")] if token else []
    if request_id:
        md.append(("x-request-id", request_id))
    return md


__all__ = [
    "CHANNEL_OPTIONS",
    "ClientError",
    "DEFAULT_ADDRESS",
    "NO_RETRY",
    "RETRY_AFTER_KEY",
    "RetryPolicy",
    "credentials",
    "metadata",
    "resolve_address",
    "resolve_token",
]
