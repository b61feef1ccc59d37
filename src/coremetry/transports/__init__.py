"""Transports: they move bytes and :class:`coremetry.mcp.Connection` state, nothing about tools.

- :mod:`coremetry.transports.streamable_http` — stateless Streamable HTTP at ``/api/mcp``.
- :mod:`coremetry.transports.sse` — legacy HTTP+SSE (2024-11-05).
- :mod:`coremetry.transports.websocket` — WebSocket at ``/api/mcp/ws``, subprotocol ``mcp``.
- :mod:`coremetry.transports.stdio` — newline-delimited JSON-RPC on stdin/stdout.
- The rules every HTTP route shares (Origin/Host policy, bodies, SSE framing) live in
  :mod:`coremetry.http_edge`, beside REST and the OTLP receiver that use them too.
"""
