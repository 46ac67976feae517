"""The worker's own HTTP/1.1 server: every accepted connection starts here, every HTTP/1.1
request is served here, and HTTP/2 is handed to hypercorn at the connection's first bytes.

- `accept`: the burst accept loop (uvloop's `Loop`, answering hypercorn's `create_server`),
  which gives each accepted connection a `Front`; `plain_http`: plain HTTP on a TLS door;
- `front`: the connection's protocol object and its states: reads each request, runs the
  app for it, one at a time, in order (a stream's opening with no coroutine: `Front._at_once`);
- `head_checks`: a head read alone (httptools) and checked for the ambiguous forms;
- `body`: a request's body cut where it ends (Content-Length or chunks);
- `cycle`: one request's run of the app: its scope (or the at-once path's view), receive and
  send, and the hand-over of the front to the hub as its stream's sink;
- `eager`: the app's run for a whole `POST /` the at-once path does not take, at once, a task
  only for what must wait;
- `framing`: the bytes of the front's answers, as h11 frames them;
- `transport_sink`: the stream's sink on the connection itself (the front is one).
"""
