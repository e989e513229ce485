"""The official Python MCP SDK client (`mcp` 2.x) against a running gateway.

Usage: python py_client.py <http|sse> <session URL> <bearer key>

Connects in the SDK's default `auto` mode (it probes `server/discover` and
falls back to `initialize`), lists tools, stores an observation (allowed),
recalls (denied by the test's policy) and prints one JSON summary line,
including every JSON-RPC method it POSTed and the HTTP status it got.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def main(transport_name: str, url: str, key: str) -> dict:
    posts: list[dict] = []

    async def on_response(response: httpx2.Response) -> None:
        request = response.request
        if request.method != "POST":
            posts.append({"method": request.method, "status": response.status_code})
            return
        try:
            body = json.loads(request.content or b"null")
        except ValueError:
            body = None
        method = body.get("method") if isinstance(body, dict) else None
        posts.append(
            {
                "rpc": method,
                "status": response.status_code,
                "protocolHeader": request.headers.get("mcp-protocol-version"),
            }
        )

    headers = {"Authorization": f"Bearer {key}"}
    if transport_name == "sse":

        def factory(headers=None, timeout=None, auth=None):
            return httpx2.AsyncClient(
                headers=headers, timeout=timeout, auth=auth, event_hooks={"response": [on_response]}
            )

        transport = sse_client(f"{url}/sse", headers=headers, httpx_client_factory=factory)
    else:
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"response": [on_response]},
        )
        transport = streamable_http_client(url, http_client=http)

    summary: dict = {"transport": transport_name}
    async with Client(transport) as client:
        summary["protocolVersion"] = client.protocol_version
        info = client.server_info
        summary["serverInfo"] = info.model_dump() if info is not None else None
        tools = await client.list_tools()
        summary["tools"] = [t.name for t in tools.tools]
        stored = await client.call_tool(
            "af_memory_remember",
            {"content": f"python {transport_name} client was here", "type": "pattern"},
        )
        summary["remember"] = {
            "isError": bool(stored.is_error),
            "text": stored.content[0].text if stored.content else None,
        }
        try:
            result = await client.call_tool("af_memory_recall", {"query": "python client", "workType": "feature"})
            summary["recall"] = {"unexpected": result.model_dump(mode="json")}
        except MCPError as e:
            summary["recall"] = {"code": e.error.code, "message": e.error.message, "data": e.error.data}
    summary["posts"] = posts
    return summary


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
