"""A worker's side of SIGHUP: take the reloaded settings, and end the streams they revoke.

The supervisor re-reads --config and hands the reloadable settings (tokens, scopes,
max_streams, the per-client limits, trusted proxies, allowed origins) to the sequencer, which bumps the
ring's CONFIG_GENERATION word. Every worker looks at that word four times a heartbeat
interval; when it moved, the worker asks the sequencer for the settings and applies them
to its door and limits. Then each open stream whose token the new rules no longer hold, or
whose token lost the scope of the stream's method, is ended where it stands (a stream whose
token's `expires` the reload changed ends at the new one instead): after the
whole events it has written, with no frame of its own (docs/operations.md, "Reloading").
So such a stream ends within one heartbeat interval of the reload. Streams of every other
token go on untouched, missing nothing. When the supervisor found the certificate pair
loadable again (config_reload.CERTIFICATE), the worker loads it into its serving context:
new handshakes get it, open connections keep theirs (gateway/config/tls.py).
"""

from __future__ import annotations

import asyncio

from gateway import logs
from gateway.config import reload as config_reload
from gateway.config import tls
from gateway.config.options import Config
from gateway.common.control import Op
from gateway.worker.door.cors import Origins
from gateway.tuning import CHECKS_PER_HEARTBEAT

log = logs.get("worker")


def apply(config: Config, settings: dict, admission, hub) -> Config:
    """The running config with `settings` in force (the door's, its limits', the allowed
    origins'); the open streams it revokes ended."""
    rpc = admission.rpc
    settings = dict(settings)
    certificate = settings.pop(config_reload.CERTIFICATE, False)
    config = Config.from_dict({**config.to_dict(), **settings})
    if certificate:
        assert config.certfile is not None and config.keyfile is not None  # a certificate reload: TLS is on
        problem = tls.reload_pair(config.certfile, config.keyfile)
        if problem is not None:
            log.error("certificate not reloaded; the one in use stays", problem=problem)
    rpc.door.apply(config)
    rpc.limits.apply(config)
    admission.origins = Origins(config.allowed_origins)
    revoked = [served for served, (rule, _holding) in rpc.openings.holds.items()
               if rule is not None and not rpc.door.still_admits(rule, served.stream.endpoint)]
    for served in revoked:
        hub.end_stream(served)
    for served, (rule, holding) in list(rpc.openings.holds.items()):  # an `expires` the reload changed
        now = rule and rpc.door.now_in_force(rule)
        if now is not None and now.expires != rule.expires:
            rpc.openings.holds[served] = (now, holding)
            rpc.openings.expire_at(served, now.expires)
    log.info("reloaded settings applied", tokens=len(config.tokens), streams_ended=len(revoked),
             **({"certificate_reloaded": problem is None} if certificate else {}))
    return config


async def follow(config: Config, admission, hub) -> None:
    """Forever: apply each reload the sequencer announces.

    `seen` starts at 0 (no reload yet), not at the word's value now: a worker spawned with
    the settings of before a reload that lands while it boots would otherwise take that
    reload's generation for its own and never apply it. A worker spawned after a reload
    applies the same settings again once, harmlessly."""
    seen = 0
    while True:
        await asyncio.sleep(config.heartbeat_interval / CHECKS_PER_HEARTBEAT)
        if hub.board.config_generation == seen:
            continue
        try:
            answer = await hub.control.call(Op.SETTINGS)
        except ConnectionError:
            continue  # the session is ending with the sequencer; the supervisor drains us
        except Exception as exc:  # asked again at the next look: a worker never stops following
            log.error("reloaded settings not fetched; asking again", problem=str(exc))
            continue
        seen = answer["generation"]
        if answer["settings"] is not None:
            try:
                config = apply(config, answer["settings"], admission, hub)
            except Exception as exc:  # a revocation must not end the loop that applies the next one
                log.error("reloaded settings not applied", problem=str(exc))
