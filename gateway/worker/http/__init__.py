"""The worker's own HTTP/1.1 front: every accepted connection starts here, a stream method is
served by it for the stream's whole life, everything else is handed to hypercorn.

- `accept`: the burst accept loop (uvloop's `Loop`, answering hypercorn's `create_server`),
  which gives each accepted connection a `Front`;
- `front`: the connection's protocol object: reads the head and body, hands on or serves;
- `head_checks`: the head read once (httptools) and checked for the ambiguous forms;
- `eager`: the app's run for a stream request, at once, a task only for what must wait;
- `framing`: the bytes of the front's answers, as hypercorn's h11 path writes them;
- `transport_sink`: the stream's sink on the connection itself (the front is one).
"""
