"""Every URI and version string the protocol fixes, defined once.

CAPSULE_URI is our assumption: the spec names the capsule extension but never prints its URI.
OWN_TASKS_URI is this gateway's own extension (murgw.WatchOwnTasks, README "A caller's own
tasks"): a name, not an address, since the gateway publishes no pages of its own.
"""

STREAM_URI = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1"
DOOR_URI = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1"
CAPSULE_URI = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1"
OWN_TASKS_URI = "urn:murmur-gateway:ext:own-tasks:v1"
A2A_VERSION = "1.0"
