"""Shared asyncio clients: one pyignite AioClient per event loop, reconnected after a failure.

Why: one connection carries many requests in flight (the loaders' get_all window), so every coroutine of a loop
shares it; a lost one is dropped and the next request connects again, under one lock so only one connects."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.clients.ignite.endpoints import Endpoint


class AioClients:
    """One AioClient (one connection, many requests in flight on it) shared by every coroutine of a loop;
    a failed one is dropped and the next request connects again."""

    def __init__(self, endpoint: Endpoint, partition_aware: bool = False) -> None:
        self.endpoint, self.partition_aware = endpoint, partition_aware
        self.client: Any = None
        self._lock: asyncio.Lock | None = None

    async def get(self) -> Any:
        if self.client is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self.client is None:
                    self.client = await self.endpoint.connect_aio(self.partition_aware)
        return self.client

    async def discard(self, client: Any) -> None:
        if client is not None and client is self.client:
            self.client = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self.endpoint.timeout_s)

    async def close(self) -> None:
        await self.discard(self.client)
