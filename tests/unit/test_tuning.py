"""gateway/tuning.py: every measured number defined there once, and its relations checked.

A number defined again elsewhere would drift from the one beside its measurement; a change
that breaks a relation (a piece the turn budget cannot hold, a coalescing cap the slow poll
cuts short) stops the import, as gateway/common/board.py does for the ring's.
"""

from __future__ import annotations

import glob
import os
import re

import pytest

from gateway import tuning
from helpers.gateway_harness import ROOT

pytestmark = pytest.mark.unit

NAMES = [name for name in vars(tuning) if name.isupper()]


def test_each_number_is_defined_only_in_tuning():
    defined_elsewhere = []
    for path in glob.glob(os.path.join(ROOT, "gateway", "**", "*.py"), recursive=True):
        if path.endswith(os.path.join("gateway", "tuning.py")):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        defined_elsewhere += [f"{os.path.relpath(path, ROOT)}: {name}" for name in NAMES
                              if re.search(rf"^{name}\s*=|import {name} as ", text, re.MULTILINE)]
    assert defined_elsewhere == []


def test_the_moved_numbers_are_the_ones_their_users_read():
    from gateway.common import stall
    from gateway.supervisor import process as supervisor
    from gateway.worker import collector, door, reload
    from gateway.worker.delivery import window

    assert (window.PIECE_BYTES, window.MAX_BATCHES, window.MAX_CACHED_JOINS) == (
        tuning.PIECE_BYTES, tuning.MAX_BATCHES, tuning.MAX_CACHED_JOINS)
    assert (collector.YOUNG_ALLOCATIONS, collector.MIDDLE_AFTER, collector.FULL_AFTER) == (
        tuning.YOUNG_ALLOCATIONS, tuning.MIDDLE_AFTER, tuning.FULL_AFTER)
    assert supervisor.NOTSENT_LOWAT_BYTES == tuning.NOTSENT_LOWAT_BYTES
    assert stall.PULSE_SECONDS == tuning.PULSE_SECONDS
    assert door.PROBES_IN_FLIGHT == tuning.PROBES_IN_FLIGHT
    assert reload.CHECKS_PER_HEARTBEAT == tuning.CHECKS_PER_HEARTBEAT
    from gateway.worker.http import accept, framing, front
    from gateway.worker.hypercorn import serving
    assert (supervisor.DRAIN_SECONDS, serving.GRACE_SECONDS, accept.RETRY_SECONDS, front.BODY_BUFFERED,
            framing.MAX_CACHED_HEADS) == (tuning.DRAIN_SECONDS, tuning.GRACE_SECONDS, tuning.RETRY_SECONDS,
                                          tuning.BODY_BUFFERED, tuning.MAX_CACHED_HEADS)


def test_the_relations_hold():
    assert tuning._broken() == []


@pytest.mark.parametrize("name, value, words", [
    ("PIECE_BYTES", 4 << 20, "a turn's budget"),
    ("COALESCE_MAX_SECONDS", 0.06, "the coalescing cap must be below the slow poll"),
    ("OPENINGS_PER_TURN", 1000, "ACCEPT_BURST"),
    ("FULL_AFTER", 10, "a measured storm's allocations"),
    ("MIDDLE_AFTER", 20, "middle collections must stay as short"),
    ("POLL_SECONDS", 0.5, "fit in a stall pulse"),
    ("GRACE_SECONDS", 5.0, "within the supervisor's drain"),
])
def test_a_number_that_breaks_a_relation_is_named(monkeypatch, name, value, words):
    monkeypatch.setattr(tuning, name, value)
    assert any(words in why for why in tuning._broken())
