"""The supervisor over real processes: every child is named and watched, the exporter
included; an address that cannot be bound stops the start with one line; the start-up banner
says what the gateway is; an idle supervisor uses no CPU, whatever died before."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from gateway.tuning import FD_RESERVE
from gateway.worker.process import TEST_EXIT_ENV
from helpers.gateway_harness import ROOT, running_gateway, scrape, session_memory, token_table, wait_for
from helpers.tls_support import Certificates

IDLE_WINDOW = 2.0  # seconds the supervisor's CPU time is read over
IDLE_SHARE = 0.10  # of that window: generous; a supervisor spinning on a ready sentinel used 55-100%


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode().strip()


def named_children(gw) -> dict[str, int]:
    """The supervisor's children by the name each gave itself."""
    names = {}
    for pid in gw.children():
        try:
            name = cmdline(pid)
        except OSError:
            continue  # gone meanwhile
        if name.startswith("murgw: "):
            names[name] = pid
    return names


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def banner(gw) -> dict:
    return wait_for(lambda: next((r for r in gw.logs() if r.get("event") == "listening"), None),
                    what="the start-up banner")


def test_every_process_names_itself_and_its_gateways_address(tmp_path):
    with running_gateway(metrics=True, tmp_path=tmp_path) as gw:
        address = f"127.0.0.1:{gw.port}"
        assert cmdline(gw.pid) == f"murgw: supervisor {address}"
        names = wait_for(lambda: len(n := named_children(gw)) == 4 and n, what="four named children")
        assert sorted(gw.children()) == sorted(names.values())  # no other child: no resource tracker
        assert set(names) == {f"murgw: {role} {address}" for role in ("sequencer", "worker 0", "worker 1", "exporter")}
        serving = wait_for(lambda: gw.worker_pids().get(0), what="worker 0's serving line")
        assert names[f"murgw: worker 0 {address}"] == serving


def test_sigterm_logs_the_signal_and_the_drains_start(tmp_path):
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        assert gw.stop() == 0
        events = [r for r in gw.logs() if r.get("role") == "supervisor"]
        draining = next(r for r in events if r["event"] == "draining: closing every stream, stopping every process")
        assert draining["signal"] == "SIGTERM"
        assert events.index(draining) < next(i for i, r in enumerate(events) if r["event"] == "stopped")


def test_a_killed_exporter_is_replaced_on_its_port_logged_counted_and_the_supervisor_idles(tmp_path):
    with running_gateway(metrics=True, tmp_path=tmp_path) as gw:
        assert scrape(gw.metrics_port)["murgw_exporter_restarts_total"] == 0
        exporter = f"murgw: exporter 127.0.0.1:{gw.port}"
        old = wait_for(lambda: named_children(gw).get(exporter), what="the exporter")
        os.kill(old, signal.SIGKILL)
        new = wait_for(lambda: (pid := named_children(gw).get(exporter)) not in (None, old) and pid,
                       what="a new exporter")
        assert not os.path.exists(f"/proc/{old}")  # reaped, not a zombie
        samples = scrape(gw.metrics_port)  # the same port, served by the new exporter
        assert samples["murgw_exporter_restarts_total"] == 1
        assert samples["murgw_worker_restarts_total"] == 0
        assert samples['murgw_process_resident_memory_bytes{process="exporter"}'] > 0
        logged = [r for r in gw.logs() if r.get("event") == "exporter died; replacing it"]
        assert len(logged) == 1 and logged[0]["exporter_pid"] == old and logged[0]["exitcode"] == -signal.SIGKILL
        assert named_children(gw)[exporter] == new

        before, started = cpu_ticks(gw.pid), time.monotonic()
        time.sleep(IDLE_WINDOW)  # the window measured, not a wait for a condition
        used = (cpu_ticks(gw.pid) - before) / os.sysconf("SC_CLK_TCK")
        window = time.monotonic() - started
        print(f"idle supervisor after the exporter's replacement: {used:.3f} CPU-s in {window:.2f} s")
        assert used < IDLE_SHARE * window


@pytest.mark.parametrize("option", ["--bind", "--metrics-bind"])
def test_an_address_in_use_is_one_line_naming_the_option_exit_2(option):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        args = {"--bind": "127.0.0.1:0", "--metrics-bind": "127.0.0.1:0", option: f"127.0.0.1:{port}"}
        proc = subprocess.Popen([sys.executable, "-m", "gateway", *(x for kv in args.items() for x in kv)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2
    assert stderr.splitlines() == [f"mur-gateway: {option} 127.0.0.1:{port}: address already in use"]
    assert stdout == ""  # nothing started, so nothing announced
    assert not session_memory(proc.pid)


def test_the_banner_says_what_the_gateway_is(tmp_path):
    """A: embedded, public, plain HTTP, metrics on, its capacity bound by descriptors (and none
    raised: soft = hard). B in front of A: upstream, two tokens (never shown), TLS,
    metrics off, capacity set by --max-connections."""
    nofile = FD_RESERVE + 12
    certs = Certificates(tmp_path)
    (tmp_path / "door.toml").write_text(token_table([("ops", "s3cr3t-ops", ["*"]),
                                                     ("ci", "s3cr3t-ci", ["GetTask"])]))
    with running_gateway(metrics=True, workers=1, nofile=(nofile, nofile), tmp_path=tmp_path) as a:
        seen = banner(a)
        assert seen.pop("version") not in ("", "unknown")
        assert seen.pop("backlog") > 0
        assert {k: v for k, v in seen.items() if k not in ("ts", "level", "pid")} == {
            "role": "supervisor", "event": "listening", "mode": "embedded",
            "listening": f"http://127.0.0.1:{a.port}", "workers": 1,
            "max_connections_per_worker": nofile - FD_RESERVE, "capacity": nofile - FD_RESERVE,
            "capacity_bound": "descriptors", "descriptors": nofile, "door": "public", "tls": "off",
            "metrics": f"http://127.0.0.1:{a.metrics_port}/metrics"}
        assert not [r for r in a.logs() if r.get("event") == "descriptor limit raised"]

        upstream = f"http://127.0.0.1:{a.port}"
        with running_gateway("--upstream", upstream, "--config", str(tmp_path / "door.toml"),
                             "--max-connections", "7", *certs.args, workers=2, tmp_path=tmp_path,
                             tls=certs.client_context()) as b:
            seen = banner(b)
            assert (seen["mode"], seen["upstream"]) == ("upstream", f"http://127.0.0.1:{a.port}")
            assert seen["listening"] == f"https://127.0.0.1:{b.port}"
            assert (seen["workers"], seen["max_connections_per_worker"], seen["capacity"]) == (2, 7, 14)
            assert seen["capacity_bound"] == "--max-connections"
            assert (seen["door"], seen["tls"], seen["metrics"]) == ("2 tokens", "on", "off")
            line = next(line for line in b.stderr().splitlines() if '"event":"listening"' in line)
            assert "s3cr3t" not in line


def test_a_worker_that_dies_at_start_is_restarted_after_a_growing_wait(tmp_path):
    """A child that dies within a second of its start is restarted after 0.25 s, then 0.5,
    1, 2 ... (gateway/supervisor/restarts.py): each death logged with its wait and counted, and the
    supervisor idle between restarts, not respawning every watch turn."""
    with running_gateway(workers=1, metrics=True, ready=None, tmp_path=tmp_path,
                         env={TEST_EXIT_ENV: "1"}) as gw:
        def deaths():
            return [r for r in gw.logs() if r.get("event") == "worker died; replacing it"]
        wait_for(lambda: len(deaths()) >= 4, timeout=30, what="four deaths of the worker")
        before, started = cpu_ticks(gw.pid), time.monotonic()
        time.sleep(IDLE_WINDOW)  # the window measured (inside the 2 s and 4 s waits), not a wait for a condition
        used = (cpu_ticks(gw.pid) - before) / os.sysconf("SC_CLK_TCK")
        window = time.monotonic() - started
        died = deaths()
        assert scrape(gw.metrics_port)["murgw_worker_restarts_total"] == len(deaths()) >= len(died)
    waits = [r["delay_s"] for r in died]
    assert waits[:4] == [0.25, 0.5, 1.0, 2.0], waits
    # a restart never comes before its wait: the next death is at least the wait after the last
    # (the logs' own timestamps, in milliseconds)
    for last, this in zip(died, died[1:]):
        assert this["ts"] - last["ts"] >= last["delay_s"] - 0.001, (last, this)
    print(f"supervisor over {window:.2f} s of backoff: {used:.3f} CPU-s")
    assert used < IDLE_SHARE * window
