"""An A2A peer built with the reference Python SDK (`a2a-sdk`).

Serves one JSON-RPC endpoint that speaks A2A 1.0 (`SendMessage`, header
`A2A-Version: 1.0`) and A2A 0.3 (`message/send`) through the SDK's v0.3
compatibility layer, and its agent card at `/.well-known/agent-card.json`.

Skills (chosen by `message.metadata.skillId`):
- `lookup`: answers a Task whose single artifact is one data part echoing
  the arguments with `found: true` (numbers come back as floats: protobuf);
- `summarize`: answers a Task whose single artifact is one text part;
- `report`: answers a Task whose artifact has a text and a data part;
- `explode`: the task fails.

Usage: python_peer.py PORT_FILE. Binds 127.0.0.1:0 and writes the port to
PORT_FILE once it listens. Every request's method and A2A-Version header is
appended to PORT_FILE + ".log", one JSON object a line, so tests can prove
what reached the peer.
"""

import json
import socket
import sys

import uvicorn
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers.proto_helpers import (
    get_data_parts,
    new_data_part,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"ticket": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["ticket"],
}


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        meta = dict(context.metadata or {})
        if not meta.get("skillId") and message is not None and message.HasField("metadata"):
            meta = json_format.MessageToDict(message.metadata)
        skill = str(meta.get("skillId", ""))
        data = get_data_parts(message.parts) if message else []
        args = data[0] if data and isinstance(data[0], dict) else {}
        task = context.current_task or new_task_from_user_message(message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if skill == "lookup":
            await updater.add_artifact([new_data_part({**args, "found": True})])
            await updater.complete()
        elif skill == "summarize":
            text = str(args.get("text", ""))
            await updater.add_artifact([new_text_part(f"summary: {text[:40]}")])
            await updater.complete()
        elif skill == "report":
            await updater.add_artifact(
                [new_text_part("report ready"), new_data_part({"lines": 3})]
            )
            await updater.complete()
        else:
            await updater.failed(
                updater.new_agent_message([new_text_part(f"skill `{skill}` exploded")])
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def main() -> None:
    port_file = sys.argv[1]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="Ticket Desk (py)",
        description="Looks up and summarizes support tickets.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json", "text/plain"],
        skills=[
            AgentSkill(id="lookup", name="Lookup", description="Finds a ticket.", tags=["tickets"]),
            AgentSkill(id="summarize", name="Summarize", description="Summarizes text.", tags=["text"]),
            AgentSkill(id="report", name="Report", description="A two-part report.", tags=["report"]),
            AgentSkill(id="explode", name="Explode", description="Always fails.", tags=["test"]),
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    card_dict = agent_card_to_dict(card)
    # The card format has no field for argument schemas; skills may carry
    # an `inputSchema` that gateways use verbatim.
    for s in card_dict.get("skills", []):
        if s.get("id") == "lookup":
            s["inputSchema"] = LOOKUP_SCHEMA
    log_path = port_file + ".log"

    async def card_route(_: Request) -> JSONResponse:
        return JSONResponse(card_dict)

    rpc_routes = create_jsonrpc_routes(handler, rpc_url="/rpc", enable_v0_3_compat=True)

    async def logging_mw(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/rpc":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            chunks = []
            more = True
            while more:
                msg = await receive()
                chunks.append(msg.get("body", b""))
                more = msg.get("more_body", False)
            body = b"".join(chunks)
            try:
                parsed = json.loads(body)
                method = parsed.get("method")
            except Exception:
                parsed, method = None, None
            with open(log_path, "a") as f:
                f.write(json.dumps({
                    "method": method,
                    "version": headers.get("a2a-version"),
                    "authorization": headers.get("authorization"),
                    "body": parsed,
                }) + "\n")
            sent = False

            async def replay():
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await app(scope, replay, send)
        return await app(scope, receive, send)

    app = Starlette(
        routes=[Route("/.well-known/agent-card.json", card_route, methods=["GET"]), *rpc_routes]
    )
    config = uvicorn.Config(logging_mw, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    async def serve():
        import asyncio
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.02)
        with open(port_file + ".tmp", "w") as f:
            f.write(str(port))
        import os
        os.replace(port_file + ".tmp", port_file)
        await task

    import asyncio
    asyncio.run(serve())


if __name__ == "__main__":
    main()
