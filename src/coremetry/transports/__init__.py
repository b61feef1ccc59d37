"""Transports: they move bytes and :class:`coremetry.mcp.Connection` state, nothing about tools.

- :mod:`coremetry.transports.stdio` — newline-delimited JSON-RPC on stdin/stdout.
"""
