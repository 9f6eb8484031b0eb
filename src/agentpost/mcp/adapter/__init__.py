"""The one seam between agentpost and the MCP server SDK (`mcp` 2.3).

Everything else in the project talks to `MailboxServer`, so an SDK upgrade touches this package
only: `server` (tools, resources, push), `arguments` (a tool call's arguments, checked),
`streamable_http` (the HTTP request a message came on, and whose each 2025-era connection
is) and `rebinding` (the `Host` and `Origin` a request over HTTP may name). It is built on
the low-level `mcp.server.Server`, not on `MCPServer`, because `MCPServer` hides the pieces a
post office needs: it has no public way to serve 2025-era `resources/subscribe`, it rewrites
tool exceptions into "Error executing tool NAME" text (so the stable error code would not lead
the message), and it declares no experimental capabilities. Tool schemas still come from the
SDK's own `Tool.from_function`, exactly as `@mcp.tool()` builds them.

Push, in the two protocol revisions one server answers:

- 2025-11-25 (initialize handshake): a client sends `resources/subscribe`; later
  `notify_resource_updated` sends `notifications/resources/updated` on that client's connection
  channel (stdio pipe, or the GET SSE stream on Streamable HTTP, where a push made before the
  client opened that stream is lost: no event store is configured). Connections are remembered
  by a middleware and forgotten through each connection's exit stack when it closes.
- 2026-07-28 (no handshake): a client holds a `subscriptions/listen` request open; the SDK's
  `ListenHandler` forwards `ResourceUpdated` events published on an in-process
  `InMemorySubscriptionBus`. Several replicas would need a `SubscriptionBus` over a shared
  pub/sub instead.

Both work from any task on the server's event loop, with no request in flight.

What we found in the SDK (2.3.0) while writing this:

- The per-client `Connection` (which owns the standalone outbound channel, the exit stack and
  the raw `notify`) has no public accessor from a handler: `ServerRequestContext.session` is a
  per-request `ServerSession` wrapping it as `_connection`. `_connection_of` reads that one
  private attribute and fails loudly if it ever disappears.
- Experimental capabilities (Claude Code's `claude/channel`) are only a parameter of
  `Server.get_capabilities`; a small subclass fills them in so stdio and HTTP both advertise them.
- A raw custom notification (`notifications/claude/channel` with `{content, meta}`) goes out
  through the public `Connection.notify` (a raw, best-effort send on the standalone stream) to
  2025-era connections. 2026-era connections are not sent custom notifications: that revision only
  permits server messages on streams the client opened (a listen stream or a request's own
  stream). The SDK client drops unknown notifications unless a `ClientExtension` binds the
  method with a `NotificationBinding`; our end-to-end test does exactly that.
"""

from agentpost.mcp.adapter.server import MailboxServer, ToolOutput
from agentpost.mcp.adapter.streamable_http import HttpRequest, current_http_request

__all__ = ["HttpRequest", "MailboxServer", "ToolOutput", "current_http_request"]
