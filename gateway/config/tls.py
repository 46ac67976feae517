"""HTTPS on the door: --certfile and --keyfile.

With both set, every worker's hypercorn serves TLS on the shared listening socket and offers
ALPN `h2` and `http/1.1`: a client that picks `h2` gets HTTP/2 (hypercorn's h2 path, where
streams use the plain ASGI sink), any other gets HTTP/1.1 (the front of
gateway/worker/http/front.py, as on the plain port). The burst accept loop
(gateway/worker/http/accept.py) wraps each accepted socket in TLS itself, so a TLS door
still drains a reconnect storm.

An https:// --upstream is verified against --upstream-cacert (or the system store):
`upstream_context` builds that client context and `upstream_cacert_problem` checks the file
at start, as the pair below is checked.

The pair is checked at start by loading it into a context exactly as each worker's server
will (with hypercorn's `Config.create_ssl_context`, `configure` below): a
missing, unreadable or mismatched file stops the gateway with one line (exit 2) instead of
every worker failing on its own.

SIGHUP re-reads the pair (certbot-style renewal in place): the reload checks it the same way
(a pair that does not load rejects the reload, nothing changed), and only a pair that loads is loaded again into each
worker's serving context (`reload_pair`), the very SSLContext object hypercorn serves with (`configure` keeps it).
OpenSSL copies a context's certificate into each connection when the connection is made, so
new handshakes get the new certificate and open connections keep theirs, none dropped. Each
worker checks the pair on a scratch context again before loading it (the files may have been
rewritten since), since a failed load_cert_chain can leave a live context holding a new
certificate with the old key.
"""

from __future__ import annotations

import ssl
import time
from typing import TypeGuard

ALPN_PROTOCOLS = ["h2", "http/1.1"]

_serving: list[ssl.SSLContext] = []  # this worker's serving contexts, made by hypercorn (`configure`)


def certificate_problem(certfile: str | None, keyfile: str | None) -> str | None:
    """Why the pair cannot serve HTTPS (one line), or None: both unset, or both good."""
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        given, missing = ("--certfile", "--keyfile") if keyfile is None else ("--keyfile", "--certfile")
        return f"{given} needs {missing} too: HTTPS takes a certificate and its private key"
    for option, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            return f"{option} {path}: {exc.strerror or exc}"
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except ssl.SSLError as exc:
        return (f"--certfile {certfile} / --keyfile {keyfile}: "
                f"not a usable PEM certificate and key ({exc.reason or exc})")
    except ValueError as exc:  # e.g. an encrypted key: the gateway takes no password
        return f"--keyfile {keyfile}: {exc}"
    return None


def upstream_context(cacert: str | None) -> ssl.SSLContext:
    """The client context an https:// upstream is verified with: only --upstream-cacert's
    CAs when it is set, else the system store; hostname checking on. ALPN offers only
    http/1.1: the link speaks HTTP/1.1 (sequencer/capsule/upstream_http.py)."""
    context = ssl.create_default_context(cafile=cacert)
    context.set_alpn_protocols(["http/1.1"])
    return context


def upstream_cacert_problem(cacert: str | None) -> str | None:
    """Why --upstream-cacert cannot be trusted (one line), or None: unset, or usable."""
    if cacert is None:
        return None
    try:
        upstream_context(cacert)
    except ssl.SSLError as exc:  # a file that holds no PEM certificate
        return f"--upstream-cacert {cacert}: not a usable PEM CA certificate file ({exc.reason or exc})"
    except OSError as exc:
        return f"--upstream-cacert {cacert}: {exc.strerror or exc}"
    return None


def enabled(certfile: str | None, keyfile: str | None) -> TypeGuard[str]:
    """Both set; a type checker then knows `certfile` is a path."""
    return certfile is not None and keyfile is not None


def configure(hypercorn_config, certfile: str | None, keyfile: str | None, handshake_timeout: float,
              h2: bool = True) -> None:
    """Have hypercorn serve TLS with ALPN h2 + http/1.1 (http/1.1 alone without `h2`: the
    adapter cannot bound HTTP/2 on this hypercorn); a handshake not done within
    `handshake_timeout` (--header-timeout) drops the connection."""
    if not enabled(certfile, keyfile):
        return
    hypercorn_config.certfile = certfile
    hypercorn_config.keyfile = keyfile
    hypercorn_config.alpn_protocols = [p for p in ALPN_PROTOCOLS if h2 or p != "h2"]
    hypercorn_config.ssl_handshake_timeout = handshake_timeout
    make = hypercorn_config.create_ssl_context

    def kept_context() -> ssl.SSLContext | None:
        """hypercorn's own context, remembered so that a reload can load the pair into it."""
        context = make()
        if context is not None:
            _serving.append(context)
        return context

    hypercorn_config.create_ssl_context = kept_context


def reload_pair(certfile: str, keyfile: str) -> str | None:
    """Load the pair again into this worker's serving contexts: new handshakes get it, open
    connections keep theirs. Why it did not load (one line, nothing changed), or None."""
    problem = certificate_problem(certfile, keyfile)
    if problem is not None:
        return problem
    try:
        for context in _serving:
            context.load_cert_chain(certfile, keyfile)
    except (OSError, ValueError, ssl.SSLError) as exc:  # rewritten again since the check above
        return f"--certfile {certfile} / --keyfile {keyfile}: {exc}"
    return None


def not_after(certfile: str) -> int | None:
    """When the first certificate of `certfile` expires, in Unix seconds (None if unreadable).
    The standard library decodes a PEM file's certificate only through `_test_decode_cert`;
    a missing one leaves the gauge out rather than the gateway down."""
    try:
        decoded = ssl._ssl._test_decode_cert(certfile)  # type: ignore[attr-defined]
        return int(ssl.cert_time_to_seconds(decoded["notAfter"]))
    except (AttributeError, KeyError, OSError, ValueError, ssl.SSLError):
        return None


def expiry_words(certfile: str, now: float) -> str:
    """When the certificate expires and the days left, in words (--check, --print-config)."""
    expires = not_after(certfile)
    if expires is None:
        return "its expiry cannot be read"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
    left = (expires - now) / 86400
    return f"expires {when} ({left:.0f} days left)" if left > 0 else f"expired {when}"
