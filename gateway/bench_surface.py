"""What loadtest/ reads of the gateway, in one place: the benches, load drivers and sample
servers import these names and nothing else of gateway/, so a move inside the gateway breaks
no bench, and what a bench depends on is seen at a glance.

- a process tree's CPU and memory, as the benches measure a server (`gateway/common/procstat.py`);
- the methods a watcher calls, and the events a worker's window keeps;
- a load event's and the naive sample server's bytes, encoded as the gateway encodes them
  (`gateway/protocol/`), so a comparison server sends what the gateway sends;
- the delivery's window and stream, whose replay views loadtest/replay_views.py measures.

Nothing in gateway/ imports this module.
"""

from gateway.common.board import RING_SLOTS
from gateway.common.procstat import cpu_seconds, open_descriptors, rss_kib
from gateway.common.procstat import tree as process_tree
from gateway.common.records import FRAME, make_meta
from gateway.protocol.activation import WATCH_OWN_TASKS, WATCH_SESSION
from gateway.protocol.events import (connection_ack_frame, lagged_frame, task_frame_event, taskless_frame_event,
                                     text_frame)
from gateway.protocol.ids import new_context_id, new_task_id
from gateway.protocol.sse import HEARTBEAT as SSE_HEARTBEAT
from gateway.protocol.sse import frame_event, rpc_prefix
from gateway.protocol.states import WORKING
from gateway.worker.delivery.stream import Stream
from gateway.worker.delivery.window import Window

__all__ = ["FRAME", "RING_SLOTS", "SSE_HEARTBEAT", "WATCH_OWN_TASKS", "WATCH_SESSION", "WORKING", "Stream", "Window",
           "connection_ack_frame", "cpu_seconds", "frame_event", "lagged_frame", "make_meta", "new_context_id",
           "new_task_id", "open_descriptors", "process_tree", "rpc_prefix", "rss_kib", "task_frame_event",
           "taskless_frame_event", "text_frame"]
