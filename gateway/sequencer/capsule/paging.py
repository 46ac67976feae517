"""ListTasks paging as pure functions of the request's params, so the embedded capsule's
registry and an upstream-mode gateway's view of one caller's tasks page alike: the same
refusals in the same words, the same page fields. A page token is an offset into the list,
most recent task first. `listed_tasks` is the walk an upstream-mode gateway makes over the
upstream's own pages to gather one caller's tasks before it pages them itself."""

from __future__ import annotations

from gateway.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError

PAGE_DEFAULT = 50
PAGE_MAX = 100


def window(params: object) -> tuple[int, int]:
    """(start, size) the params ask for; -32602 for params that are not a page request."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    size = params.get("pageSize", PAGE_DEFAULT)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= PAGE_MAX:
        raise RpcError(INVALID_PARAMS, f"params.pageSize must be an integer from 1 to {PAGE_MAX}")
    token = params.get("pageToken") or "0"
    if not isinstance(token, str) or not token.isdigit():
        raise RpcError(INVALID_PARAMS, "params.pageToken is not a token this server issued")
    return int(token), size


def page(items: list, start: int, size: int) -> dict:
    """The ListTasks answer for `items[start:start + size]` (still to be rendered as tasks)."""
    more = start + size < len(items)
    return {"tasks": items[start:start + size], "nextPageToken": str(start + size) if more else "",
            "pageSize": size, "totalSize": len(items)}


async def listed_tasks(call, params: dict, keep) -> list[dict]:
    """Every task the upstream lists under `params`' filters that `keep` accepts, most recent
    first, each once: read page by page (`call` is the forwarding one), so a gateway can page
    one caller's tasks itself."""
    query = {k: v for k, v in params.items() if k not in ("pageSize", "pageToken")}
    found: dict[str, dict | None] = {}
    token = ""
    while True:
        answer = await call("ListTasks", {**query, "pageSize": PAGE_MAX, **({"pageToken": token} if token else {})})
        tasks = answer.get("tasks") if isinstance(answer, dict) else None
        if not isinstance(tasks, list):
            raise RpcError(INTERNAL_ERROR, "the upstream answered ListTasks without a task list")
        before = len(found)
        for task in tasks:
            if isinstance(task, dict) and isinstance(task.get("id"), str) and task["id"] not in found:
                found[task["id"]] = task if keep(task) else None
        token = answer.get("nextPageToken") or ""
        if not token or len(found) == before:  # the last page, or one that brought nothing new
            return [task for task in found.values() if task is not None]
