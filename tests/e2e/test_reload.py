"""Reload by SIGHUP (gateway/config/reload.py, gateway/worker/reload.py), end to end: a removed
token's open stream and one whose token lost the method's scope end after a whole event,
another token's stream keeps reading with nothing missed, the new token works, new limits
apply, restart-only settings are named and left, and a broken file leaves everything as it
was; each outcome counted."""

from __future__ import annotations

import os
import signal

from helpers.gateway_harness import judged, running_gateway, scrape, token_table, wait_for
from helpers.http_client import rpc
from helpers.sse_reading import SSEStream

WATCH = "murmur.WatchSession"
LIVE = str(2**40)
ALICE, BOB, CAROL, DAVE = "alice-tok-1", "bob-tok-2", "carol-tok-3", "dave-tok-4"
BEFORE = [("alice", ALICE, ["*"]), ("bob", BOB, ["*"]), ("dave", DAVE, [WATCH, "ListTasks"])]
AFTER = [("bob", BOB, ["*"]), ("carol", CAROL, ["*"]), ("dave", DAVE, ["ListTasks"])]


def reloads(gw) -> tuple[float, float]:
    samples = scrape(gw.metrics_port)
    return (samples['murgw_config_reloads_total{outcome="applied"}'],
            samples['murgw_config_reloads_total{outcome="rejected"}'])


def read_to_end(stream: SSEStream) -> None:
    while stream.next() is not None:
        pass


def test_sighup_applies_tokens_and_limits_without_dropping_streams(tmp_path):
    """[claim: token-rotation]"""
    door = tmp_path / "door.toml"
    door.write_text(token_table(BEFORE))
    with running_gateway("--config", str(door), "--sim-load", "50", workers=2, metrics=True,
                         tmp_path=tmp_path) as gw:
        assert reloads(gw) == (0, 0)
        alice = SSEStream(gw.port, WATCH, {}, token=ALICE)
        dave = SSEStream(gw.port, WATCH, {}, token=DAVE)
        bob = SSEStream(gw.port, WATCH, {}, token=BOB)
        try:
            assert (alice.status, dave.status, bob.status) == (200, 200, 200)
            ids = [e.id for e in bob.read_until(lambda e: e.id is not None and e.id > 5) if e.id is not None]
            door.write_text("max-streams-per-client = 1\nmax-body-bytes = 2048\n" + token_table(AFTER))
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads(gw) == (1, 0), what="the reload applied")
            read_to_end(alice)  # removed: ended, within one heartbeat (0.3 s) of the reload
            read_to_end(dave)  # lost murmur.WatchSession
            for ended in (alice, dave):
                assert ended.raw.endswith(b"\n\n")  # whole events only
            # bob's stream goes on, every id after the last, none missed
            last = ids[-1]
            more = bob.read_until(lambda e: e.id is not None and e.id > last + 30)
            ids += [e.id for e in more if e.id is not None]
            assert ids == list(range(ids[0], ids[-1] + 1)), "bob's stream missed events"
            # every worker has it within a quarter heartbeat of the sequencer
            wait_for(lambda: len([r for r in gw.logs() if r.get("event") == "reloaded settings applied"]) == 2,
                     what="both workers applying the reload")
            assert rpc(gw.port, "ListTasks", {}, token=CAROL)[0] == 200  # the new token works
            assert rpc(gw.port, "ListTasks", {}, token=ALICE)[0] == 401
            carol = SSEStream(gw.port, WATCH, {}, token=CAROL, last_event_id=LIVE)
            over = SSEStream(gw.port, WATCH, {}, token=CAROL, last_event_id=LIVE)
            assert (carol.status, over.status) == (200, 429)  # the reloaded limit (bob's predates it)
            carol.close()
            over.close()
            line = next(r for r in gw.logs() if r.get("event") == "config reloaded" and "restart_needed" in r)
            assert line["restart_needed"] == ["--max-body-bytes"]

            door.write_text("[[network.authentication.tokens]\nbroken")
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads(gw) == (1, 1), what="the broken file rejected")
            problem = next(r for r in gw.logs() if r.get("event") == "config reload rejected; nothing changed")
            assert "not valid TOML" in problem["problem"]
            assert rpc(gw.port, "ListTasks", {}, token=CAROL)[0] == 200
            assert rpc(gw.port, "ListTasks", {}, token=ALICE)[0] == 401
            more = bob.read_until(lambda e: e.id is not None and e.id > ids[-1] + 10)
            ids += [e.id for e in more if e.id is not None]
            assert ids == list(range(ids[0], ids[-1] + 1)) and not bob.ended
        finally:
            for stream in (alice, dave, bob):
                stream.close()


def test_a_revoked_stream_whose_reader_stopped_reading_is_cut_off(tmp_path):
    """Alice reads past her replay (a replay the ring laps may be ended as "lapped" under the
    worker's budget: SECURITY.md), then stops reading while events keep coming (her
    socket and the worker's buffer fill), then a reload removes her token: her stream cannot
    end after its next write, so a heartbeat interval later its connection is cut and its
    place freed."""
    door = tmp_path / "door.toml"
    door.write_text(token_table(BEFORE))
    with running_gateway("--config", str(door), "--sim-load", "400", "--sim-load-size", "2000",
                         workers=1, metrics=True, tmp_path=tmp_path) as gw:
        alice = SSEStream(gw.port, WATCH, {}, token=ALICE, last_event_id=LIVE, rcvbuf=4096)
        try:
            assert alice.status == 200
            start = scrape(gw.metrics_port)["murgw_ring_head_id"]  # her replay's end at least
            alice.read_until(lambda e: e.id is not None and e.id >= start, within=60)
            # 200 events of 2 KB written since, none read: more than her socket, the kernel's
            # unsent allowance and the worker's high-water mark together hold
            wait_for(lambda: scrape(gw.metrics_port)["murgw_ring_head_id"] > start + 200,
                     what="alice's stream blocked")
            door.write_text(token_table(AFTER))
            os.kill(gw.pid, signal.SIGHUP)
            ended = wait_for(lambda: next((r for r in gw.logs() if r.get("event") == "stream end"), None),
                             what="alice's stream ended")
            assert (ended["caller"], ended["reason"]) == ("alice", "revoked")
            wait_for(lambda: scrape(gw.metrics_port)['murgw_connections_open{endpoint="murmur.WatchSession"}'] == 0,
                     what="her place freed")
        finally:
            alice.close()


def test_a_replacement_worker_starts_with_the_reloaded_tokens(tmp_path):
    door = tmp_path / "door.toml"
    door.write_text(token_table(BEFORE))
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        door.write_text(token_table(AFTER))
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(lambda: reloads(gw) == (1, 0), what="the reload applied")
        (old,) = gw.worker_pids().values()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: gw.worker_pids()[0] != old and rpc(gw.port, "ListTasks", {}, token=CAROL)[0] == 200,
                 timeout=30, what="the replacement serving carol")
        assert rpc(gw.port, "ListTasks", {}, token=ALICE)[0] == 401


def test_a_worker_booting_while_a_reload_lands_applies_it(tmp_path):
    """A replacement spawned with the settings of before the reload, held stopped while the
    reload lands, must still apply it when it runs (it must not take the new generation word
    for its own)."""
    door = tmp_path / "door.toml"
    door.write_text(token_table(BEFORE))
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        (old,) = gw.worker_pids().values()
        before = set(gw.children())
        os.kill(old, signal.SIGKILL)
        booting = wait_for(lambda: set(gw.children()) - before - {old}, what="the replacement spawned")
        (new,) = booting
        os.kill(new, signal.SIGSTOP)  # spawned with the old settings; it has not read the word yet
        try:
            door.write_text(token_table(AFTER))
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads(gw) == (1, 0), what="the reload applied")
        finally:
            os.kill(new, signal.SIGCONT)
        wait_for(lambda: gw.worker_pids()[0] == new, timeout=30, what="the replacement serving")
        wait_for(lambda: rpc(gw.port, "ListTasks", {}, token=ALICE)[0] == 401, what="alice's token revoked there")
        assert rpc(gw.port, "ListTasks", {}, token=CAROL)[0] == 200


def test_reread_names_restart_only_settings(tmp_path):
    from gateway.config.resolve import load
    from gateway.config.reload import reread

    door = tmp_path / "door.toml"
    door.write_text(token_table(BEFORE))
    argv = ["--config", str(door), "--bind", "127.0.0.1:0"]
    running = load(argv, {})
    door.write_text(f"trusted-proxies = '10.0.0.0/8'\nworkers = {running.workers + 1}\n"
                    "[lifecycle]\nmax_queued_tasks = 5\n" + token_table(AFTER))
    applied, settings, restart_only = reread(running, argv)
    assert restart_only == ["--workers", "[lifecycle]"]
    assert applied.lifecycle == running.lifecycle and applied.workers == running.workers  # left as they run
    assert [t.name for t in applied.tokens] == ["bob", "carol", "dave"]
    assert applied.trusted_proxies == settings["trusted_proxies"] == ("10.0.0.0/8",)


def test_reread_keeps_the_doors_kind_as_it_started(tmp_path):
    """Public to tokens, or back, needs a restart (the card, the watch page and the open
    streams were made for the door it started with): the tokens stay as they run, the other
    reloadable settings apply, and the door is named among the restart-only settings."""
    from gateway.config.resolve import load
    from gateway.config.reload import reread

    door = tmp_path / "door.toml"
    door.write_text("")
    argv = ["--config", str(door)]
    public = load(argv, {})
    door.write_text("max-streams-per-client = 3\n" + token_table(AFTER))
    applied, settings, restart_only = reread(public, argv)
    assert applied.tokens == () and settings["tokens"] == ()
    assert applied.max_streams_per_client == settings["max_streams_per_client"] == 3
    assert restart_only == ["[network.authentication] (public or with tokens)"]

    door.write_text(token_table(BEFORE))
    guarded = load(argv, {})
    door.write_text("")
    applied, settings, restart_only = reread(guarded, argv)
    assert [t.name for t in applied.tokens] == ["alice", "bob", "dave"]
    assert restart_only == ["[network.authentication] (public or with tokens)"]


def test_a_rejected_reload_logs_every_problem_of_the_file(tmp_path):
    """A file with problems in the options, two token entries and the JWT table: the reload's
    one line names every problem, as --check does for the same file, and nothing changes."""
    door = tmp_path / "door.toml"
    door.write_text(token_table(BEFORE))
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        door.write_text("max-body-bytes = -5\n" + token_table([("bob", BOB, ["Bogus"])])
                        + '[[network.authentication.tokens]]\nname = "carol"\nsha256 = "abc"\nscopes = ["*"]\n'
                        + '[network.authentication.jwt]\nkey_file = "missing.pem"\nalgorithms = ["ES999"]\n')
        checked = judged("--check", "--config", str(door))
        assert checked.returncode == 2
        problems = [line.removeprefix("mur-gateway: ") for line in checked.stderr.splitlines()]
        assert len(problems) == 4, problems
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(lambda: reloads(gw) == (0, 1), what="the file rejected")
        line = next(r for r in gw.logs() if r.get("event") == "config reload rejected; nothing changed")
        assert line["problems"] == problems
        assert line["problem"] == problems[0]
        assert [p.split(":")[0] for p in problems] == [
            "config max-body-bytes", "config [[network.authentication.tokens]] #1 scopes",
            "config [[network.authentication.tokens]] #2 sha256", "config [network.authentication.jwt] algorithms"]
        assert rpc(gw.port, "ListTasks", {}, token=ALICE)[0] == 200  # the tokens as they ran
        assert rpc(gw.port, "ListTasks", {}, token=BOB)[0] == 200
