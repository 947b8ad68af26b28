"""The blocking client.

    from teleo_server.client import Client

    with Client("127.0.0.1:50051") as teleo:           # token: TELEO_TOKEN or ~/.config/teleo/token
        teleo.store("staging moved to us-east-2 in March", namespace="ops")
        for r in teleo.search("which region is staging in?", top_k=3).results:
            print(f"{r.relevance:.2f}  {r.memory.content}")
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from teleo.v1 import memory_pb2_grpc

from teleo_server.client import convert
from teleo_server.client.base import Api, Call, collect
from teleo_server.client.connection import CHANNEL_OPTIONS, ClientError, credentials
from teleo_server.client.types import Event, Filters, Memory, SearchResponse


class Client(Api):
    """Teleo over a blocking gRPC channel; use it as a context manager, or ``close()`` it.

    Every call has a deadline (``timeout``, 30 s unless given per call) that covers its retries;
    failures raise ``ClientError`` with the gRPC status name and the server's message.
    """

    def __init__(self, address: str | None = None, **kwargs: Any) -> None:
        super().__init__(address, **kwargs)
        creds = credentials(self.ca_cert)
        self._channel = (grpc.secure_channel(self.address, creds, options=CHANNEL_OPTIONS) if creds is not None
                         else grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS))
        self._stub = memory_pb2_grpc.MemoryServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, call: Call) -> Any:
        tries = self._attempts(call)
        while True:
            try:
                request = iter(call.request) if call.client_stream else call.request
                return call.convert(getattr(self._stub, call.method)(request, metadata=tries.metadata,
                                                                     timeout=tries.left()))
            except grpc.RpcError as exc:
                error = ClientError.from_rpc(exc)
            time.sleep(tries.wait_after(error))

    def _stream(self, call: Call) -> Iterator[Any]:
        tries = self._attempts(call)
        while True:
            started = False
            responses = getattr(self._stub, call.method)(call.request, metadata=tries.metadata, timeout=tries.left())
            try:
                for response in responses:
                    started = True
                    yield from call.items(response)
                return
            except grpc.RpcError as exc:
                error = ClientError.from_rpc(exc)
            finally:
                responses.cancel()  # a no-op once the stream ended; frees it when the caller stopped early
            if started:  # part of the stream was delivered: repeating it would deliver it twice
                raise error
            time.sleep(tries.wait_after(error))

    # --- conveniences over the streams -----------------------------------------------------

    def search(self, query: Any, **kwargs: Any) -> SearchResponse:
        """``retrieve`` collected: the results in rank order and the summary (stages included),
        sent by the server in a few messages (``batched``) unless ``batched=False`` is given."""
        return collect(self.retrieve(query, **{"batched": True, **kwargs}))

    def retrieve(self, query: Any, **kwargs: Any) -> Iterator[Event]:  # type: ignore[override]
        return super().retrieve(query, **kwargs)

    def memories(self, filters: Filters | dict | None = None, *, page_size: int = 100) -> Iterator[Memory]:
        """Every memory you may read that matches ``filters``, oldest first, page after page."""
        cursor = ""
        while True:
            page = self.list(filters, page_size=page_size, cursor=cursor)
            yield from page.memories
            cursor = page.next_cursor
            if not cursor:
                return

    def health(self, component: str = "", *, timeout: float = 5.0) -> str:
        """The serving status of the server ("") or of a component ("embedding", "index", "store"):
        "SERVING", "NOT_SERVING", ...; ClientError NOT_FOUND for an unknown component."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=component), timeout=timeout)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


__all__ = ["Client"]
