"""Each option parser's answers: the value, or a refusal that says in words what is wrong and
what the setting accepts, never Python's own wording (`invalid literal for int()`)."""

from __future__ import annotations

import pytest

from gateway.config import values

pytestmark = pytest.mark.unit

ACCEPTED = [
    (values.whole_number(1, 64), "3", 3),
    (values.whole_number(1, 64), " 64 ", 64),
    (values.whole_number(1, 64), 1, 1),
    (values.parse_nonnegative_int, "0", 0),
    (values.parse_positive_seconds, "0.25", 0.25),
    (values.parse_positive_seconds, 2, 2.0),
    (values.parse_nonnegative_seconds, "0", 0.0),
    (values.parse_nonnegative_float, 1.5, 1.5),
    (values.number("seconds", high=10.0), "10", 10.0),
    (values.parse_hostport, "127.0.0.1:0", ("127.0.0.1", 0)),
    (values.parse_hostport, "[::1]:65535", ("::1", 65535)),
    (values.parse_metrics_bind, " OFF ", None),
    (values.parse_metrics_bind, "0.0.0.0:9464", ("0.0.0.0", 9464)),
    (values.parse_log_level, " Warning ", "warning"),
    (values.parse_on_off, "On", True),
    (values.parse_on_off, False, False),
    (values.parse_text, "token", "token"),
    (values.parse_url, "https://capsule.example:8443/", "https://capsule.example:8443"),
    (values.parse_networks, "10.0.0.1, 192.168.0.0/16", ("10.0.0.1/32", "192.168.0.0/16")),
    # as a browser serializes a page's origin: lower case, no default port, no trailing slash
    (values.parse_origins, "HTTPS://App.Example:443/, http://127.0.0.2:8000,https://app.example",
     ("https://app.example", "http://127.0.0.2:8000")),
    (values.parse_origins, ["http://[::1]:80", "http://localhost:3000"], ("http://[::1]", "http://localhost:3000")),
    (values.parse_origins, "", ()),
]


@pytest.mark.parametrize("parse, given, value", ACCEPTED)
def test_a_good_value_is_taken(parse, given, value):
    assert parse(given) == value


REFUSED = [
    (values.whole_number(1, 64), "two", "'two' is not a whole number; it accepts 1 to 64"),
    (values.whole_number(1, 64), "2.5", "'2.5' is not a whole number; it accepts 1 to 64"),
    (values.whole_number(1, 64), 2.5, "2.5 is not a whole number; it accepts 1 to 64"),
    (values.whole_number(1, 64), True, "true is not a whole number; it accepts 1 to 64"),
    (values.whole_number(1, 64), "", "'' is not a whole number; it accepts 1 to 64"),
    (values.whole_number(1, 64), "0", "'0' is out of range; it accepts 1 to 64"),
    (values.whole_number(1, 64, " (why)"), "65", "'65' is out of range; it accepts 1 to 64 (why)"),
    (values.parse_positive_int, "-3", "'-3' is out of range; it accepts 1 or more"),
    (values.parse_nonnegative_int, "-1", "'-1' is out of range; it accepts 0 or more"),
    (values.whole_number(0, 1_000_000), "1000001", "'1000001' is out of range; it accepts 0 to 1000000"),
    (values.parse_positive_seconds, "abc", "'abc' is not a number of seconds; it accepts more than 0"),
    (values.parse_positive_seconds, "0", "'0' is out of range; it accepts more than 0"),
    (values.parse_positive_seconds, "nan", "'nan' is not a number of seconds; it accepts more than 0"),
    (values.parse_positive_seconds, "inf", "'inf' is not a number of seconds; it accepts more than 0"),
    (values.parse_positive_seconds, [1], "[1] is not a number of seconds; it accepts more than 0"),
    (values.parse_nonnegative_seconds, "-0.5", "'-0.5' is out of range; it accepts 0 or more"),
    (values.parse_nonnegative_float, "fast", "'fast' is not a number; it accepts 0 or more"),
    (values.number("seconds", high=3600.0), "4000", "'4000' is out of range; it accepts 0 to 3600"),
    (values.parse_hostport, "127.0.0.1:99999",
     "port 99999 is out of range; it accepts 1-65535, or 0 to pick one"),
    (values.parse_hostport, "127.0.0.1:http", "port 'http' is not a number; it accepts 1-65535, or 0 to pick one"),
    (values.parse_hostport, "127.0.0.1:", "port '' is not a number; it accepts 1-65535, or 0 to pick one"),
    (values.parse_hostport, "nowhere", "'nowhere' is not HOST:PORT; it accepts an address such as 127.0.0.1:52222"),
    (values.parse_hostport, ":8080", "':8080' is not HOST:PORT; it accepts an address such as 127.0.0.1:52222"),
    (values.parse_hostport, 8080, "8080 is not HOST:PORT; it accepts an address such as 127.0.0.1:52222"),
    (values.parse_metrics_bind, "on",
     "'on' is not HOST:PORT; it accepts an address such as 127.0.0.1:52222, or off"),
    (values.parse_metrics_bind, "127.0.0.1:70000",
     "port 70000 is out of range; it accepts 1-65535, or 0 to pick one"),
    (values.parse_log_level, "loud", "'loud' is not a log level; it accepts debug, info, warning or error"),
    (values.parse_on_off, "yes", "'yes' is not on or off"),
    (values.parse_on_off, 1, "1 is not on or off"),
    (values.one_of(("queue", "none")), "maybe", "'maybe' is not queue or none"),
    (values.parse_text, 5, "5 is not text; write it in quotes"),
    (values.parse_url, "ftp://capsule", "'ftp://capsule' is not an http:// or https:// URL; it accepts http(s)://HOST[:PORT]"),
    (values.parse_networks, "10.0.0.0/8,nowhere", "'nowhere' is not an address range (CIDR such as 10.0.0.0/8)"),
    (values.parse_origins, "*", "'*' is not an http:// or https:// origin; an origin is scheme://host[:port], "
                                "such as https://app.example"),
    (values.parse_origins, "null", "'null' is not an http:// or https:// origin; an origin is scheme://host[:port], "
                                   "such as https://app.example"),
    (values.parse_origins, "https://app.example/app", "'https://app.example/app' has a path, query or fragment; "
                                                      "an origin is scheme://host[:port], such as https://app.example"),
    (values.parse_origins, [3], "3 is not text; it accepts origins in quotes (such as \"https://app.example\")"),
]


@pytest.mark.parametrize("parse, given, message", REFUSED)
def test_a_bad_value_is_refused_in_words(parse, given, message):
    with pytest.raises(ValueError) as refused:
        parse(given)
    assert str(refused.value) == message
