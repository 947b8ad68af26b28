"""The asyncio client: the same methods as ``Client``, each awaited; ``retrieve`` and ``export``
are async iterators.

    async with AsyncClient() as teleo:
        await teleo.store("the deploy key rotates on Mondays", namespace="ops")
        async for event in teleo.retrieve("when does the key rotate?"):
            ...
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from teleo.v1 import memory_pb2_grpc

from teleo_server.client import convert
from teleo_server.client.base import Api, Call, collect
from teleo_server.client.connection import CHANNEL_OPTIONS, ClientError, credentials
from teleo_server.client.types import Event, Filters, Memory, SearchResponse


class AsyncClient(Api):
    """Teleo over a grpc.aio channel; create it inside a running event loop."""

    def __init__(self, address: str | None = None, **kwargs: Any) -> None:
        super().__init__(address, **kwargs)
        creds = credentials(self.ca_cert)
        self._channel = (grpc.aio.secure_channel(self.address, creds, options=CHANNEL_OPTIONS) if creds is not None
                         else grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS))
        self._stub = memory_pb2_grpc.MemoryServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _unary(self, call: Call) -> Any:  # type: ignore[override]
        tries = self._attempts(call)
        while True:
            try:
                request = iter(call.request) if call.client_stream else call.request
                return call.convert(await getattr(self._stub, call.method)(request, metadata=tries.metadata,
                                                                           timeout=tries.left()))
            except grpc.RpcError as exc:
                error = ClientError.from_rpc(exc)
            await asyncio.sleep(tries.wait_after(error))

    async def _stream(self, call: Call) -> AsyncIterator[Any]:  # type: ignore[override]
        tries = self._attempts(call)
        while True:
            started = False
            responses = getattr(self._stub, call.method)(call.request, metadata=tries.metadata, timeout=tries.left())
            try:
                async for response in responses:
                    started = True
                    for item in call.items(response):
                        yield item
                return
            except grpc.RpcError as exc:
                error = ClientError.from_rpc(exc)
            finally:
                responses.cancel()
            if started:
                raise error
            await asyncio.sleep(tries.wait_after(error))

    async def search(self, query: Any, **kwargs: Any) -> SearchResponse:
        """``retrieve`` collected, sent by the server in a few messages unless ``batched=False``."""
        return collect([ev async for ev in self.retrieve(query, **{"batched": True, **kwargs})])

    def retrieve(self, query: Any, **kwargs: Any) -> AsyncIterator[Event]:  # type: ignore[override]
        return super().retrieve(query, **kwargs)

    async def memories(self, filters: Filters | dict | None = None, *, page_size: int = 100) -> AsyncIterator[Memory]:
        cursor = ""
        while True:
            page = await self.list(filters, page_size=page_size, cursor=cursor)
            for m in page.memories:
                yield m
            cursor = page.next_cursor
            if not cursor:
                return

    async def health(self, component: str = "", *, timeout: float = 5.0) -> str:
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=component), timeout=timeout)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


__all__ = ["AsyncClient"]
