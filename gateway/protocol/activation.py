"""Which extensions a request activates and which URIs its response head names.

Spec "Activation": the door reads every `A2A-Extensions` request line, splits each value
on `,`, trims each entry and drops empty ones; a connection is activated when one entry
equals STREAM_URI exactly. murmur.WatchSession is always activated; the task streams
only when asked; every other method never. A response names the door URI, first, when
the request used the door extension: always on murmur.WatchSession, and on a request
whose `message.metadata` holds the door URI (it carries forgetSession).

murgw.WatchOwnTasks is this gateway's extension, not the spec's (OWN_TASKS_URI): a
murmur.WatchSession of its caller's own tasks, always activated as WatchSession is, its
response naming its own URI first in place of the door's.
"""

from typing import NamedTuple

from gateway.protocol.uris import DOOR_URI, OWN_TASKS_URI, STREAM_URI

SEND_STREAMING_MESSAGE = "SendStreamingMessage"
SUBSCRIBE_TO_TASK = "SubscribeToTask"
WATCH_SESSION = "murmur.WatchSession"
SEND_MESSAGE = "SendMessage"
GET_TASK = "GetTask"
LIST_TASKS = "ListTasks"
CANCEL_TASK = "CancelTask"
STOP_SESSION = "murmur.StopSession"
GET_EXTENDED_AGENT_CARD = "GetExtendedAgentCard"
WATCH_OWN_TASKS = "murgw.WatchOwnTasks"  # the gateway's extension (OWN_TASKS_URI)
# Every method the gateway serves, the names a token's scopes may hold (config/authentication.py checks them).
METHODS = (SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK, WATCH_SESSION, SEND_MESSAGE, GET_TASK,
           LIST_TASKS, CANCEL_TASK, STOP_SESSION, GET_EXTENDED_AGENT_CARD, WATCH_OWN_TASKS)

TASK_STREAM_METHODS = frozenset({SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK})
WATCHER_METHODS = frozenset({WATCH_SESSION, WATCH_OWN_TASKS})  # session-wide streams
STREAM_METHODS = TASK_STREAM_METHODS | WATCHER_METHODS

ALWAYS = "always"
WHEN_ASKED = "when-asked"  # stream: the request's A2A-Extensions names STREAM_URI
WHEN_USED = "when-used"  # door: the request's message.metadata holds DOOR_URI
NEVER = "never"


class Activation(NamedTuple):
    stream: str
    door: str
    own: str = NEVER  # OWN_TASKS_URI, this gateway's extension


# The Activation table; a method not listed is answered by `_OTHER_METHODS`.
ACTIVATION: dict[str, Activation] = {
    WATCH_SESSION: Activation(stream=ALWAYS, door=ALWAYS),
    SEND_STREAMING_MESSAGE: Activation(stream=WHEN_ASKED, door=WHEN_USED),
    SUBSCRIBE_TO_TASK: Activation(stream=WHEN_ASKED, door=WHEN_USED),
    WATCH_OWN_TASKS: Activation(stream=ALWAYS, door=NEVER, own=ALWAYS),
}
_OTHER_METHODS = Activation(stream=NEVER, door=WHEN_USED)


def parse_extensions(values: list[str]) -> list[str]:
    """Every A2A-Extensions header line's value, split on ",", trimmed, empties dropped."""
    return [entry for value in values for entry in (part.strip() for part in value.split(",")) if entry]


def is_activated(values: list[str]) -> bool:
    """Whether the header lines name STREAM_URI exactly (the request asked for it)."""
    return STREAM_URI in parse_extensions(values)


def _applies(rule: str, condition: bool) -> bool:
    return rule == ALWAYS or (rule != NEVER and condition)


def connection_activated(method: str, values: list[str]) -> bool:
    """Whether a connection of `method` with these A2A-Extensions lines receives frames."""
    return _applies(ACTIVATION.get(method, _OTHER_METHODS).stream, is_activated(values))


def response_extensions(method: str, *, activated: bool, door_used: bool = False) -> list[str]:
    """The URIs the response head names, door (or the gateway's own) first."""
    rule = ACTIVATION.get(method, _OTHER_METHODS)
    uris = [OWN_TASKS_URI] if rule.own == ALWAYS else []
    if _applies(rule.door, door_used):
        uris.append(DOOR_URI)
    if _applies(rule.stream, activated):
        uris.append(STREAM_URI)
    return uris


def extensions_header(uris: list[str]) -> str | None:
    """The response's A2A-Extensions value; None means the header is not sent."""
    return ", ".join(uris) if uris else None


def message_uses_door(message: dict) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, dict) and DOOR_URI in metadata
