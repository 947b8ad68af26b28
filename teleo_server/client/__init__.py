"""Teleo's Python client library: ``Client`` (blocking) and ``AsyncClient`` (asyncio), with typed
results (dataclasses), deadlines on every call, retries only where they are safe, and TLS.

    from teleo_server.client import Client

    with Client() as teleo:                      # 127.0.0.1:50051, or TELEO_ADDRESS
        teleo.store("staging moved to us-east-2 in March", namespace="ops")
        hits = teleo.search("which region is staging in?", top_k=3)
        for r in hits.results:
            print(f"{r.relevance:.2f}  {r.memory.content}")

The token comes from ``token=``, ``TELEO_TOKEN``, the file named by ``TELEO_DEV_TOKEN_FILE``, or
``~/.config/teleo/token``: the places the ``teleo`` command reads. Of the server's modules only
``teleo_server.errors`` and ``teleo_server.paths`` are imported (no settings, no numpy).
"""

from teleo_server.client.aio import AsyncClient
from teleo_server.client.connection import DEFAULT_ADDRESS, NO_RETRY, ClientError, RetryPolicy, resolve_token
from teleo_server.client.sync import Client
from teleo_server.client.types import *  # noqa: F403
from teleo_server.client.types import __all__ as _types

__all__ = ["AsyncClient", "Client", "ClientError", "DEFAULT_ADDRESS", "NO_RETRY", "RetryPolicy", "resolve_token", *_types]
