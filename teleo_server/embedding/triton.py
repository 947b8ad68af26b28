"""Embedding through a Triton server's ``teleo_embed`` model (gRPC, ``tritonclient.grpc.aio``).

One client per embedder (the factory makes one embedder per process). Texts from concurrent
``embed`` calls are coalesced into one request of up to ``max_batch`` texts, waiting at most
``batch_window_ms`` for company; Triton's dynamic batcher merges requests further. Every call
carries ``timeout_s``.

Failures become :mod:`teleo_server.errors`: a dead or restarting server is ``Unavailable``
(the aio client raises raw ``grpc.aio.AioRpcError`` for those, not InferenceServerException).
After a failure the embedder reports not ready and refuses work at once, re-checking the
model's readiness at most every ``recheck_s``; when Triton is back it re-reads the model version
and serves again.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
import numpy as np
import structlog

from teleo_server.domain import EmbeddingSet
from teleo_server.embedding import wire
from teleo_server.embedding.base import TextRole, check_texts
from teleo_server.embedding.batching import Coalescer, EmbedObservers
from teleo_server.errors import (
    Internal,
    InvalidArgument,
    ResourceExhausted,
    TeleoError,
    Unavailable,
)

log = structlog.get_logger(__name__)

_MAX_MESSAGE = 2**31 - 1
_CHANNEL_ARGS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    # reconnect quickly once Triton is back instead of gRPC's default backoff (up to 120 s)
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
ROLE_QUERY, ROLE_DOCUMENT = TextRole.QUERY.value, TextRole.DOCUMENT.value
_UNAVAILABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "NOT_FOUND", "ABORTED",
                "UNKNOWN"}


def map_error(exc: BaseException, url: str) -> TeleoError:
    """A transport or Triton error as the project's error tree (the caller raises ``from``)."""
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, TeleoError):
        return exc
    if isinstance(exc, grpc.aio.AioRpcError):
        code, message = exc.code().name, exc.details() or ""
    elif isinstance(exc, InferenceServerException):
        code, message = str(exc.status() or "").removeprefix("StatusCode."), exc.message() or ""
    elif isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        code, message = "DEADLINE_EXCEEDED", "timed out"
    elif isinstance(exc, (ConnectionError, OSError)):
        code, message = "UNAVAILABLE", str(exc)
    else:
        return Internal(f"triton {url}: {exc!r}")
    text = f"triton {url}: {code} {message}".strip()
    if code in _UNAVAILABLE or (code == "INTERNAL" and "not healthy" in message):
        return Unavailable(text)   # a dead server, a crashed model stub, a timeout
    if code == "INVALID_ARGUMENT":
        return InvalidArgument(text, field="texts")
    if code == "RESOURCE_EXHAUSTED":
        return ResourceExhausted(text)
    return Internal(text)


class TritonEmbedder:
    """The :class:`~teleo_server.embedding.base.Embedder` protocol over Triton gRPC.

    Parameters
    ----------
    url : ``host:port`` of Triton's gRPC endpoint.
    model : the entry-point model (``teleo_embed``).
    timeout_s : deadline of every call to Triton.
    max_batch : texts per request (``teleo_embed``'s max_batch_size is 64).
    batch_window_ms : how long a first text waits for others to share its request.
    max_in_flight : requests outstanding at once; beyond that callers queue.
    recheck_s : least time between readiness re-checks while Triton is down.
    """

    def __init__(self, url: str, *, model: str = "teleo_embed", timeout_s: float = 10.0,
                 max_batch: int = 32, batch_window_ms: float = 0.0, max_in_flight: int = 4,
                 recheck_s: float = 0.5) -> None:
        self.url = url
        self.model = model
        self.timeout_s = timeout_s
        self.max_batch = max_batch
        self.batch_window_s = batch_window_ms / 1000.0
        self.recheck_s = recheck_s
        self._max_in_flight = max_in_flight
        self._client = None
        self._version: str | None = None
        self._healthy = False
        self._last_check = 0.0
        self._batches: Coalescer | None = None
        self._check_lock: asyncio.Lock | None = None
        self.observers = EmbedObservers()

    @property
    def model_version(self) -> str:
        if self._version is None:
            raise Unavailable(f"triton {self.url}: not started")
        return self._version

    @property
    def queue_depth(self) -> int:
        """Texts waiting for a request to Triton."""
        batches = self._batches
        return batches.pending if batches is not None else 0

    @property
    def description(self) -> str:
        return f"triton://{self.url}"

    async def start(self) -> None:
        """Connect, check the model is ready and learn its version; raises Unavailable."""
        import tritonclient.grpc.aio as grpcclient

        if self._client is None:
            self._client = grpcclient.InferenceServerClient(self.url, channel_args=_CHANNEL_ARGS)
            self._check_lock = asyncio.Lock()
            self._batches = Coalescer(self._infer_batch, max_batch=self.max_batch,
                                      window_s=self.batch_window_s,
                                      max_in_flight=self._max_in_flight,
                                      on_error=self._on_batch_error,
                                      observers=self.observers)
        if not await self._check():
            raise Unavailable(f"triton {self.url}: model {self.model} is not ready")
        log.info("embedder.started", backend="triton", url=self.url,
                 model_version=self._version)

    async def ready(self) -> bool:
        """Asks Triton (one short call) whether the model is ready, and remembers the answer."""
        if self._client is None:
            return False
        return await self._check()

    async def _check(self) -> bool:
        assert self._check_lock is not None
        async with self._check_lock:
            self._last_check = time.monotonic()
            try:
                ok = await self._client.is_model_ready(self.model, client_timeout=self.timeout_s)
                if ok and (not self._healthy or self._version is None):
                    # back after an outage (or first start): the models may have changed
                    self._version = (await self._infer(["version probe"], [ROLE_QUERY]))[0] \
                        .model_version
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
                ok, reason = False, str(map_error(exc, self.url))
            else:
                reason = "" if ok else "model not ready"
            if ok != self._healthy:
                log.log(logging.INFO if ok else logging.WARNING, "embedder.readiness",
                        url=self.url, ready=ok, reason=reason)
            self._healthy = ok
            return ok

    async def embed(self, texts: list[str], role: TextRole) -> list[EmbeddingSet]:
        """One EmbeddingSet per text; raises Unavailable at once while Triton is down."""
        if self._client is None or self._batches is None:
            raise Unavailable(f"triton {self.url}: not started")
        check_texts(texts)
        if not texts:
            return []
        if not self._healthy and (time.monotonic() - self._last_check < self.recheck_s
                                  or not await self._check()):
            raise Unavailable(f"triton {self.url}: model {self.model} is not ready")
        return await self._batches.submit(texts, role is TextRole.QUERY)

    def _on_batch_error(self, exc: TeleoError) -> None:
        if isinstance(exc, Unavailable):
            self._healthy = False

    async def _infer_batch(self, texts: list[str], is_query: list[bool]) -> list[EmbeddingSet]:
        return await self._infer(texts, [ROLE_QUERY if q else ROLE_DOCUMENT for q in is_query])

    async def _infer(self, texts: list[str], roles: list[str]) -> list[EmbeddingSet]:
        import tritonclient.grpc.aio as grpcclient

        inputs = []
        for name, values in (("TEXT", texts), ("ROLE", roles)):
            tensor = grpcclient.InferInput(name, [len(values), 1], "BYTES")
            tensor.set_data_from_numpy(wire.encode_strings(values))
            inputs.append(tensor)
        outputs = [grpcclient.InferRequestedOutput(n) for n in wire.outputs()]
        try:
            response = await self._client.infer(self.model, inputs, outputs=outputs,
                                                client_timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - mapped into the error tree here
            raise map_error(exc, self.url) from exc
        arrays: dict[str, np.ndarray] = {n: response.as_numpy(n) for n in wire.outputs()}
        sets = wire.unpack(arrays)
        if len(sets) != len(texts):
            raise Internal(f"triton {self.url}: {len(sets)} results for {len(texts)} texts")
        return sets

    async def close(self) -> None:
        if self._batches is not None:
            await self._batches.close(Unavailable("embedder closed"))
        if self._client is not None:
            await self._client.close()
        self._client = None
        self._batches = None
        self._healthy = False


__all__ = ["TritonEmbedder", "map_error"]
