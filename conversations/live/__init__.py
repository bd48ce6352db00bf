"""Live updates over WebSockets; only the ASGI routing imports this package."""
