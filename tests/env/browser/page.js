// The test page (tests/env/test_browser_sdk.py): docs/browsers.md's sample, run with tokens from
// this origin's stand-in backend (app_server.mjs); what it saw is left in `window.result`.
import { TaskState } from '@a2a-js/sdk';
import { watchTask } from './build/watch-task.js';

const params = new URLSearchParams(location.search);
const result = { events: [], tokens: 0, state: null, error: null };
window.result = result;

async function getToken() {
  const answer = await fetch('/token', { method: 'POST' });
  result.tokens += 1;
  return answer.json();
}

function described(event, id) {
  const { $case, value } = event.payload ?? {};
  const state = value?.status?.state;
  return { id, kind: $case ?? null, state: state === undefined ? null : TaskState[state] };
}

watchTask({
  gateway: params.get('gateway'), getToken, text: params.get('text'),
  refreshSeconds: Number(params.get('refresh')),
  onEvent: (event, id) => result.events.push(described(event, id)),
}).then((state) => { result.state = TaskState[state]; },
  (error) => { result.error = String(error?.stack ?? error); });
