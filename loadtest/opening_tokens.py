"""What a bearer token adds to an opening: the doors `loadtest.openings --token-modes` measures.

Each mode is a door and the tokens its openings present:

- `static`: one `[[network.authentication.tokens]]` token, the same on every opening;
- `cached-es256`: one ES256 JWT on every opening (the first verifies it; every other opening
  finds it in the worker's verified tokens, as a browser's reconnect does);
- `fresh-es256`, `fresh-rs256`, `fresh-hs256`: a JWT of its own for every opening (each
  verified: a signature per opening). `fresh-es256` with `--connect-concurrency` equal to
  `--watchers` is the storm of openings each with its own token.

The tokens are minted before the run (RS256 signs slowly: 10,000 take seconds), written one a
line to a file, and presented by this module's opener, which stands in for csse (whose
`--header` is one for every connection): `python -m loadtest.opening_tokens --tokens-file F
-n N --connect-concurrency C --connect-timeout T --ready-file R --duration D URL` opens N
`murmur.WatchSession` streams, the i-th with the file's i-th line as its bearer token (the
last line again past the file's end), at most C connecting at once, each waiting at most T for
its response head; it makes the ready file once every opening is answered, holds the streams
D seconds, and prints one JSON line as csse does (`conns_opened`, `connect_wall_s`,
`fail_reasons`). Every mode is run by this opener, so the modes compare on one client.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import os
import secrets
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtest.driver import raise_nofile  # noqa: E402

MODES = ("static", "cached-es256", "fresh-es256", "fresh-rs256", "fresh-hs256")
SCOPE = "murmur.WatchSession"
LIFETIME_S = 3600  # outlives any run: no opening is refused for its `exp`
HEAD_END = b"\r\n\r\n"


def door(mode: str, folder: Path, openings: int) -> tuple[Path, Path]:
    """(the gateway's --config for `mode`, the tokens file its openings read), written in `folder`."""
    config, tokens = folder / "door.toml", folder / "tokens"
    if mode == "static":
        token = secrets.token_urlsafe(32)
        config.write_text(f'[[network.authentication.tokens]]\nname = "load"\n'
                          f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\nscopes = ["{SCOPE}"]\n')
        tokens.write_text(token + "\n")
        return config, tokens
    algorithm = mode.rpartition("-")[2].upper()
    signing, verifying = _keys(algorithm)
    (folder / "jwt.key").write_bytes(verifying)
    config.write_text(f'[network.authentication.jwt]\nkey_file = "{folder / "jwt.key"}"\n'
                      f'algorithms = ["{algorithm}"]\n')
    count = 1 if mode.startswith("cached") else openings
    expires = int(time.time()) + LIFETIME_S
    with open(tokens, "w") as fh:
        for n in range(count):
            fh.write(jwt.encode({"sub": f"user-{n}", "scope": SCOPE, "exp": expires}, signing, algorithm=algorithm)
                     + "\n")
    return config, tokens


def _keys(algorithm: str) -> tuple[bytes | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, bytes]:
    """(what signs, the key file's bytes that verify) for `algorithm`."""
    if algorithm == "HS256":
        secret = secrets.token_bytes(32).hex().encode()
        return secret, secret
    private: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        ec.generate_private_key(ec.SECP256R1()) if algorithm == "ES256"
        else rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return private, private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)


def request(host: str, port: int, token: str) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": SCOPE, "params": {}}).encode()
    return (f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
            f"Accept: text/event-stream\r\nAuthorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def open_all(url: str, tokens: list[str], n: int, concurrency: int, timeout: float, ready: str,
                   duration: float) -> dict:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    gate = asyncio.Semaphore(concurrency)
    opened: list[asyncio.StreamWriter] = []
    failed: collections.Counter = collections.Counter()

    async def one(i: int) -> None:
        async with gate:
            try:
                async with asyncio.timeout(timeout):
                    reader, writer = await asyncio.open_connection(host, port)
                    writer.write(request(host, port, tokens[min(i, len(tokens) - 1)]))
                    head = await reader.readuntil(HEAD_END)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                failed[type(exc).__name__] += 1
                return
            status = head.split(b" ", 2)[1].decode("latin-1")
            if status == "200":
                opened.append(writer)
            else:
                failed[f"http_{status}"] += 1
                writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.monotonic() - started
    Path(ready).touch()
    await asyncio.sleep(duration)
    for writer in opened:
        writer.close()
    return {"conns_opened": len(opened), "connect_wall_s": round(wall, 3), "fail_reasons": dict(failed)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="open streams, each with its own bearer token (csse's interface)")
    p.add_argument("url")
    p.add_argument("--tokens-file", required=True)
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--connect-concurrency", type=int, default=1000)
    p.add_argument("--connect-timeout", type=float, default=60.0)
    p.add_argument("--ready-file", required=True)
    p.add_argument("--duration", type=float, default=2.0)
    args = p.parse_args(argv)
    tokens = Path(args.tokens_file).read_text().split()
    raise_nofile(args.n + 256)  # openings past what the hard limit allows fail, and say so
    report = asyncio.run(open_all(args.url, tokens, args.n, args.connect_concurrency, args.connect_timeout,
                                  args.ready_file, args.duration))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
