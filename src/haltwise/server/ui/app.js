// The playground: chat (multi-turn) and completion modes, streamed, each answer followed by its
// termination view. Talks only to this server's own API (no CDN, works offline).
import { pollMetrics } from "./metrics.js";
import { readParams } from "./params.js";
import { sseData } from "./sse.js";
import { renderTermination } from "./termination.js";

const $ = (id) => document.getElementById(id);
const state = { mode: "chat", messages: [], busy: false, controller: null, model: null, models: [], window: 0,
  refreshMetrics: () => {} };
const KEY_STORE = "haltwise.apiKey";  // sessionStorage: the key stays in this tab

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function notice(text) {
  const n = $("notice");
  n.textContent = text || "";
  n.hidden = !text;
}

// The model picker: every model the server offers (GET /v1/models) with its status; an unloaded one is
// loaded by the server on the first request that names it. The pick survives a refresh of the list.
function describeModel(m) {
  const loaded = m.status?.value === "loaded";
  state.window = loaded ? m.max_model_len : 0;
  $("model").textContent = loaded ? `window ${m.max_model_len} tokens`
    : m.status?.value === "loading" ? "loading…" : "unloaded: loads on its first request";
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: authHeaders() });
    if (r.status === 401) {
      notice("This server needs an API key: enter it at the top right (it is sent as Authorization: Bearer).");
      $("api-key").focus();
      $("model").textContent = "";
      return;
    }
    state.models = (await r.json()).data;
    const pick = $("model-pick");
    pick.replaceChildren(...state.models.map((m) => {
      const o = document.createElement("option");
      o.value = m.id;
      o.textContent = `${m.id} (${m.status?.value || "loaded"})`;
      return o;
    }));
    const current = state.models.find((m) => m.id === state.model) || state.models[0];
    state.model = current.id;
    pick.value = current.id;
    describeModel(current);
    notice("");
  } catch (e) {
    $("model").textContent = "server unreachable";
  }
}

function pickModel() {
  state.model = $("model-pick").value;
  describeModel(state.models.find((m) => m.id === state.model));
}

function setMode(mode) {
  state.mode = mode;
  for (const b of document.querySelectorAll(".modes [data-mode]")) b.classList.toggle("on", b.dataset.mode === mode);
  $("system").hidden = mode !== "chat";
  $("clear").textContent = mode === "chat" ? "New conversation" : "Clear";
  $("prompt").placeholder = mode === "chat" ? "Message (Enter sends, Shift+Enter is a new line)"
    : "Text to continue (Enter sends, Shift+Enter is a new line)";
}

function clearTranscript() {
  state.messages = [];
  $("transcript").replaceChildren();
}

function addTurn(kind, text) {
  $("transcript").querySelector(".empty")?.remove();
  const div = document.createElement("div");
  div.className = `turn ${kind}`;
  if (text !== undefined) div.textContent = text;
  $("transcript").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

// A new answer: its output and termination view carry the test hooks (only the latest one does).
function addAnswer() {
  for (const old of document.querySelectorAll("[data-testid=output], [data-testid=termination]")) {
    old.removeAttribute("data-testid");
  }
  const turn = addTurn("answer");
  const output = document.createElement("div");
  output.className = "output streaming";
  output.dataset.testid = "output";
  const term = document.createElement("div");
  term.className = "termination pending";
  term.dataset.testid = "termination";
  term.textContent = "generating…";
  turn.append(output, term);
  return { turn, output, term };
}

function setBusy(busy) {
  state.busy = busy;
  $("send").disabled = busy;
  $("cancel").disabled = !busy;
}

function fromError(err, source) {
  const reason = err.code === "cancelled" ? "cancelled" : "error";
  return { source, reason, layer: "system", detail: err.message, code: err.code, param: err.param };
}

async function send() {
  if (state.busy) return;
  const text = $("prompt").value;
  if (!text.trim()) return;
  let params;
  try { params = readParams($("params")); } catch (e) { notice(e.message); return; }
  notice("");
  const chat = state.mode === "chat";
  const body = { ...params, stream: true, stream_options: { include_usage: true } };
  if (state.model) body.model = state.model;
  let userTurn;
  if (chat) {
    const system = $("system").value.trim();
    state.messages.push({ role: "user", content: text });
    body.messages = [...(system ? [{ role: "system", content: system }] : []), ...state.messages];
    userTurn = addTurn("user", text);
    $("prompt").value = "";
  } else {
    body.prompt = text;
    userTurn = addTurn("prompt", text);
  }
  const { turn, output, term } = addAnswer();
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  $("status").textContent = "waiting for the first token…";
  const t0 = performance.now();
  let answer = "", usage = null, end = null, firstAt = null;
  try {
    const r = await fetch(chat ? "/v1/chat/completions" : "/v1/completions", {
      method: "POST", signal: controller.signal,
      headers: { "Content-Type": "application/json", ...authHeaders() }, body: JSON.stringify(body),
    });
    if (!r.ok) {
      let err = { message: r.statusText };
      try { err = (await r.json()).error || err; } catch (e) { /* not JSON */ }
      end = { ...fromError(err, "http"), reason: "rejected", layer: "request", status: r.status };
      if (r.status === 401) notice("Incorrect or missing API key: enter it at the top right.");
    } else {
      for await (const data of sseData(r)) {
        if (data === "[DONE]") break;
        const ev = JSON.parse(data);
        if (ev.error) { end = fromError(ev.error, "stream-error"); continue; }
        if (!ev.choices || !ev.choices.length) { if (ev.usage) usage = ev.usage; continue; }
        const c = ev.choices[0];
        const delta = chat ? (c.delta && c.delta.content) || "" : c.text || "";
        if (delta) {
          if (firstAt === null) { firstAt = performance.now(); state.refreshMetrics(); }
          answer += delta;
          output.textContent = answer;
          $("status").textContent = `streaming… ${answer.length} characters`;
        }
        if (c.termination) {
          end = { source: "server", ...c.termination, finish_reason: c.finish_reason, stop_reason: c.stop_reason };
        }
      }
      if (!end) end = { source: "stream-error", reason: "error", layer: "system", detail: "the stream ended without a final chunk" };
    }
  } catch (e) {
    end = e.name === "AbortError"
      ? { source: "client", reason: "cancelled", layer: "system", detail: "aborted by the page" }
      : { source: "network", reason: "error", layer: "system", detail: String(e.message || e) };
  }
  const t1 = performance.now();
  let timing = null;
  if (firstAt !== null) {
    const rate = usage && t1 > firstAt ? ` · ${(usage.completion_tokens / ((t1 - firstAt) / 1000)).toFixed(1)} tok/s` : "";
    timing = `first token ${((firstAt - t0) / 1000).toFixed(2)} s${rate}`;
  }
  output.classList.remove("streaming");
  if (!answer) output.classList.add("nothing");
  await loadModel();   // the statuses moved (the model may have loaded for this answer): the window is known now
  renderTermination(term, end, { text: answer, usage, window: state.window, body, timing });
  if (chat && answer) state.messages.push({ role: "assistant", content: answer });
  else if (chat) {  // nothing came back: drop the message from the history, give it back to edit and resend
    state.messages.pop();
    userTurn.classList.add("unanswered");
    if (!$("prompt").value) $("prompt").value = text;
  }
  turn.scrollIntoView({ block: "end" });
  state.controller = null;
  setBusy(false);
  setTimeout(state.refreshMetrics, 150);  // the server's counters move once it has seen the end
  $("status").textContent = "";
}

function init() {
  const key = $("api-key");
  key.value = sessionStorage.getItem(KEY_STORE) || "";
  $("key-form").addEventListener("submit", (e) => { e.preventDefault(); key.blur(); });
  key.addEventListener("change", () => { sessionStorage.setItem(KEY_STORE, key.value.trim()); loadModel(); });
  for (const b of document.querySelectorAll(".modes [data-mode]")) b.addEventListener("click", () => setMode(b.dataset.mode));
  $("clear").addEventListener("click", clearTranscript);
  $("model-pick").addEventListener("change", pickModel);
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("cancel").addEventListener("click", () => state.controller && state.controller.abort());
  const rf = $("params").elements.response_format;
  rf.addEventListener("change", () => { $("params").elements.schema.hidden = rf.value !== "json_schema"; });
  setMode("chat");
  loadModel();
  state.refreshMetrics = pollMetrics(1000, authHeaders);
}

init();
