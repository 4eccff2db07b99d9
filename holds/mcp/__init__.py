"""MCP: Review Queue as the human side of the Model Context Protocol (README "MCP").

server: /mcp, the `request_approval` tool (Claude Code's --permission-prompt-tool); gateway: a proxy in
front of upstream MCP servers that holds risky tool calls and form elicitations; calls and waiter: what
both share. Served by the ASGI process (reviewqueue/asgi.py), never by gunicorn's sync workers.
"""
