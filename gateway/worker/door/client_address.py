"""Who the client is: the peer address, or, behind a trusted proxy, the address it forwarded.

The per-client limits (limits.py) and the access log count by client address. Behind an
ingress or a load balancer every peer is the proxy, so with --trusted-proxies a peer inside
a listed range is asked: the client is the rightmost address of RFC 7239 `Forwarded: for=`
or of `X-Forwarded-For` that is not itself in a trusted range (when both headers come and
name different clients, the peer: a proxy writes one and passes the other on as the client
sent it). Walking from the right matters: a client may put anything it likes on the
left of the header, and only what the trusted hops appended is true.

Rules, each a guard against a header the client wrote:
- a peer outside the trusted ranges: its headers are ignored;
- a header that does not parse (a stray quote, a bracket outside quotes, an address that is
  no address): the peer, never a refusal;
- an `unknown` or obfuscated (`_hidden`) node, or an element without `for=`, met while
  walking: the client stands behind the hop to its right, so that hop's address is the one
  counted (the nearest place the chain still names);
- every address trusted: the leftmost one.

`client_key` is what a limit counts by: an IPv4 address (/32) or an IPv6 /64, since one host
on IPv6 commonly holds a whole /64. Pure functions: no I/O, no state but a parse cache.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache

from gateway.tuning import IPV6_KEY_PREFIX

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
# One forwarded-pair (RFC 7239 section 4): token "=" ( token / quoted-string ), then its separator.
_PAIR = re.compile(rf'\s*({_TOKEN})=({_TOKEN}|"(?:[^"\\]|\\.)*")\s*([;,]|$)')
_OBFUSCATED = re.compile(r"_[0-9A-Za-z._-]+")
_PORT = re.compile(r"[0-9]{1,5}|_[0-9A-Za-z._-]+")


class Malformed(ValueError):
    """A forwarding header that does not parse: the peer is the client."""


UNNAMED = None  # a hop the chain does not name (unknown, obfuscated, no for=)


@lru_cache(maxsize=16)
def networks(trusted: tuple[str, ...]) -> tuple[Network, ...]:
    """--trusted-proxies' ranges, parsed once per distinct setting (a reload may change it)."""
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in trusted)


def parse_address(text: str) -> Address | None:
    """An address, IPv4-mapped IPv6 read as the IPv4 it maps; None when `text` is none."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, ranges: tuple[Network, ...]) -> bool:
    return any(address.version == net.version and address in net for net in ranges)


def forwarded_nodes(value: str) -> list[Address | None]:
    """The `for=` node of each element of a `Forwarded` value, left to right (`UNNAMED` for
    an element that names none); raises Malformed."""
    nodes: list[Address | None] = []
    position, node, seen, in_element = 0, UNNAMED, set(), False
    while True:
        if not in_element:  # empty list elements (", ,") are allowed, RFC 9110 section 5.6.1
            while position < len(value) and value[position] in " \t,":
                position += 1
            if position >= len(value):
                return nodes
        match = _PAIR.match(value, position)
        if match is None:
            raise Malformed("not a forwarded-pair")
        key, raw, separator = match.groups()
        key = key.lower()
        if key in seen:
            raise Malformed("a parameter twice in one element")
        seen.add(key)
        in_element = True
        if key == "for":
            node = _node(raw[1:-1].replace("\\", "") if raw.startswith('"') else raw)
        position = match.end()
        if separator != ";":
            nodes.append(node)
            node, seen, in_element = UNNAMED, set(), False
            if not separator:
                return nodes


def _node(text: str) -> Address | None:
    """A `for=` node: IPv4[:port], "[IPv6]"[:port], unknown, or _obfuscated[:port]."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and _PORT.fullmatch(rest[1:]))):
            raise Malformed("bad bracketed node")
        address = parse_address(host)
        if address is None or ":" not in host:
            raise Malformed("bad IPv6 node")
        return address
    host, colon, port = text.partition(":")
    if colon and not _PORT.fullmatch(port):
        raise Malformed("bad port")
    if host.lower() == "unknown" or _OBFUSCATED.fullmatch(host):
        return UNNAMED
    address = parse_address(host)
    if address is None or address.version != 4:
        raise Malformed("bad node")
    return address


def x_forwarded_for_nodes(value: str) -> list[Address | None]:
    """Each comma-separated entry of `X-Forwarded-For`: an address, or one with a port
    (`1.2.3.4:80`, `[::1]:80`) as some proxies write it, or `unknown` (`UNNAMED`); raises
    Malformed."""
    nodes: list[Address | None] = []
    for entry in value.split(","):
        entry = entry.strip()
        address = parse_address(entry)
        nodes.append(address if address is not None else _node(entry))
    return nodes


def forwarded_client(peer: str, headers: list[tuple[bytes, bytes]], ranges: tuple[Network, ...]) -> str:
    """The client's address as a string: `peer`, or the rightmost untrusted forwarded node.

    A proxy that writes one of the two headers passes the other through as the client sent it,
    so when both are present and name different clients, neither is believed: the client is
    the peer (a forged header then only lumps its sender with the proxy's own address, never
    gives it a key of its choosing). Both naming the same client is a proxy writing both."""
    peer_address = parse_address(peer)
    if peer_address is None or not _trusted(peer_address, ranges):
        return peer
    named = set()
    for name, parse in ((b"forwarded", forwarded_nodes), (b"x-forwarded-for", x_forwarded_for_nodes)):
        values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
        if not values:
            continue
        try:
            named.add(_rightmost_untrusted(peer_address, parse(",".join(values)), ranges))
        except Malformed:
            return peer
    return str(named.pop()) if len(named) == 1 else peer


def _rightmost_untrusted(peer: Address, nodes: list, ranges: tuple[Network, ...]) -> Address:
    client = peer
    for node in reversed(nodes):
        if node is UNNAMED:
            break
        client = node
        if not _trusted(node, ranges):
            break
    return client


def client_of(scope: dict, trusted: tuple[str, ...]) -> str:
    """The client address of one ASGI request (the access log prints it, the limits key on
    it); "" when the server knows no peer."""
    peer = scope.get("client")
    host = str(peer[0]) if peer else ""
    if not trusted or not host:
        return host
    return forwarded_client(host, scope.get("headers") or [], networks(trusted))


def client_key(address: str) -> str:
    """What the per-client limits count by: IPv4 /32, IPv6 /64 (as `2001:db8::/64`)."""
    parsed = parse_address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((parsed, IPV6_KEY_PREFIX), strict=False))
    return address if parsed is None else str(parsed)
