"""Task states and the status messages the spec fixes, as data.

`STATES` is the spec's `status.state` table: the A2A name, murmur's word (what `mur watch`
prints), in the spec's order. A state's compact code for ring metadata is its row number
(1..7); 0 means no state.

The message templates below are the spec's "Working status messages" table and the
`status.message` column of the TASK_STATE_* table; the functions fill them in. Every
status message the server writes comes from here, so a test can compare it to the spec
by searching for one line.
"""

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
REJECTED = "TASK_STATE_REJECTED"

# (A2A name, murmur's word); the row number, from 1, is the state's code.
STATES: tuple[tuple[str, str], ...] = (
    (SUBMITTED, "submitted"),
    (WORKING, "working"),
    (INPUT_REQUIRED, "input-required"),
    (COMPLETED, "completed"),
    (FAILED, "failed"),
    (CANCELED, "canceled"),
    (REJECTED, "rejected"),
)

TERMINAL_STATES = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})

_WORD_BY_STATE = dict(STATES)
_CODE_BY_STATE = {state: code for code, (state, _word) in enumerate(STATES, start=1)}
_STATE_BY_CODE = {code: state for state, code in _CODE_BY_STATE.items()}


def murmur_word(state: str) -> str:
    return _WORD_BY_STATE[state]


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES


def state_code(state: str | None) -> int:
    """The state's row number in STATES, 0 for None."""
    return 0 if state is None else _CODE_BY_STATE[state]


def state_from_code(code: int) -> str | None:
    return _STATE_BY_CODE.get(code)


# --- TASK_STATE_WORKING: the "Working status messages" table ---

RESUMED = "resumed"
_INFERENCE_TURN = "inference turn {n}"
_REOPENED_BY_HOOK = "reopened by hook {hook}"
_WAITING_ON_CALL_MEMBER = "waiting on call-member: {n} call(s) outstanding"
_WAITING_ON_DELEGATE_TASK = "waiting on delegate-task: {n} delegation(s) outstanding"
_CONTINUING_WITH_MEMBER_ANSWERS = "continuing with {n} member answer(s)"
_CONTINUING_WITH_DELEGATION_OUTCOMES = "continuing with {n} delegation outcome(s)"
_KEEP_WORKING = "keep working {n} of {limit}"
_DONE_CHECK_FAILED = "done check failed, reopened {n} of {limit}"


def inference_turn(n: int) -> str:
    return _INFERENCE_TURN.format(n=n)


def reopened_by_hook(hook: str) -> str:
    return _REOPENED_BY_HOOK.format(hook=hook)


def waiting_on_call_member(n: int) -> str:
    return _WAITING_ON_CALL_MEMBER.format(n=n)


def waiting_on_delegate_task(n: int) -> str:
    return _WAITING_ON_DELEGATE_TASK.format(n=n)


def continuing_with_member_answers(n: int) -> str:
    return _CONTINUING_WITH_MEMBER_ANSWERS.format(n=n)


def continuing_with_delegation_outcomes(n: int) -> str:
    return _CONTINUING_WITH_DELEGATION_OUTCOMES.format(n=n)


def keep_working(n: int, limit: int) -> str:
    return _KEEP_WORKING.format(n=n, limit=limit)


def done_check_failed(n: int, limit: int) -> str:
    return _DONE_CHECK_FAILED.format(n=n, limit=limit)


# --- Terminal and rejected states: the `status.message` column ---

TASK_COMPLETED = "task completed"
TASK_CANCELED = "task canceled"
TASK_CANCELED_BEFORE_START = "task canceled before it started"
TASK_CANCELED_HARNESS_KILLED = "task canceled; the harness was killed and its session may not resume cleanly"
REJECTED_BUSY = "task rejected: capsule is busy"
REJECTED_CLOSING = "task rejected: the session is closing"
REJECTED_SESSION_STOPPED = "task rejected: the session was stopped before this task started"
INPUT_TIMEOUT = "input-timeout"
_TASK_FAILED = "task failed ({cause}): {reason}"
_DRIVER_INVOCATION_FAILED = "driver invocation failed: {error}"
_MAX_TURNS_EXCEEDED = "max_turns exceeded: the task used all {limit} turns allowed by inference.max_turns"
_RUNTIME_ERROR = "error[{code}]: {message}"


def task_failed(cause: str, reason: str) -> str:
    return _TASK_FAILED.format(cause=cause, reason=reason)


def driver_invocation_failed(error: str) -> str:
    return _DRIVER_INVOCATION_FAILED.format(error=error)


def max_turns_exceeded(limit: int) -> str:
    return _MAX_TURNS_EXCEEDED.format(limit=limit)


def runtime_error(code: str, message: str) -> str:
    """A task that ended in a runtime error: `error[<code>]: <message>`."""
    return _RUNTIME_ERROR.format(code=code, message=message)
