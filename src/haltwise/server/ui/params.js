// The parameters panel -> request body fields. Only fields the user set are sent, so the server's
// defaults (SamplingParams) apply otherwise. Throws Error with a message for values it cannot send.

// Stop strings: one per line, taken verbatim; a single line with commas is split at them (items
// trimmed); a single line without commas is one stop string, verbatim (so " " is a space).
// Escapes: \n \t \, \\ . Empty items are dropped.
export function parseStops(text) {
  const raw = text.replace(/\r/g, "");
  if (raw === "") return [];
  const items = raw.includes("\n") ? raw.split("\n") : /(^|[^\\]),/.test(raw) ? splitCommas(raw) : [raw];
  return items.map(unescapeStop).filter((s) => s.length > 0);
}

function splitCommas(line) {
  const parts = [];
  let cur = "";
  for (let i = 0; i < line.length; i++) {
    if (line[i] === "\\" && i + 1 < line.length) { cur += line[i] + line[i + 1]; i++; }
    else if (line[i] === ",") { parts.push(cur); cur = ""; }
    else cur += line[i];
  }
  parts.push(cur);
  return parts.map((p) => p.trim());
}

function unescapeStop(s) {
  return s.replace(/\\(.)/g, (_, c) => ({ n: "\n", t: "\t" })[c] ?? c);
}

function num(form, name, integer) {
  const v = form.elements[name].value.trim();
  if (v === "") return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n))) throw new Error(`${name}: not a number: ${v}`);
  return n;
}

export function readParams(form) {
  const body = {};
  for (const [name, integer] of [["temperature", false], ["top_p", false], ["max_tokens", true],
    ["min_tokens", true], ["seed", true], ["timeout", false]]) {
    const v = num(form, name, integer);
    if (v !== undefined) body[name] = v;
  }
  const stop = parseStops(form.elements.stop.value);
  if (stop.length) body.stop = stop;
  const presets = [...form.querySelectorAll("input[name=preset]:checked")].map((e) => e.value);
  if (presets.length) body.stop_presets = presets;
  if (form.elements.ignore_eos.checked) body.ignore_eos = true;
  if (form.elements.include_stop_str_in_output.checked) body.include_stop_str_in_output = true;
  if (!form.elements.loops.checked) body.repetition_detection = { enabled: false };
  const rf = form.elements.response_format.value;
  if (rf === "json_schema") {
    let schema;
    try { schema = JSON.parse(form.elements.schema.value); } catch (e) { throw new Error(`schema: ${e.message}`); }
    body.response_format = { type: "json_schema", json_schema: { name: "playground", schema } };
  } else if (rf) {
    body.response_format = { type: rf };
  }
  return body;
}
