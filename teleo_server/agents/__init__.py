"""How agents reach Teleo: the MCP server (``teleo mcp``) and the Claude Code lifecycle hooks
(``teleo hooks``). Both use the public API only, through the client library."""

__all__: list[str] = []
