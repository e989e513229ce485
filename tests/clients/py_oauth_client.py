"""The official Python MCP SDK client (`mcp` 2.x), given only a person's
project URL on the gateway, signing in through the SDK's OAuth support.

Usage: python py_oauth_client.py <project URL> <user> [remember]

The SDK meets the gateway's 401 challenge, reads the protected-resource
metadata, discovers the identity provider, registers itself and asks the
provider to authorize it with PKCE and the RFC 8707 resource. A person
would sign in in a browser; here the provider's test sign-in answers for the
user named in `login_hint`, and the redirect handler follows the redirects
(with the provider's cookies) to the redirect URI. Then it lists the tools,
recalls memories (allowed) and, with `remember`, stores one: on the
gateway's 403 `insufficient_scope` the SDK signs the person in again for the
challenge's scopes (step-up) and retries. It prints one JSON summary line.
"""

import asyncio
import json
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

REDIRECT = "http://127.0.0.1:49154/callback"


class Memory:
    """Token storage kept in memory."""

    def __init__(self) -> None:
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens) -> None:
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client) -> None:
        self.client = client


async def main(url: str, user: str, then: str | None) -> dict:
    storage = Memory()
    summary: dict = {}
    answer: dict = {}

    async def redirect_handler(authorization_url: str) -> None:
        summary["signIns"] = summary.get("signIns", 0) + 1
        summary["challenged"] = True
        query = parse_qs(urlparse(authorization_url).query)
        summary["lastScope"] = query.get("scope", [None])[0]
        summary["resource"] = query.get("resource", [None])[0]
        next_url = f"{authorization_url}&login_hint={user}"
        async with httpx2.AsyncClient(follow_redirects=False) as http:
            for _ in range(20):
                response = await http.get(next_url)
                location = response.headers.get("location")
                if not location:
                    raise RuntimeError(f"sign-in stopped: HTTP {response.status_code} {response.text}")
                target = urljoin(next_url, location)
                if target.startswith(REDIRECT):
                    params = parse_qs(urlparse(target).query)
                    answer.update({k: v[0] for k, v in params.items()})
                    return
                next_url = target
        raise RuntimeError("too many redirects")

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))

    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="cedargate-py-oauth-test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=300))
    async with Client(streamable_http_client(url, http_client=http)) as client:
        tools = await client.list_tools()
        summary["tools"] = [t.name for t in tools.tools]
        result = await client.call_tool("af_memory_recall", {"query": "anything", "workType": "feature"})
        summary["recall"] = {"isError": bool(result.is_error)}
        if then == "remember":
            stored = await client.call_tool("af_memory_remember", {"content": f"{user} stepped up"})
            summary["remember"] = {"isError": bool(stored.is_error)}
    summary["registeredClient"] = storage.client.client_id if storage.client else None
    summary["grantedScope"] = storage.tokens.scope if storage.tokens else None
    return summary


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))))
