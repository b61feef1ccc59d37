"""The fixture server the official MCP conformance suite and the tests run against.

Never registered by ``coremetry serve`` (only with ``--fixture``, or by ``coremetry
conformance-fixture``). :mod:`~coremetry.conformance_fixture.fixture` holds the fixture tools,
resources and prompts that the transport tests, the end-to-end tests and the benchmarks drive
(``coremetry stdio --fixture``); :mod:`~coremetry.conformance_fixture.conformance` builds the
server the conformance suite scores.
"""
