"""Resource subscriptions and ``list_changed`` streams.

Contract:

- Handshake era: ``resources/subscribe``/``unsubscribe`` are accepted (and ``resources.subscribe``
  advertised) only when enabled; otherwise ``-32601``. Those connections get no list-changed or
  updated notifications.
- 2026-07-28: ``subscriptions/listen`` needs a stream (SSE); it first sends
  ``notifications/subscriptions/acknowledged`` with what was agreed (only what was asked for;
  resource subscriptions only when enabled), then one notification per matching change, each
  carrying the subscription id — the listen request's own id, JSON type kept.
- Changes are kept in a bounded ring (:data:`MAX_CHANGES`): a stream that falls further behind
  misses the oldest ones. :meth:`Subscriptions.end` ends every stream, present and future,
  with a ``complete`` result (graceful shutdown).
"""

from typing import Final, Literal

import trio
from msgspec import UNSET, Struct, UnsetType

from . import codes
from .calls import Connection, PendingCall
from .framing import ProtocolError, Reply, Request, result_reply
from .wire import (
    ENCODER,
    META_SUBSCRIPTION_ID,
    EmptyResult,
    JsonObject,
    ListChangedParams,
    ListenParams,
    Notification,
    ReadResourceParams,
    ResourceUpdatedParams,
    ResultResponse,
    SubscriptionAcknowledgedParams,
    SubscriptionFilter,
)

MAX_CHANGES: Final = 1024
"""How many recent changes a listen stream can catch up on."""


class Subscriptions:
    """The change feed of one server and the handlers that subscribe to it.

    Args:
        resource_subscriptions: accept resource subscriptions (both eras).
        server_meta: the ``_meta`` of every stateless result.
    """

    def __init__(self, *, resource_subscriptions: bool, server_meta: JsonObject) -> None:
        self._resource_subscriptions = resource_subscriptions
        self._server_meta = server_meta
        self._changes: list[tuple[str, str]] = []
        self._max_changes = MAX_CHANGES
        self._change_seq = 0
        self._change_event = trio.Event()
        self._ended = False

    def subscribe(self, request: Request, params: ReadResourceParams, conn: Connection) -> Reply:
        """``resources/subscribe``/``unsubscribe`` (handshake era): accepted when enabled."""
        if not self._resource_subscriptions:
            raise ProtocolError(
                codes.METHOD_NOT_FOUND, f"Method not found: {request.method} is not enabled"
            )
        return result_reply(self._server_meta, request, EmptyResult())

    def notify_list_changed(self, kind: Literal["tools", "prompts", "resources"]) -> None:
        """Tell every ``subscriptions/listen`` stream that asked for it that ``kind`` changed."""
        self._publish((kind, ""))

    def notify_resource_updated(self, uri: str) -> None:
        """Tell every listen stream subscribed to ``uri`` that the resource changed."""
        self._publish(("resource", uri))

    def end(self) -> None:
        """End every ``subscriptions/listen`` stream gracefully (call when shutting down).

        Each open listen call answers ``SubscriptionsListenResult`` (``resultType: complete``,
        ``_meta`` carrying its subscription id), which the transport sends before ending the
        stream; listens started afterwards end at once the same way.
        """
        self._ended = True
        event, self._change_event = self._change_event, trio.Event()
        event.set()

    def _publish(self, change: tuple[str, str]) -> None:
        self._changes.append(change)
        del self._changes[: -self._max_changes]
        self._change_seq += 1
        event, self._change_event = self._change_event, trio.Event()
        event.set()

    def listen(self, request: Request, params: ListenParams, conn: Connection) -> PendingCall:
        """``subscriptions/listen``: acknowledge, then stream matching changes until the end."""
        wanted = params.notifications
        agreed = SubscriptionFilter(
            tools_list_changed=True if wanted.tools_list_changed is True else UNSET,
            prompts_list_changed=True if wanted.prompts_list_changed is True else UNSET,
            resources_list_changed=True if wanted.resources_list_changed is True else UNSET,
            resource_subscriptions=(
                list(wanted.resource_subscriptions)
                if self._resource_subscriptions
                and not isinstance(wanted.resource_subscriptions, UnsetType)
                else UNSET
            ),
        )
        # The subscription id is the listen request's own id, JSON type kept (schema:
        # SubscriptionsAcknowledgedNotification, "io.modelcontextprotocol/subscriptionId").
        meta: JsonObject = {META_SUBSCRIPTION_ID: request.id}
        send = conn.send
        if send is None:
            raise ProtocolError(
                codes.INVALID_REQUEST,
                "subscriptions/listen needs a stream: send Accept: text/event-stream",
            )
        kinds = {
            "tools": agreed.tools_list_changed is True,
            "prompts": agreed.prompts_list_changed is True,
            "resources": agreed.resources_list_changed is True,
        }
        uris = (
            set()
            if isinstance(agreed.resource_subscriptions, UnsetType)
            else set(agreed.resource_subscriptions)
        )

        async def body() -> Reply:
            ack = SubscriptionAcknowledgedParams(notifications=agreed, meta=meta)
            await send(
                ENCODER.encode(
                    Notification(method="notifications/subscriptions/acknowledged", params=ack)
                )
            )
            seen = self._change_seq
            while True:
                if self._ended:
                    # Graceful teardown (server shutdown): SubscriptionsListenResult.
                    ended = EmptyResult(result_type="complete")
                    ended.meta = {**self._server_meta, **meta}
                    return Reply(ENCODER.encode(ResultResponse(id=request.id, result=ended)))
                event = self._change_event
                await event.wait()
                missed = self._change_seq - seen
                seen = self._change_seq
                for kind, uri in self._changes[-missed:] if missed else []:
                    if kind == "resource" and uri in uris:
                        params_out: Struct = ResourceUpdatedParams(uri=uri, meta=meta)
                        method = "notifications/resources/updated"
                    elif kinds.get(kind, False):
                        params_out = ListChangedParams(meta=meta)
                        method = f"notifications/{kind}/list_changed"
                    else:
                        continue
                    await send(ENCODER.encode(Notification(method=method, params=params_out)))

        return PendingCall(conn, request.id, body)
