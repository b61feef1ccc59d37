"""Coremetry MCP: a self-hosted server that lets LLM clients investigate telemetry over MCP.

The package layout follows the architecture (``shared/DESIGN.md`` §2):

- :mod:`coremetry.mcp` — the protocol core (JSON-RPC 2.0 framing, MCP lifecycle, registries,
  the call gate, the tool-error contract, per-call deadlines). It imports nothing from the
  transports, auth, the store, quart or hypercorn.
- :mod:`coremetry.transports` — byte movers (stdio today; HTTP, SSE and WebSocket later).
- :mod:`coremetry.cli` — the ``coremetry`` command.
"""

__version__ = "0.1.0"
