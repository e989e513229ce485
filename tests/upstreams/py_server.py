"""An upstream MCP server built with the official Python SDK (`mcp` 2.x),
served over Streamable HTTP (stateless, JSON answers) for cedargate's
upstream tests.

Usage: python py_server.py PORT [OTLP_URL]

With OTLP_URL (a collector's OTLP/HTTP base URL), the server exports its
traces there with the OpenTelemetry SDK (service `py-upstream`, batches
every 100 ms): the SDK's own server span of each request, which
continues the caller's trace context of `params._meta`.

Tools: `add` (two integers), `shout` (uppercases a text), `locate` (its
`region` argument is marked `x-mcp-header`, so a 2026-07-28 client must
mirror it as `Mcp-Param-Region`), `archive` (asks the user to confirm
through the SDK's `Elicit` resolver: at 2026-07-28 an `input_required`
result the client answers by calling again, and -32021 for a client that
did not declare `elicitation`), and `calls_seen`, which answers how many
calls of `add`, `shout`, `locate` and `archive` reached this server, so a
test can prove a denied call never arrived.
"""

import sys
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field

calls: list[str] = []
server = MCPServer("py-upstream", version="1.0.0")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    calls.append("add")
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Uppercase a text."""
    calls.append("shout")
    return text.upper()


@server.tool()
def locate(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    """Where a region is served from (its argument travels as a header too)."""
    calls.append("locate")
    return f"served from {region}"


class Confirmation(BaseModel):
    ok: bool


def ask_to_archive(name: str) -> Elicit[Confirmation]:
    return Elicit(f"Archive {name}?", Confirmation)


@server.tool()
def archive(name: str, confirmation: Annotated[Confirmation, Resolve(ask_to_archive)]) -> str:
    """Archive a note once the user confirms."""
    calls.append("archive")
    return f"archived {name}" if confirmation.ok else f"kept {name}"


@server.tool()
def calls_seen() -> int:
    """How many calls of the other tools reached this server."""
    return len(calls)


def export_traces(collector: str) -> None:
    """The OpenTelemetry SDK as a deployment would set it up: a tracer
    provider exporting over OTLP/HTTP in batches."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "py-upstream"}))
    exporter = OTLPSpanExporter(endpoint=f"{collector.rstrip('/')}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    trace.set_tracer_provider(provider)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        export_traces(sys.argv[2])
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
