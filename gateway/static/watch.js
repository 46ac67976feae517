// The live watch page: murmur.WatchSession over a streaming fetch, shown the way `mur watch`
// prints it (gateway/watch/printer.py). Protocol: https://docs.murmur.nexus/reference/streaming-protocol/
// Every piece of content comes from tasks and is untrusted: it only ever reaches the page as
// textContent or a Text node, never as HTML. The token, when the door asks for one, lives in
// this script's memory only (no storage, no cookie, no URL).
"use strict";

(() => {
  const STREAM_URI = document.body.dataset.streamUri;
  const WORDS = {
    TASK_STATE_SUBMITTED: "submitted", TASK_STATE_WORKING: "working",
    TASK_STATE_INPUT_REQUIRED: "input-required", TASK_STATE_COMPLETED: "completed",
    TASK_STATE_FAILED: "failed", TASK_STATE_CANCELED: "canceled", TASK_STATE_REJECTED: "rejected",
  };
  const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);
  const MEMBERS = ["task", "statusUpdate", "artifactUpdate", "message"];
  const REQUEST = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "murmur.WatchSession", params: {} });
  const $ = (id) => document.getElementById(id);
  const CLOCK_SKEW_MS = 60000;

  let lastId = "0"; // Last-Event-ID: 0 first (the replay buffer), then the last id read
  let token = null;
  let threaded = false;
  let controller = null;
  const tasks = new Map(); // task id -> its block's parts

  function node(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function setConnection(state, text) {
    $("connection").dataset.state = state;
    $("connection").textContent = text;
  }

  function banner(text) {
    $("banner-text").textContent = text;
    $("banner").hidden = false;
  }

  function warn(text) {
    $("warnings").append(node("div", "warning", text));
  }

  function partsText(parts) {
    if (!Array.isArray(parts)) return "";
    return parts.filter((p) => p && typeof p.text === "string").map((p) => p.text).join("");
  }

  function label(body) {
    const [prefix, key] = threaded ? ["ctx", "contextId"] : ["tsk", "taskId"];
    const owner = body[key] || (key === "taskId" ? body.id : undefined);
    return `${prefix}:${typeof owner === "string" && owner ? owner.slice(-6) : "?"}`;
  }

  function block(body) {
    const id = body.taskId || body.id;
    if (typeof id !== "string") return null;
    let task = tasks.get(id);
    if (!task) {
      const section = node("section", "task");
      section.dataset.taskId = id;
      const head = node("div", "task-head");
      const state = node("span", "state", "submitted");
      const message = node("span", "message");
      head.append(node("span", "label", label(body)), state, message);
      const log = node("div", "log"); // text runs and artifacts, in the order they came
      const response = node("div", "response");
      response.hidden = true;
      section.append(head, log, response);
      section.dataset.state = "submitted";
      $("tasks").append(section);
      task = { section, state, message, log, response, held: null };
      tasks.set(id, task);
    }
    return task;
  }

  function onStatus(body) {
    const status = body.status || {};
    const word = WORDS[status.state];
    const task = word && block(body);
    if (!task) return;
    task.section.dataset.state = word;
    task.state.textContent = word;
    task.message.textContent = TERMINAL.has(word) ? "" : partsText(status.message && status.message.parts);
    if (word === "completed" && task.held !== null) {
      task.response.replaceChildren(node("pre", null, task.held));
      task.response.hidden = false;
      task.held = null;
    }
  }

  function onArtifact(body) {
    const artifact = body.artifact;
    const task = artifact && artifact.name === "response" && block(body);
    if (task) task.held = partsText(artifact.parts);
  }

  function onFrame(body, frame) {
    switch (frame.frame) {
      case "text": {
        const task = typeof frame.text === "string" && frame.text && block(body);
        if (!task) break;
        let run = task.log.lastElementChild;
        if (!run || run.className !== "text") task.log.append(run = node("pre", "text"));
        run.append(document.createTextNode(frame.text));
        break;
      }
      case "artifact": {
        const task = block(body);
        if (!task) break;
        let summary = `[artifact] ${frame.toolName}`;
        if (frame.isError === true) summary += " error";
        if (Number.isInteger(frame.exitCode)) summary += ` exit ${frame.exitCode}`;
        const details = node("details", "artifact");
        details.append(node("summary", null, summary));
        if (typeof frame.content === "string" && frame.content) details.append(node("pre", null, frame.content));
        task.log.append(details);
        break;
      }
      case "connection-ack":
        threaded = frame.conversationMode === "threaded";
        break;
      case "gap":
        warn(`replay gap: earlier events are gone; the oldest buffered event is id ${frame.firstAvailableId}`);
        break;
      case "lagged":
        warn(`lagged: this watcher fell behind and missed ${frame.missed} events`);
        break;
      case "capsule-closed":
        closed("capsule closed");
        break;
      default: // thinking, tool calls, quota, suggested prompts, unknown frames: not shown
    }
  }

  function onEvent(id, data) {
    if (id !== null) {
      lastId = id;
      $("last-id").textContent = `last event id: ${id}`;
    }
    if (data === null) return; // a heartbeat
    let response;
    try { response = JSON.parse(data); } catch { return; }
    if (!response || typeof response !== "object") return;
    if (response.error) {
      closed(`the stream answered error ${response.error.code}: ${response.error.message}`);
      return;
    }
    const result = response.result;
    if (!result || typeof result !== "object") return;
    const kind = MEMBERS.find((m) => result[m] && typeof result[m] === "object");
    if (!kind) return;
    const body = result[kind];
    const extension = body.metadata && body.metadata[STREAM_URI];
    if (extension && typeof extension === "object" && "frame" in extension) onFrame(body, extension);
    else if (kind === "statusUpdate") onStatus(body);
    else if (kind === "artifactUpdate") onArtifact(body);
    else if (kind === "task") block(body);
  }

  // SSE (text/event-stream): events end at a blank line; `id:`, `data:` and `:` comments.
  function parser() {
    let buffer = "";
    let id = null;
    let data = [];
    return (text) => {
      buffer += text;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      for (const line of lines) {
        if (line === "") {
          if (id !== null || data.length) onEvent(id, data.length ? data.join("\n") : null);
          id = null;
          data = [];
          if (controller === null) return;
        } else if (!line.startsWith(":")) { // a comment (the heartbeat) only keeps the connection busy
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "data") data.push(value);
          else if (field === "id" && /^[0-9]+$/.test(value)) id = value;
        }
      }
    };
  }

  function closed(text) {
    if (controller) controller.abort();
    controller = null;
    setConnection("closed", text);
    banner(text);
  }

  function lost() {
    controller = null;
    const where = lastId === "0" ? "before any event" : `after event id ${lastId}`;
    setConnection("lost", "connection lost");
    banner(`connection lost ${where}; the capsule may still be running`);
  }

  // A JWT's `exp`, read from its payload unverified (only what the page says depends on it).
  function tokenExpiry() {
    const parts = token.split(".");
    if (parts.length !== 3) return null;
    try {
      const claims = JSON.parse(atob(parts[1].replace(/-/g, "+").replace(/_/g, "/")));
      return claims && typeof claims.exp === "number" ? claims.exp : null;
    } catch { return null; }
  }

  // Whether the token is a JWT whose `exp` has come (this clock give or take CLOCK_SKEW_SECONDS, as
  // mur watch judges it): the gateway ends its stream then, and refuses it after.
  function tokenExpired() {
    const expiry = token === null ? null : tokenExpiry();
    return expiry !== null && expiry * 1000 <= Date.now() + CLOCK_SKEW_MS;
  }

  // The stream ended or broke, or was refused: an expired token asks for a new one, which
  // resumes after the last id read (Last-Event-ID), so nothing the buffer holds is lost.
  function endedOrLost(refusal) {
    if (tokenExpired()) askToken("the token expired; enter a new one to resume");
    else if (refusal !== undefined) askToken(`refused: ${refusal}`);
    else lost();
  }

  function askToken(error) {
    controller = null;
    setConnection("idle", "waiting for a token");
    $("auth-error").textContent = error || "";
    $("auth").hidden = false;
    $("token").focus();
  }

  async function refusal(answer) {
    const body = await answer.text().catch(() => "");
    try {
      const parsed = JSON.parse(body);
      const error = parsed && parsed.error;
      if (error && typeof error === "object") return `error ${error.code}: ${error.message}`;
      if (parsed && typeof parsed.detail === "string") return parsed.detail;  // the door's problem details
    } catch { /* not JSON */ }
    return `HTTP ${answer.status}`;
  }

  async function connect() {
    $("banner").hidden = true;
    $("auth").hidden = true;
    setConnection("connecting", "connecting");
    const mine = controller = new AbortController();
    const headers = { "Content-Type": "application/json", "A2A-Version": "1.0",
                      Accept: "text/event-stream", "Last-Event-ID": lastId };
    if (token !== null) headers.Authorization = `Bearer ${token}`;
    let answer;
    try {
      answer = await fetch("/", { method: "POST", headers, body: REQUEST, cache: "no-store", signal: mine.signal });
    } catch {
      if (controller === mine) endedOrLost();
      return;
    }
    if (answer.status === 401 || answer.status === 403) {
      endedOrLost(await refusal(answer));
      return;
    }
    if (answer.status !== 200 || !(answer.headers.get("content-type") || "").startsWith("text/event-stream")) {
      closed(`refused: ${await refusal(answer)}`);
      return;
    }
    setConnection("connected", "connected");
    const feed = parser();
    const reader = answer.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || controller !== mine) break;
        feed(decoder.decode(value, { stream: true }));
        if (controller !== mine) break;
      }
    } catch { /* the connection broke */ }
    if (controller === mine) endedOrLost();
  }

  $("reconnect").addEventListener("click", () => connect());
  $("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value;
    $("token").value = "";
    connect();
  });
  if (document.body.dataset.auth === "required") askToken();
  else connect();
})();
