"""Issue 17 "Schemas": every tool's input schema is accepted by the converters real clients use.

- every parameter has exactly one ``type`` (no ``anyOf`` with ``null``, enums typed, no
  ``$ref``), and no object is an open map;
- the OpenAI Agents SDK's strict-schema conversion (``agents.strict_schema``, which its MCP
  adapter applies with ``_reject_open_objects``) converts every tool without an error or a log
  line;
- the ``google-genai`` SDK converts every schema to a Gemini ``Schema`` (refusing unsupported
  fields) in which every node has a ``type`` (the Gemini API refuses a declaration with an
  untyped parameter), and builds a ``FunctionDeclaration`` with the tool's name;
- the old ``{key: value}`` map of ``labels``/``attributes`` is still decoded (not advertised),
  and a cursor continues a query whichever form (or order) its filters came in.
"""

import copy
import json
import logging
import re

import msgspec
import pytest
import trio
from agents.strict_schema import ensure_strict_json_schema
from google.genai import types

from coremetry.mcp import BadArgs
from coremetry.observability.catalog import catalog
from coremetry.observability.tools import (
    AttributeFilter,
    QueryMetricArgs,
    SearchTracesArgs,
    filter_map,
)

from ._client import mcp_client, structured
from .conftest import DemoServer

JsonObject = dict[str, object]
GEMINI_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
"""Gemini's function-declaration name rule."""


def nodes(schema: object, path: str = "$") -> list[tuple[str, JsonObject]]:
    """Every value schema inside ``schema`` (properties and array items), with its path."""
    assert isinstance(schema, dict), (path, schema)
    found = [(path, schema)]
    properties = schema.get("properties", {})
    assert isinstance(properties, dict)
    for name, sub in properties.items():
        found += nodes(sub, f"{path}.{name}")
    if "items" in schema:
        found += nodes(schema["items"], f"{path}[]")
    return found


@pytest.mark.parametrize("entry", catalog("full"), ids=lambda e: str(e["name"]))
def test_every_parameter_has_one_type(entry: JsonObject) -> None:
    schema = entry["inputSchema"]
    assert "$defs" not in json.dumps(schema)
    assert "$ref" not in json.dumps(schema)
    for path, node in nodes(schema):
        assert isinstance(node.get("type"), str), (path, node)
        assert not {"anyOf", "oneOf", "allOf"} & node.keys(), (path, node)
        assert node.get("default", "") is not None, (path, node)
        enum = node.get("enum")
        if isinstance(enum, list):
            assert node["type"] == "string", (path, node)
            assert all(isinstance(v, str) for v in enum), (path, node)
        if node["type"] == "object":
            assert node.get("additionalProperties") is False, (path, node)


@pytest.mark.parametrize("entry", catalog("full"), ids=lambda e: str(e["name"]))
def test_openai_agents_strict_conversion_accepts_every_tool(
    entry: JsonObject, caplog: pytest.LogCaptureFixture
) -> None:
    schema = entry["inputSchema"]
    assert isinstance(schema, dict)
    with caplog.at_level(logging.DEBUG):
        strict = ensure_strict_json_schema(copy.deepcopy(schema), _reject_open_objects=True)
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    assert strict["properties"].keys() == schema["properties"].keys()


def gemini_types(schema: types.Schema, path: str = "$") -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = [(path, schema.type)]
    for name, sub in (schema.properties or {}).items():
        found += gemini_types(sub, f"{path}.{name}")
    if schema.items is not None:
        found += gemini_types(schema.items, f"{path}[]")
    assert schema.any_of is None, path
    return found


@pytest.mark.parametrize("entry", catalog("full"), ids=lambda e: str(e["name"]))
def test_gemini_function_declaration_accepts_every_tool(entry: JsonObject) -> None:
    name = str(entry["name"])
    assert GEMINI_NAME.match(name)
    parameters = types.Schema.from_json_schema(
        json_schema=types.JSONSchema.model_validate(entry["inputSchema"]),
        api_option="GEMINI_API",
        raise_error_on_unsupported_field=True,
    )
    for path, kind in gemini_types(parameters):
        assert kind is not None, f"{name}: {path} has no type"
    declaration = types.FunctionDeclaration(
        name=name, description=str(entry["description"]), parameters=parameters
    )
    assert declaration.parameters is not None
    schema = entry["inputSchema"]
    assert isinstance(schema, dict)
    assert set((declaration.parameters.properties or {}).keys()) == set(schema["properties"])


def test_filters_are_a_list_and_the_old_map_still_decodes() -> None:
    listed = msgspec.json.decode(
        b'{"name": "m", "labels": [{"key": "quantile", "value": "0.99"}]}', type=QueryMetricArgs
    )
    assert listed.labels == [AttributeFilter(key="quantile", value="0.99")]
    old = msgspec.json.decode(
        b'{"name": "m", "labels": {"quantile": "0.99"}}', type=QueryMetricArgs
    )
    assert filter_map(old.labels, "labels") == filter_map(listed.labels, "labels")
    # An explicit null is still accepted where it was.
    nulls = msgspec.json.decode(b'{"service": null, "cursor": null}', type=SearchTracesArgs)
    assert nulls.service is None
    assert nulls.attributes == []
    with pytest.raises(msgspec.ValidationError, match=r"\$\.attributes\[0\]"):
        msgspec.json.decode(b'{"attributes": [{"key": "a", "op": "="}]}', type=SearchTracesArgs)
    twice = [AttributeFilter(key="a", value="1"), AttributeFilter(key="a", value="2")]
    with pytest.raises(BadArgs, match="attributes: key 'a' is given twice"):
        filter_map(twice, "attributes")


async def test_a_cursor_continues_whichever_form_the_filters_were_sent_in(
    demo_server: DemoServer,
) -> None:
    listed = [{"key": "service.name", "value": "ts-travel-service"}]
    query = {"range": "24h", "limit": 2, "attributes": listed}
    with trio.fail_after(300):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            first = structured(await client.call_tool("search_traces", query))
            as_map = {**query, "attributes": {"service.name": "ts-travel-service"}}
            again = structured(await client.call_tool("search_traces", as_map))
            assert again["traces"] == first["traces"]
            after_list = structured(
                await client.call_tool("search_traces", {**query, "cursor": first["cursor"]})
            )
            after_map = structured(
                await client.call_tool("search_traces", {**as_map, "cursor": first["cursor"]})
            )
    assert after_map["traces"] == after_list["traces"]
    assert after_list["traces"] != first["traces"]
    traces = after_list["traces"]
    assert isinstance(traces, list)
    assert all("ts-travel-service" in t["services"] for t in traces)
