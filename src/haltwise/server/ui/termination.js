// The termination view: why and where one answer stopped.
//
// `end` is what the stream ended with, normalised by app.js:
//   {source: "server", reason, layer, detail, token_index, char_offset, finish_reason, stop_reason}
//   {source: "client" | "stream-error" | "http" | "network", reason, layer, detail, status?, code?, param?}
// `ctx` = {text (the answer as shown), usage, window (max_model_len), body (the request), timing}.
// Nothing cut from the answer is ever put back into the output element: the cut is drawn here.

const LAYERS = ["system", "engine", "business", "rule", "model"];
const EXCERPT = 48;  // characters of answer shown before a cut

const WHY = {
  eos: "The model ended the answer itself with its end-of-generation token.",
  stop_string: "A stop string or stop preset matched; the answer ends where the match begins.",
  stop_token: "A token listed in stop_token_ids was sampled.",
  max_tokens: "The answer reached max_tokens and was cut there (never one token more).",
  context_limit: "Prompt plus answer filled the model's context window; the answer was cut.",
  repetition: "The loop detector saw the tail repeat one pattern and stopped the answer.",
  timeout: "The request's deadline passed; the text generated until then is returned.",
  cancelled: "The request was cancelled before it could finish.",
  error: "Generation failed on the server.",
  rejected: "The server refused the request before generating anything.",
};

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v; else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}

// Whitespace made visible inside a cut or a highlighted span.
function visible(s) { return s.replace(/\n/g, "⏎").replace(/\t/g, "⇥"); }

function excerptBefore(text, end) {
  const start = Math.max(0, end - EXCERPT);
  return (start > 0 ? "…" : "") + text.slice(start, end);
}

function layerStrip(layer) {
  if (!LAYERS.includes(layer)) return null;  // a rejected request never reached a layer
  return h("ol", { class: "layers", "aria-label": "termination layers, strongest first" },
    ...LAYERS.map((l) => h("li", { class: l === layer ? `on layer-${l}` : "" }, l)));
}

// The matched stop and where it was cut. With include_stop_str_in_output the stop is the end of
// the answer (kept, highlighted); otherwise it is not in the answer and is drawn struck through.
function stopCut(end, ctx) {
  const text = ctx.text;
  const off = Math.min(end.char_offset, text.length);
  const preset = /^stop preset (\w+)/.exec(end.detail || "")?.[1];
  const kept = Boolean(ctx.body.include_stop_str_in_output);
  const line = h("p", { class: "cut" });
  let note;
  if (preset === "json" || preset === "code_block") {
    line.append(h("span", {}, excerptBefore(text, off)), h("span", { class: "edge" }, "┃"));
    note = `preset ${preset}: the complete ${preset === "json" ? "JSON value" : "code block"} is kept; ` +
      "the answer was cut right after it.";
  } else if (preset) {
    const cut = { line: "\n", paragraph: "\n\n" }[preset];
    const shown = cut === undefined ? "⟨turn marker⟩" : visible(cut);
    if (kept && cut !== undefined) {
      line.append(h("span", {}, excerptBefore(text, off - cut.length)), h("mark", { class: "kept" }, shown));
      note = `preset ${preset}: the match is kept at the end of the answer (char ${off - cut.length}).`;
    } else {
      line.append(h("span", {}, excerptBefore(text, off)), h("del", {}, shown));
      note = `preset ${preset}: the match starts at char ${off}; it and everything after it are not returned.`;
    }
  } else {
    const stop = String(end.stop_reason ?? "");
    if (kept) {
      line.append(h("span", {}, excerptBefore(text, off - stop.length)), h("mark", { class: "kept" }, visible(stop)));
      note = `stop string ${JSON.stringify(stop)} kept at the end of the answer (include_stop_str_in_output).`;
    } else {
      line.append(h("span", {}, excerptBefore(text, off)), h("del", {}, visible(stop)));
      note = `stop string ${JSON.stringify(stop)} matched at char ${off}; it and anything after it are not returned.`;
    }
  }
  return [h("div", { class: "where" }, h("span", { class: "label" }, "cut"), line), h("p", { class: "note" }, note)];
}

// The longest tail of `text` made of >= `repeats` copies of one pattern (smallest pattern on ties):
// {start, period}, or null. The server reports the loop in tokens (detail: "period P repeated R
// times", token_index); this finds the same loop in characters from the text alone.
export function repeatingSpan(text, repeats) {
  const n = text.length;
  let best = null;
  for (let q = 1; q * repeats <= n; q++) {
    let ok = true;
    for (let i = n - (repeats - 1) * q; i < n && ok; i++) ok = text[i] === text[i - q];
    if (!ok) continue;
    let start = n - repeats * q;
    while (start > 0 && text[start - 1] === text[start - 1 + q]) start--;
    if (best === null || start < best.start) best = { start, period: q };
  }
  return best;
}

function loopView(end, ctx) {
  const m = /period (\d+) repeated (\d+) times/.exec(end.detail || "");
  const span = m ? repeatingSpan(ctx.text, Number(m[2])) : null;
  if (!span) return [h("p", { class: "note" }, "The repeating span could not be located in the text.")];
  const { start, period } = span;
  const text = ctx.text;
  const pattern = text.slice(text.length - period);
  const line = h("p", { class: "cut" }, h("span", {}, excerptBefore(text, start)),
    h("mark", { class: "loop" }, visible(text.slice(start))));
  const copies = ((text.length - start) / period).toFixed(1);
  return [h("div", { class: "where" }, h("span", { class: "label" }, "loop"), line),
    h("p", { class: "note" }, `pattern ${JSON.stringify(pattern)} (${m[1]} tokens, ${period} chars) ` +
      `repeats ${copies}× from char ${start} to the end; the detector stopped at token ${end.token_index}.`)];
}

function tokenBar(end, ctx) {
  const u = ctx.usage;
  if (!u) return [];
  const win = ctx.window || 0;
  const maxTok = ctx.body.max_tokens;
  const p = u.prompt_tokens, c = u.completion_tokens;
  const parts = [`${c} tokens`, maxTok ? `of max_tokens ${maxTok}` : "(max_tokens: rest of the window)"];
  if (win) parts.push(`· prompt ${p} + answer ${c} = ${p + c} of window ${win}`);
  if (end.token_index !== undefined && end.token_index >= 0) parts.push(`· last token #${end.token_index}`);
  const bar = h("div", { class: "tokens", title: "prompt | answer | rest of the window" });
  if (win) {
    const pct = (x) => `${Math.min(100, (100 * x) / win)}%`;
    bar.append(h("i", { class: "p", style: `width:${pct(p)}` }), h("i", { class: "c", style: `width:${pct(c)}` }));
    if (maxTok) bar.append(h("b", { class: "max", style: `left:${pct(p + maxTok)}`, title: "max_tokens" }));
  }
  return [bar, h("p", { class: "note" }, parts.join(" "))];
}

function systemView(end, ctx) {
  const n = ctx.text.length;
  switch (end.source) {
    case "client":
      return `You cancelled: the page aborted the stream after ${n} characters. The server sees the ` +
        "disconnect, aborts the request and frees its KV blocks (see running in the panel).";
    case "stream-error":
      return `The stream ended with an error event after ${n} characters: ${end.detail}`;
    case "http":
      return `HTTP ${end.status}${end.code ? ` ${end.code}` : ""}${end.param ? ` (param ${end.param})` : ""}: ` +
        `${end.detail}`;
    case "network":
      return `No answer from the server: ${end.detail}`;
    default:
      return end.reason === "timeout"
        ? `${n} characters came back before the deadline; finish_reason is "length": the text is cut, not complete.`
        : null;
  }
}

export function renderTermination(el, end, ctx) {
  const head = h("div", { class: "head" },
    h("span", { class: `badge layer-${end.layer}` }, end.reason),
    h("span", { class: "muted" }, LAYERS.includes(end.layer) ? `layer ${end.layer}` : "no layer: nothing was generated"),
    end.source === "server" ? h("span", { class: "muted" }, `finish_reason ${end.finish_reason ?? "null"}`) : null,
    ctx.timing ? h("span", { class: "muted timing" }, ctx.timing) : null);
  const body = [head, layerStrip(end.layer), h("p", { class: "why" }, WHY[end.reason] || "")];
  if (end.detail && end.source === "server") body.push(h("p", { class: "detail" }, h("code", {}, end.detail)));
  const sys = systemView(end, ctx);
  if (sys) body.push(h("p", { class: "note" }, sys));
  if (end.source === "server") {
    if (end.reason === "stop_string") body.push(...stopCut(end, ctx));
    if (end.reason === "repetition") body.push(...loopView(end, ctx));
    if (["max_tokens", "context_limit", "timeout"].includes(end.reason)) {
      body.push(h("div", { class: "where" }, h("span", { class: "label" }, "cut"),
        h("p", { class: "cut" }, h("span", {}, excerptBefore(ctx.text, ctx.text.length)),
          h("span", { class: "edge limit" }, "┃"), h("span", { class: "muted" }, ` cut after token #${end.token_index}`))));
    }
    if (end.reason === "eos" || end.reason === "stop_token") {
      const what = end.reason === "eos" ? "⟨eos⟩" : `⟨token ${end.stop_reason}⟩`;
      body.push(h("div", { class: "where" }, h("span", { class: "label" }, "end"),
        h("p", { class: "cut" }, h("span", {}, excerptBefore(ctx.text, ctx.text.length)), h("del", {}, what))));
    }
    body.push(...tokenBar(end, ctx));
  }
  el.className = `termination layer-${end.layer}`;
  el.replaceChildren(...body.filter(Boolean));
}
