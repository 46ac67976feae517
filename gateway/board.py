"""The ring's control words: how the sequencer, workers and supervisor signal each other.

Each is one aligned u64 in the ring's control area, written by exactly one role:
- ``CLOSING`` (supervisor): the gateway is draining; workers end every stream now.
- ``SESSION_CLOSED`` (sequencer): the capsule's stream ended; it holds the head id at that
  moment plus one, so a watcher delivers everything up to it, then ``capsule-closed``.
- ``SEQUENCER_PID`` (sequencer): set once it serves control calls; ``/readyz`` reads it.
- ``UPSTREAM_CONNECTED`` (sequencer): 1 while the upstream (or the embedded capsule) is live.
- ``UPSTREAM_THREADED`` (sequencer, upstream mode): 1 when the upstream's connection-ack said
  `conversationMode` `threaded`, so every worker's connection-ack says what the upstream's says.
- ``CONFIG_GENERATION`` (sequencer): bumped at each applied reload (SIGHUP); a worker that
  sees it move asks the sequencer for the reloadable settings (worker/reload.py).
- ``TLS_EXPIRY`` (supervisor, with TLS): --certfile's notAfter, in Unix seconds, for the
  exporter's murgw_tls_certificate_expiry_timestamp_seconds.
- ``ARMED + i`` (worker i sets, sequencer clears): worker i is idle and wants one wake-up
  byte on its socket at the next event. Under load the flag stays clear and the sequencer
  makes no syscall for that worker.
- ``LOOP_BEAT + i`` (worker i): bumped each time worker i's event loop turns a pulse
  (``gateway.stall``) and as its hub writes (``gateway.worker.hub``); the supervisor
  replaces a worker whose word stands still.

The ring is created with ``COUNT`` control words.
"""

CLOSING = 0
SESSION_CLOSED = 1
SEQUENCER_PID = 2
UPSTREAM_CONNECTED = 3
UPSTREAM_THREADED = 4
TLS_EXPIRY = 6
CONFIG_GENERATION = 7
ARMED = 8
MAX_WORKERS = 56
LOOP_BEAT = ARMED + MAX_WORKERS
COUNT = LOOP_BEAT + MAX_WORKERS
