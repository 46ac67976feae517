"""The board (gateway/common/board.py): every process finds its counter block by role, and nothing
else finds one; the control words the gateway's ring reserves are the ones the board names."""

import pytest

from gateway.common import board
from gateway.common import metrics
from gateway.common import stall
from gateway.common.board import Board, Role

pytestmark = pytest.mark.unit


def test_each_role_has_its_block_and_an_unknown_one_has_none():
    assert board.block_index(Role.SEQUENCER) == board.SEQUENCER_BLOCK
    assert board.block_index(Role.SUPERVISOR) == board.SUPERVISOR_BLOCK
    assert [board.block_index(Role.WORKER, i) for i in (0, 1)] == [board.FIRST_WORKER_BLOCK,
                                                                    board.FIRST_WORKER_BLOCK + 1]
    assert [board.block_name(b) for b in range(board.block_count(2))] == [
        "sequencer", "supervisor", "worker-0", "worker-1"]
    for unknown in ("exporter", "workers", ""):
        with pytest.raises(ValueError):
            board.block_index(unknown)
    for outside in (-1, board.MAX_WORKERS):
        with pytest.raises(ValueError, match="no counter block for worker"):
            board.block_index(Role.WORKER, outside)


def test_the_board_reads_and_writes_the_words_it_names():
    words = memoryview(bytearray(8 * board.CONTROL_WORDS)).cast("Q")
    shared = Board(words)
    shared.closing, shared.session_closed, shared.tls_expiry = True, 42, 1_900_000_000
    shared.arm(3)
    shared.beat(3)
    shared.beat(3)
    assert (words[board.CLOSING], words[board.SESSION_CLOSED], words[board.TLS_EXPIRY]) == (1, 42, 1_900_000_000)
    assert (words[board.ARMED + 3], shared.beats(3), shared.beats(2)) == (1, 2, 0)
    assert shared.take_armed(3) and not shared.take_armed(3) and words[board.ARMED + 3] == 0
    shared.config_generation += 1
    assert words[board.CONFIG_GENERATION] == 1 == shared.config_generation
    assert shared.closing is True and shared.upstream_connected is False
    with pytest.raises(ValueError, match="control words"):
        Board(words[:board.CONTROL_WORDS - 1])


def test_the_metrics_help_speaks_of_the_numbers_the_gateway_uses():
    from gateway.protocol.lag import LAG_LIMIT

    assert metrics.LAG_BUCKETS[-1] == board.RING_SLOTS and LAG_LIMIT in metrics.LAG_BUCKETS
    assert f"{LAG_LIMIT}-event lag limit" in metrics.COUNTERS["events_lost_to_lag"][1]
    assert f"{stall.PULSE_SECONDS:g} s stall pulse" in metrics.HISTOGRAMS["loop_stall_seconds"][0]
