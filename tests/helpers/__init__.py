"""What more than one test file uses: the gateway as a subprocess, HTTP clients, SSE readers,
watchers, TLS and JWT material. No test file imports another; they import these."""
