"""The one place gymlab makes HTTP requests: ``client.Client`` (in-process or over aiohttp), the cookie
codec, the resend and retry rules (docs/transport.md)."""
