"""Test and fixture support shipped with the package (never registered by ``coremetry serve``).

:mod:`coremetry.testing.fixture` holds the fixture tools, resources and prompts that the
transport tests, the end-to-end tests and the benchmarks drive (``coremetry stdio --fixture``).
"""
