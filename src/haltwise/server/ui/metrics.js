// The live server panel: polls /metrics (Prometheus text format, unauthenticated) and shows
// running/waiting requests, KV blocks, fragmentation, preemptions and finish reasons so far.

// Prometheus text -> [{name, labels, value}] (comments and blank lines skipped).
export function parsePrometheus(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || "").matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return samples;
}

const LAYER = { timeout: "system", cancelled: "system", error: "system", max_tokens: "engine",
  context_limit: "engine", stop_string: "business", stop_token: "business", repetition: "rule", eos: "model" };

function one(samples, name) {
  const s = samples.find((x) => x.name === name);
  return s ? s.value : NaN;
}

function show(id, text) { document.getElementById(id).textContent = text; }

export function renderMetrics(samples) {
  const used = one(samples, "haltwise_kv_blocks_used");
  const total = one(samples, "haltwise_kv_blocks_total");
  show("m-running", String(one(samples, "haltwise_requests_running")));
  show("m-waiting", String(one(samples, "haltwise_requests_waiting")));
  show("m-preemptions", String(one(samples, "haltwise_preemptions_total")));
  show("m-frag", `${(100 * one(samples, "haltwise_kv_fragmentation_ratio")).toFixed(1)} %`);
  show("m-kv", `KV blocks: ${used} used, ${one(samples, "haltwise_kv_blocks_free")} free of ${total}`);
  document.getElementById("m-kv-bar").style.width = total > 0 ? `${(100 * used) / total}%` : "0";
  const byReason = new Map();
  for (const s of samples) {
    if (s.name !== "haltwise_requests_finished_total") continue;
    const r = s.labels.termination_reason;
    byReason.set(r, (byReason.get(r) || 0) + s.value);
  }
  const list = document.getElementById("m-reasons");
  const max = Math.max(1, ...byReason.values());
  list.replaceChildren(...[...byReason].sort((a, b) => b[1] - a[1]).map(([reason, n]) => {
    const li = document.createElement("li");
    li.dataset.reason = reason;
    li.className = `layer-${LAYER[reason] || "none"}`;
    li.innerHTML = `<span class="r"></span><span class="bar"><i></i></span><span class="n"></span>`;
    li.querySelector(".r").textContent = reason;
    li.querySelector(".n").textContent = String(n);
    li.querySelector("i").style.width = `${(100 * n) / max}%`;
    return li;
  }));
  if (!byReason.size) list.innerHTML = `<li class="muted">none yet</li>`;
}

// Poll every `periodMs`; returns `refresh()` for an immediate scrape (on send and on finish).
// A failed scrape greys the panel instead of throwing. Only the latest scrape schedules the next.
export function pollMetrics(periodMs = 1000, headers = () => ({})) {  // headers: the key, for --protect-metrics
  const age = document.getElementById("metrics-age");
  const panel = document.getElementById("metrics");
  let timer = null, generation = 0;
  const tick = async () => {
    const mine = ++generation;
    clearTimeout(timer);
    try {
      const r = await fetch("/metrics", { cache: "no-store", headers: headers() });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      const text = await r.text();
      if (mine === generation) renderMetrics(parsePrometheus(text));
      age.textContent = "live";
      panel.classList.remove("stale");
    } catch (e) {
      age.textContent = "unreachable";
      panel.classList.add("stale");
    }
    if (mine === generation) timer = setTimeout(tick, periodMs);
  };
  tick();
  return tick;
}
