"""The OTLP/HTTP receiver: ``POST /v1/traces``, ``/v1/logs``, ``/v1/metrics`` into the store.

Follows the OTLP/HTTP spec (https://opentelemetry.io/docs/specs/otlp/#otlphttp), on the main
listener, behind the same admission and authentication as every other endpoint:

==========================================  ====================================================
request                                     answer
==========================================  ====================================================
``Origin``/``Host`` refused, ``OPTIONS``,   as every endpoint (:func:`~coremetry.http_edge.admit`):
other methods                               403 / 421, CORS preflight, 405
no or bad credential                        401 + ``WWW-Authenticate: Bearer realm="coremetry"``
                                            (``error="invalid_token"`` when one was sent)
role below ``ingest.min_role``              403 (default ``editor``: a viewer cannot write)
``Content-Type`` not ``application/         415
x-protobuf`` / ``application/json``;
``Content-Encoding`` not ``gzip``/identity
body over ``ingest.max_body_bytes``         413 (the cap applies to the *decompressed* size, so a
                                            gzip bomb stops at the cap)
body that does not decode (not gzip, not    400, ``Status.message`` names what is wrong (and the
the message, not JSON; a JSON body with     JSON path, or the top-level key expected); nothing
only another signal's or unknown keys)      is written
store unavailable                           503 (retryable; ``Retry-After: 5``)
decoded                                     200 + ``Export<signal>ServiceResponse``;
                                            ``partial_success`` with the rejected count and the
                                            reasons when items were rejected (records dated
                                            more than ``ingest.max_future_skew_s`` ahead of our
                                            clock included), and -- with a count of 0, as the
                                            spec allows for warnings -- the adjustments that
                                            mean the data was wrong (``SENDER_WARNINGS``: a
                                            span ending before it started, stored with
                                            duration 0)
any other ``/v1/*`` path (``/v1/profiles``)  404 + ``Status`` naming the paths served
==========================================  ====================================================

Every answer's body is in the request's encoding (protobuf or JSON): the response message on
200, a ``google.rpc.Status`` otherwise (JSON when the request's type was not one of the two).
Each request is one ``store.write`` -- one transaction: all of its accepted items or none.
Responses are never gzip-encoded (allowed: the spec says MAY).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from typing import Final, Literal, TypeAlias

import msgspec
import trio
from google.protobuf.message import Message
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from coremetry.http_edge import (
    Authenticate,
    BodyTooLarge,
    ClientGone,
    Headers,
    HttpPolicy,
    admit,
    anonymous,
    challenge_for,
    read_body,
    send_response,
    unauthorized_message,
)
from coremetry.ingest import _otlp_json as wire
from coremetry.ingest.decoded import Decoded, Signal
from coremetry.ingest.errors import MalformedInput
from coremetry.ingest.otlp import (
    SENDER_WARNINGS,
    decode_logs_json,
    decode_logs_protobuf,
    decode_metrics_json,
    decode_metrics_protobuf,
    decode_traces_json,
    decode_traces_protobuf,
)
from coremetry.roles import role_satisfies
from coremetry.store.errors import StoreError
from coremetry.store.interface import TelemetryStore

__all__ = ["OTLP_PATHS", "OtlpReceiver"]

log = logging.getLogger(__name__)

OTLP_PATHS: Final[dict[str, Signal]] = {
    "/v1/traces": "span",
    "/v1/logs": "log",
    "/v1/metrics": "metric_point",
}
"""The receiver's paths (the OTLP/HTTP defaults) and the signal each carries."""

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
Encoding: TypeAlias = Literal["application/x-protobuf", "application/json"]

THREAD_THRESHOLD_BYTES: Final = 128 * 1024
"""Bodies at least this large are decoded on a worker thread, so the event loop stays free."""

_DECODERS: Final[dict[tuple[Signal, Encoding], Callable[[bytes], Decoded]]] = {
    ("span", PROTOBUF): decode_traces_protobuf,
    ("span", JSON): decode_traces_json,
    ("log", PROTOBUF): decode_logs_protobuf,
    ("log", JSON): decode_logs_json,
    ("metric_point", PROTOBUF): decode_metrics_protobuf,
    ("metric_point", JSON): decode_metrics_json,
}

# google.rpc.Code values (google/rpc/code.proto); OTLP clients must not act on them.
_INVALID_ARGUMENT: Final = 3
_NOT_FOUND: Final = 5
_PERMISSION_DENIED: Final = 7
_RESOURCE_EXHAUSTED: Final = 8
_UNAVAILABLE: Final = 14
_UNAUTHENTICATED: Final = 16
_UNIMPLEMENTED: Final = 12

_JSON_ENCODER: Final = msgspec.json.Encoder()


def _media_type(header: str | None) -> str:
    return "" if header is None else header.split(";", 1)[0].strip().lower()


class _TooLarge(Exception):
    """The decompressed body passed the cap."""


def gunzip_capped(body: bytes, limit_bytes: int) -> bytes:
    """Decompress a gzip body (one or more members), refusing to grow past ``limit_bytes``.

    Raises:
        _TooLarge: the decompressed size would pass ``limit_bytes``.
        MalformedInput: not valid gzip.
    """
    out: list[bytes] = []
    size = 0
    data = body
    try:
        while data:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            while data:
                chunk = inflater.decompress(data, limit_bytes + 1 - size)
                size += len(chunk)
                if size > limit_bytes:
                    raise _TooLarge
                out.append(chunk)
                data = inflater.unconsumed_tail
                if inflater.eof:
                    break
            if not inflater.eof:
                raise MalformedInput("the gzip body is truncated")
            data = inflater.unused_data.lstrip(b"\0")
    except zlib.error as exc:
        raise MalformedInput(f"the body is not valid gzip: {exc}") from None
    return b"".join(out)


class OtlpReceiver:
    """ASGI handler for the OTLP/HTTP paths (:data:`OTLP_PATHS`); see the module docstring.

    Args:
        store: where accepted telemetry is written (one ``write`` per request).
        policy: Origin/Host rules (the same as every endpoint's).
        authenticate: resolves the caller (the same hook as every endpoint's).
        min_role: the lowest role that may write (config ``ingest.min_role``).
        max_body_bytes: the largest body, after decompression, in bytes (config
            ``ingest.max_body_bytes``).
        max_future_skew_s: records dated more than this many seconds after ``clock`` are
            rejected items (config ``ingest.max_future_skew_s``).
        clock: this server's clock in unix nanoseconds (``time.time_ns``; tests pin it).
    """

    def __init__(
        self,
        store: TelemetryStore,
        policy: HttpPolicy,
        *,
        authenticate: Authenticate = anonymous,
        min_role: str = "editor",
        max_body_bytes: int = 16 * 1024 * 1024,
        max_future_skew_s: float = 3600.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.policy = policy
        self.authenticate = authenticate
        self.min_role = min_role
        self.max_body_bytes = max_body_bytes
        self.max_future_skew_ns = round(max_future_skew_s * 1e9)
        self.clock = clock

    async def not_found(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Answer a ``/v1/*`` path that is not one of :data:`OTLP_PATHS`: 404 with a ``Status``.

        In protobuf when the request was protobuf, JSON otherwise (never the HTML page of the
        web framework), naming the paths this receiver serves.
        """
        headers = Headers(scope["headers"])
        encoding: Encoding = (
            PROTOBUF if _media_type(headers.get("content-type")) == PROTOBUF else JSON
        )
        path = scope["path"][:100]
        await send_response(
            send,
            404,
            _status_body(
                encoding,
                _NOT_FOUND,
                f"{path} is not served: this OTLP/HTTP receiver accepts "
                f"{', '.join(OTLP_PATHS)} (no other signal, such as profiles)",
            ),
            content_type=encoding.encode(),
        )

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one request to one of :data:`OTLP_PATHS`."""
        signal = OTLP_PATHS[scope["path"]]  # the app routes only these paths here
        headers = Headers(scope["headers"])
        content_type = _media_type(headers.get("content-type"))
        encoding: Encoding = PROTOBUF if content_type == PROTOBUF else JSON

        async def refuse(
            status: int, code: int, message: str, extra: list[tuple[bytes, bytes]]
        ) -> None:
            await send_response(
                send,
                status,
                _status_body(encoding, code, message),
                content_type=encoding.encode(),
                headers=extra,
            )

        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method="POST",
            allow=b"POST, OPTIONS",
            # admit() labels its refusals application/json: answer them in JSON.
            error_body=lambda message: _status_body(JSON, _INVALID_ARGUMENT, message),
        )
        if cors is None:
            return
        try:
            caller = await self.authenticate(headers)
        except Exception as exc:  # the auth layer's reason is never sent
            await refuse(
                401, _UNAUTHENTICATED, unauthorized_message(exc), [challenge_for(exc), *cors]
            )
            return
        if not role_satisfies(caller.role, self.min_role):
            await refuse(
                403,
                _PERMISSION_DENIED,
                f"writing telemetry needs the {self.min_role} role (this identity is "
                f"{caller.role or 'viewer'})",
                cors,
            )
            return
        if content_type not in (PROTOBUF, JSON):
            await refuse(
                415,
                _UNIMPLEMENTED,
                f"Content-Type {content_type or '(none)'} is not supported: send "
                f"{PROTOBUF} or {JSON}",
                cors,
            )
            return
        content_encoding = _media_type(headers.get("content-encoding"))
        if content_encoding not in ("", "identity", "gzip"):
            await refuse(
                415,
                _UNIMPLEMENTED,
                f"Content-Encoding {content_encoding} is not supported: send gzip or no encoding",
                cors,
            )
            return
        too_large = f"the body exceeds {self.max_body_bytes} bytes (ingest.max_body_bytes)"
        try:
            body = await read_body(receive, self.max_body_bytes)
            if content_encoding == "gzip":
                body = gunzip_capped(body, self.max_body_bytes)
        except (BodyTooLarge, _TooLarge):
            await refuse(413, _RESOURCE_EXHAUSTED, too_large, cors)
            return
        except MalformedInput as exc:
            await refuse(400, _INVALID_ARGUMENT, str(exc), cors)
            return
        except ClientGone:
            return
        decode = _DECODERS[(signal, encoding)]
        try:
            if len(body) >= THREAD_THRESHOLD_BYTES:
                decoded = await trio.to_thread.run_sync(decode, body)
            else:
                decoded = decode(body)
        except MalformedInput as exc:
            await refuse(400, _INVALID_ARGUMENT, str(exc), cors)
            return
        decoded.refuse_future(self.clock(), self.max_future_skew_ns)
        if len(decoded.batch):
            try:
                await self.store.write(decoded.batch)
            except StoreError as exc:
                log.warning("OTLP %s write failed: %s", scope["path"], exc)
                await refuse(
                    503,
                    _UNAVAILABLE,
                    "the telemetry store is unavailable; retry later",
                    [(b"retry-after", b"5"), *cors],
                )
                return
        await send_response(
            send,
            200,
            _response_body(signal, encoding, decoded),
            content_type=None,
            headers=[(b"content-type", encoding.encode()), *cors],
        )


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_protobuf(code: int, message: str) -> bytes:
    """A protobuf ``google.rpc.Status{code, message}`` (``google/rpc/status.proto``).

    Encoded by hand -- field 1 ``int32 code`` (varint, tag ``0x08``), field 2 ``string message``
    (length-delimited, tag ``0x12``) -- because the one package that ships this message
    (googleapis-common-protos) has no type information; the tests decode it with that package.
    """
    text = message.encode("utf-8")
    out = b""
    if code:
        out += b"\x08" + _varint(code)
    if text:
        out += b"\x12" + _varint(len(text)) + text
    return out


def _status_body(encoding: Encoding, code: int, message: str) -> bytes:
    if encoding == PROTOBUF:
        return status_protobuf(code, message)
    return _JSON_ENCODER.encode(wire.RpcStatus(code=code, message=message))


def _response_body(signal: Signal, encoding: Encoding, decoded: Decoded) -> bytes:
    rejected = decoded.rejected_count(signal)
    parts = [
        decoded.describe_rejections(signal) if rejected else "",
        decoded.describe_notes(SENDER_WARNINGS),
    ]
    message = "; ".join(part for part in parts if part)
    # OTLP/HTTP "Partial Success": rejected_* = 0 with an error_message is a warning.
    if encoding == PROTOBUF:
        response: Message
        if signal == "span":
            response = trace_service_pb2.ExportTraceServiceResponse()
            if message:
                response.partial_success.rejected_spans = rejected
                response.partial_success.error_message = message
        elif signal == "log":
            response = logs_service_pb2.ExportLogsServiceResponse()
            if message:
                response.partial_success.rejected_log_records = rejected
                response.partial_success.error_message = message
        else:
            response = metrics_service_pb2.ExportMetricsServiceResponse()
            if message:
                response.partial_success.rejected_data_points = rejected
                response.partial_success.error_message = message
        return response.SerializeToString()
    json_response: msgspec.Struct
    if signal == "span":
        json_response = wire.ExportTraceServiceResponse(
            partial_success=wire.ExportTracePartialSuccess(
                rejected_spans=str(rejected), error_message=message
            )
            if message
            else None
        )
    elif signal == "log":
        json_response = wire.ExportLogsServiceResponse(
            partial_success=wire.ExportLogsPartialSuccess(
                rejected_log_records=str(rejected), error_message=message
            )
            if message
            else None
        )
    else:
        json_response = wire.ExportMetricsServiceResponse(
            partial_success=wire.ExportMetricsPartialSuccess(
                rejected_data_points=str(rejected), error_message=message
            )
            if message
            else None
        )
    return _JSON_ENCODER.encode(json_response)
