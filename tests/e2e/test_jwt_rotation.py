"""Keys rotated with overlap, and a token verified once (gateway/config/jwt/keys.py,
gateway/worker/door/jwt/verifier.py), on a real gateway reloaded by SIGHUP.

A JWKS key file rotated in three steps (publish the new key beside the old, mint with the
new, retire the old) keeps every live token working at each step; each reload's log line
names the keys now in force; a PEM file of two keys is refused by the reload, the keys in use
staying. A token that verified is not verified again (murgw_jwt_verifications_total) on a
reconnect, until a reload, and a kept token past its `exp` is refused as `expired`."""

from __future__ import annotations

import math
import os
import signal
import time

from helpers.gateway_harness import running_gateway, scrape, wait_for
from helpers.http_client import rpc
from helpers.jwt_tokens import KeyPair, jwks, jwt_table
from helpers.sse_reading import watch

OLD, NEW = KeyPair("2026-05"), KeyPair("2026-06")


def reloaded(gw, applied: int) -> dict:
    """SIGHUP, then the supervisor's line once the `applied`-th reload is in every worker."""
    os.kill(gw.pid, signal.SIGHUP)
    wait_for(lambda: scrape(gw.metrics_port)['murgw_config_reloads_total{outcome="applied"}'] == applied,
             what=f"reload {applied} applied")
    wait_for(lambda: len([r for r in gw.logs() if r.get("event") == "reloaded settings applied"]) == applied,
             what=f"reload {applied} in the worker")
    return [r for r in gw.logs() if r.get("event") == "config reloaded"][-1]


def opens(gw, pair: KeyPair) -> int:
    return rpc(gw.port, "ListTasks", {}, token=pair.mint(scope="ListTasks"))[0]


def test_a_jwks_rotation_keeps_every_live_token_and_each_reload_names_its_keys(tmp_path):
    """[claim: jwt-key-set] Step 1 publishes NEW beside OLD: both verify. Step 2 retires
    OLD: its tokens are 401 (`unknown_key`), NEW's open. A PEM file of two keys is refused
    by the reload and the set in use stays."""
    keys = tmp_path / "jwks.json"
    keys.write_bytes(jwks(OLD))
    door = tmp_path / "door.toml"
    door.write_text(jwt_table(keys))
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        assert (opens(gw, OLD), opens(gw, NEW)) == (200, 401)
        keys.write_bytes(jwks(OLD, NEW))
        assert reloaded(gw, 1)["jwt_keys"] == ["2026-05", "2026-06"]
        assert (opens(gw, OLD), opens(gw, NEW)) == (200, 200)
        keys.write_bytes(jwks(NEW))
        assert reloaded(gw, 2)["jwt_keys"] == ["2026-06"]
        assert (opens(gw, OLD), opens(gw, NEW)) == (401, 200)
        assert scrape(gw.metrics_port)['murgw_tokens_refused_total{problem="unknown_key"}'] == 2
        assert "jwt_keys" not in reloaded(gw, 3)  # the same keys: nothing to name

        pem = tmp_path / "two.pem"
        pem.write_bytes(OLD.public_pem + NEW.public_pem)
        door.write_text(jwt_table(pem))
        os.kill(gw.pid, signal.SIGHUP)
        rejected = wait_for(lambda: next((r for r in gw.logs() if r.get("event") ==
                                          "config reload rejected; nothing changed"), None), what="the rejection")
        assert rejected["problems"] == [
            f"config [network.authentication.jwt] key_file: {pem}: the file holds 2 PEM keys, and a PEM file "
            'holds one: publish several (a rotation) as a JWKS document ({"keys": [...]}), each with its kid']
        assert (opens(gw, OLD), opens(gw, NEW)) == (401, 200)


def verifications(gw) -> float:
    return scrape(gw.metrics_port)["murgw_jwt_verifications_total"]


def test_a_token_is_verified_once_until_a_reload_and_refused_once_its_exp_passes(tmp_path):
    """[claim: jwt-verified-once] A reconnect with the same token, and its next calls, check
    no signature again; a reload empties what the worker kept; a kept token past its `exp`
    is refused as `expired` with no signature checked."""
    keys = tmp_path / "jwks.json"
    keys.write_bytes(jwks(NEW))
    door = tmp_path / "door.toml"
    door.write_text(jwt_table(keys))
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        token = NEW.mint(scope="murmur.WatchSession ListTasks")
        for _ in range(3):  # an opening and two reconnects
            with watch(gw.port, token=token):
                pass
        assert rpc(gw.port, "ListTasks", {}, token=token)[0] == 200
        assert verifications(gw) == 1
        assert rpc(gw.port, "ListTasks", {}, token=NEW.mint(scope="ListTasks", sub="other"))[0] == 200
        assert verifications(gw) == 2

        reloaded(gw, 1)
        assert rpc(gw.port, "ListTasks", {}, token=token)[0] == 200
        assert verifications(gw) == 3

        expires = math.ceil(time.time()) + 2
        brief = NEW.mint(scope="ListTasks", exp=expires)
        assert rpc(gw.port, "ListTasks", {}, token=brief)[0] == 200
        assert verifications(gw) == 4
        wait_for(lambda: time.time() > expires, what="its exp")
        assert rpc(gw.port, "ListTasks", {}, token=brief)[0] == 401
        assert verifications(gw) == 4  # refused from what the worker kept
        assert scrape(gw.metrics_port)['murgw_tokens_refused_total{problem="expired"}'] == 1
