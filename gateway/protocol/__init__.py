"""The murmur streaming protocol as pure data and functions: no sockets, no asyncio, no files.

Shared by the server (sequencer, workers) and the client (`mur watch`, tests). Each module
holds one part of the protocol (https://docs.murmur.nexus/reference/streaming-protocol/) as
tables and the functions that read them:
`uris` (extension URIs), `ids` (UUIDv7 ids), `states` (task states and status messages),
`events` (StreamResponse and frame builders), `sse` (the event byte layout), `activation`,
`replay`, `lag`, `errors` (JSON-RPC errors) and `parser` (the client's SSE reader).
"""
