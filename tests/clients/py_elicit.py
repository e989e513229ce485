"""The official Python MCP SDK client (`mcp` 2.x) calling a tool that asks
its user for input (at 2026-07-28: an `input_required` result the client
answers by calling again).

Usage: python py_elicit.py <MCP URL> <bearer key> <tool>

Calls <tool> with `{"name": "n1"}` twice, in the SDK's default mode: from a
client that declares no elicitation (the server's -32021 must reach it),
then from one whose elicitation callback accepts with `{"ok": true}` (the
SDK answers the server's request and retries on its own). Prints one JSON
summary line.
"""

import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def connect(url: str, key: str, elicitation_callback=None) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=300)
    )
    transport = streamable_http_client(url, http_client=http)
    return Client(transport, elicitation_callback=elicitation_callback)


async def main(url: str, key: str, tool: str) -> dict:
    summary: dict = {}
    async with connect(url, key) as client:
        try:
            result = await client.call_tool(tool, {"name": "n1"})
            summary["undeclared"] = {"unexpected": result.model_dump(mode="json")}
        except MCPError as e:
            summary["undeclared"] = {"code": e.error.code, "data": e.error.data}

    asked: list[str] = []

    async def accept(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    async with connect(url, key, accept) as client:
        summary["protocolVersion"] = client.protocol_version
        try:
            result = await client.call_tool(tool, {"name": "n1"})
            summary["declared"] = {
                "isError": bool(result.is_error),
                "text": result.content[0].text if result.content else None,
            }
        except MCPError as e:
            summary["declared"] = {"code": e.error.code, "message": e.error.message}
    summary["asked"] = asked
    return summary


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
