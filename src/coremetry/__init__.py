"""Coremetry MCP: a self-hosted server that lets LLM clients investigate telemetry over MCP.

The package layout follows the architecture; README.md's "Layout" section maps every package,
and ``tests/test_layering.py`` enforces their one-way import order (lowest first: ``roles`` ->
``mcp`` -> ``store`` -> ... -> ``app`` -> ``server`` -> ``cli``):

- :mod:`coremetry.mcp` — the protocol core (JSON-RPC 2.0 framing, MCP lifecycle, registries,
  the call gate, the tool-error contract, per-call deadlines). It imports nothing from the
  transports, auth, the store, quart or hypercorn.
- :mod:`coremetry.transports` — byte movers: Streamable HTTP, legacy HTTP+SSE, WebSocket, stdio.
- :mod:`coremetry.cli` — the ``coremetry`` command.
"""

__version__ = "0.1.0"
