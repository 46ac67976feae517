"""The control socket answers only its own user's processes, and a call names its caller.

It is an abstract Unix socket (no file, so nothing can outlive the session), which means no
file permissions either: any process in the network namespace can connect. The sequencer
closes a peer of another user unanswered, so the door's tokens stay the only way in. A task
call that names no caller sees no task (it fails closed): only a call that says whose it is,
or that it sees every task, is answered with one.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.common.control import Op, call_blocking
from gateway.protocol.errors import TASK_NOT_FOUND, RpcError
from helpers.gateway_harness import running_gateway
from helpers.http_client import rpc, user_message

PROBE = r"""
import json, os, socket, struct, sys
if sys.argv[2] != "-":  # drop to that user first: the probe is then another user's process
    os.setgid(int(sys.argv[2]))
    os.setuid(int(sys.argv[2]))
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(30)
sock.connect("\0" + sys.argv[1])  # abstract: a leading NUL
call = json.dumps({"i": 1, "op": "list", "p": {"params": {}, "owner": None, "sees_all": True}}).encode()
answer = b""
try:
    sock.sendall(struct.pack(">I", len(call)) + call)
    while chunk := sock.recv(4096):
        answer += chunk
        if len(answer) >= 4 and len(answer) >= 4 + struct.unpack(">I", answer[:4])[0]:
            break
except (BrokenPipeError, ConnectionResetError):  # closed before (or while) the call was sent
    pass
print(answer[4:].decode() if answer else "closed")
"""

NOBODY = 65534


def control_address(pid: int) -> str:
    with open("/proc/net/unix") as fh:
        names = [line.split()[-1] for line in fh if f"@murgw-{pid}-" in line]
    assert names, "the supervisor's abstract control socket"
    return names[0][1:]  # the name after its NUL ("@" in /proc)


def probe(address: str, user: int | None) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, address, "-" if user is None else str(user)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_another_users_process_gets_no_answer_from_the_control_socket(tmp_path):
    """[claim: control-peer]"""
    with running_gateway(tmp_path=tmp_path) as gw:
        address = control_address(gw.pid)
        assert '"ok":{"tasks":' in probe(address, None)  # the gateway's own user is answered
        assert probe(address, NOBODY) == "closed"
        assert gw.proc.poll() is None


def test_a_task_call_that_names_no_caller_sees_no_task(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gw:
        status, _, body = rpc(gw.port, "SendMessage", user_message("hello"))
        assert status == 200 and "result" in body, body
        task_id = body["result"]["task"]["id"]
        path = "\0" + control_address(gw.pid)
        everyone = {"owner": None, "sees_all": True}  # what a public door's caller is
        assert [t["id"] for t in call_blocking(path, Op.LIST, 30, params={}, **everyone)["tasks"]] == [task_id]
        assert call_blocking(path, Op.GET, 30, id=task_id, **everyone)["task"]["id"] == task_id

        assert call_blocking(path, Op.LIST, 30, params={})["tasks"] == []
        with pytest.raises(RpcError) as unseen:
            call_blocking(path, Op.GET, 30, id=task_id)
        assert unseen.value.code == TASK_NOT_FOUND
        with pytest.raises(RpcError) as unseen:
            call_blocking(path, Op.CANCEL, 30, id=task_id)
        assert unseen.value.code == TASK_NOT_FOUND
        task = call_blocking(path, Op.GET, 30, id=task_id, **everyone)["task"]
        assert task["status"]["state"] != "TASK_STATE_CANCELED"
