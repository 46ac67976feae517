"""The client address behind trusted proxies (gateway/worker/door/client_address.py): every rule of
its docstring, and, for any header a client can write, an answer that is the peer or an
address the header named, never an error."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.worker.door.client_address import (client_key, client_of, forwarded_nodes,
                                                x_forwarded_for_nodes, Malformed)

pytestmark = pytest.mark.unit

PROXY = "10.0.0.0/8"
TRUSTED = (PROXY, "fd00::/8")


def scope(peer: str | None, *headers: tuple[str, str]) -> dict:
    return {"client": None if peer is None else (peer, 4711),
            "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in headers]}


def test_untrusted_peer_ignores_headers():
    assert client_of(scope("203.0.113.9", ("X-Forwarded-For", "1.2.3.4")), TRUSTED) == "203.0.113.9"
    assert client_of(scope("203.0.113.9", ("Forwarded", "for=1.2.3.4")), TRUSTED) == "203.0.113.9"


def test_no_trusted_proxies_is_the_peer():
    assert client_of(scope("10.1.1.1", ("X-Forwarded-For", "1.2.3.4")), ()) == "10.1.1.1"


def test_no_peer():
    assert client_of(scope(None, ("X-Forwarded-For", "1.2.3.4")), TRUSTED) == ""


@pytest.mark.parametrize("value, client", [
    ("1.2.3.4", "1.2.3.4"),
    ("1.2.3.4, 10.0.0.2", "1.2.3.4"),                 # the trusted hop is skipped
    ("6.6.6.6, 1.2.3.4, 10.0.0.2", "1.2.3.4"),        # what the client wrote on the left is not believed
    ("10.0.0.3, 10.0.0.2", "10.0.0.3"),               # all trusted: the leftmost
    ("1.2.3.4:5678", "1.2.3.4"),
    ("[2001:db8::1]:80", "2001:db8::1"),
    ("2001:db8::1", "2001:db8::1"),
    ("::ffff:1.2.3.4", "1.2.3.4"),
    ("unknown, 10.0.0.2", "10.0.0.2"),                # unnamed: the hop to its right
    ("1.2.3.4, unknown", "10.9.9.9"),
    (" 1.2.3.4 ,10.0.0.2 ", "1.2.3.4"),
])
def test_x_forwarded_for(value, client):
    assert client_of(scope("10.9.9.9", ("X-Forwarded-For", value)), TRUSTED) == client


def test_x_forwarded_for_over_several_lines():
    s = scope("10.9.9.9", ("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "1.2.3.4, 10.0.0.1"))
    assert client_of(s, TRUSTED) == "1.2.3.4"


@pytest.mark.parametrize("value, client", [
    ("for=1.2.3.4", "1.2.3.4"),
    ('for="1.2.3.4:80"', "1.2.3.4"),
    ('for="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
    ('for="[2001:db8:cafe::17]"', "2001:db8:cafe::17"),
    ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
    ("For=6.6.6.6, for=1.2.3.4;proto=https, for=10.0.0.1", "1.2.3.4"),
    ("for=unknown, for=10.0.0.2", "10.0.0.2"),
    ("for=_hidden, for=10.0.0.2", "10.0.0.2"),
    ('for="_hidden:_port", for=10.0.0.2', "10.0.0.2"),
    ("proto=https, for=10.0.0.2", "10.0.0.2"),        # an element without for=: unnamed
    ("for=1.2.3.4,, for=10.0.0.2", "1.2.3.4"),         # empty list elements
    ('for="1.2.3.4"', "1.2.3.4"),
    ("for=10.0.0.5, for=10.0.0.2", "10.0.0.5"),
])
def test_forwarded(value, client):
    assert client_of(scope("10.9.9.9", ("Forwarded", value)), TRUSTED) == client


def test_both_headers_naming_different_clients_count_the_peer():
    """[claim: forwarded-client] A proxy that appends only X-Forwarded-For passes on a client's own `Forwarded`: the
    client must not pick its key by writing one."""
    s = scope("10.9.9.9", ("X-Forwarded-For", "6.6.6.6"), ("Forwarded", "for=1.2.3.4"))
    assert client_of(s, TRUSTED) == "10.9.9.9"


def test_both_headers_naming_the_same_client_name_it():
    s = scope("10.9.9.9", ("X-Forwarded-For", "7.7.7.7, 1.2.3.4"), ("Forwarded", "for=1.2.3.4"))
    assert client_of(s, TRUSTED) == "1.2.3.4"


@pytest.mark.parametrize("name, value", [
    ("Forwarded", "for=[2001:db8::1]"),               # IPv6 must be quoted
    ("Forwarded", 'for="2001:db8::1"'),               # and bracketed
    ("Forwarded", 'for="1.2.3.4'),                    # unterminated quote
    ("Forwarded", "for=1.2.3.4;for=5.6.7.8"),        # a parameter twice in one element
    ("Forwarded", "for=1.2.3.4;"),
    ("Forwarded", "for=999.2.3.4"),
    ("Forwarded", "for=1.2.3.4:99999999"),
    ("Forwarded", "garbage"),
    ("Forwarded", 'for="[::1]x"'),
    ("X-Forwarded-For", "1.2.3.4, not-an-address"),
    ("X-Forwarded-For", "1.2.3.4,,10.0.0.1"),
    ("X-Forwarded-For", "[::1"),
    ("X-Forwarded-For", "1.2.3.4:http"),
])
def test_malformed_falls_back_to_the_peer(name, value):
    """[claim: forwarded-client]"""
    assert client_of(scope("10.9.9.9", (name, value)), TRUSTED) == "10.9.9.9"


def test_trusted_ipv6_proxy():
    s = scope("fd00::5", ("X-Forwarded-For", "2001:db8::7, fd00::1"))
    assert client_of(s, TRUSTED) == "2001:db8::7"


def test_node_lists():
    assert forwarded_nodes("for=1.2.3.4, by=x") == [ipaddress.ip_address("1.2.3.4"), None]
    assert x_forwarded_for_nodes("unknown") == [None]
    with pytest.raises(Malformed):
        x_forwarded_for_nodes("")


@pytest.mark.parametrize("address, key", [
    ("1.2.3.4", "1.2.3.4"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2::9", "2001:db8:1:2::/64"),
    ("::ffff:1.2.3.4", "1.2.3.4"),
    ("", ""),
    ("not-ip", "not-ip"),
])
def test_client_key(address, key):
    assert client_key(address) == key


# --- any header: the answer is the peer or an address the header holds; no exception ---

header_text = st.text(alphabet=st.sampled_from(list('0123456789abcdef.:[]",; =_-forFORbyunknown\t')),
                      max_size=60)
addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["X-Forwarded-For", "Forwarded"]), header_text), max_size=3))
def test_any_header_answers_an_address(headers):
    answer = client_of(scope("10.9.9.9", *headers), TRUSTED)
    assert answer == "10.9.9.9" or ipaddress.ip_address(answer)


def _untrusted(text: str) -> bool:
    address = ipaddress.ip_address(text)
    return not any(address.version == net.version and address in net
                   for net in map(ipaddress.ip_network, TRUSTED)) and getattr(address, "ipv4_mapped", None) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(addresses.filter(_untrusted), min_size=1, max_size=6), st.integers(0, 3))
def test_rightmost_untrusted_of_any_chain(chain, trusted_hops):
    """[claim: forwarded-client]"""
    value = ", ".join(chain + [f"10.0.0.{i + 1}" for i in range(trusted_hops)])
    assert client_of(scope("10.9.9.9", ("X-Forwarded-For", value)), TRUSTED) == chain[-1]
    value = ", ".join(f'for="[{a}]"' if ":" in a else f"for={a}" for a in chain)
    assert client_of(scope("10.9.9.9", ("Forwarded", value)), TRUSTED) == chain[-1]
