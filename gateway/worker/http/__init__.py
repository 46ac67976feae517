"""The worker's own HTTP/1.1 front: every accepted connection starts here (front.py), a stream
method is served by it for the stream's whole life, everything else is handed to hypercorn."""
