// tablegen try-it page: talks to the server's REST API only (TF Serving's :predict, status
// and metadata, plus GET /v1/models and .../examples), so it works against any deployment.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { model: "", version: "", signatures: [], examples: [] };

async function getJson(path, options) {
  const response = await fetch(path, options);
  let body;
  try { body = await response.json(); } catch (e) { body = { error: `HTTP ${response.status}` }; }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function modelPath(suffix = "") {
  const version = state.version ? `/versions/${state.version}` : "";
  return `/v1/models/${encodeURIComponent(state.model)}${version}${suffix}`;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// --- the table editor -------------------------------------------------------------
function addRow(field = "", value = "") {
  const row = document.createElement("tr");
  for (const [name, text] of [["field", field], ["value", value]]) {
    const cell = document.createElement("td");
    const input = document.createElement("input");
    input.className = name;
    input.value = text;
    input.spellcheck = false;
    cell.appendChild(input);
    row.appendChild(cell);
  }
  const cell = document.createElement("td");
  const remove = document.createElement("button");
  remove.className = "remove";
  remove.type = "button";
  remove.title = "remove this row";
  remove.textContent = "\u00d7";
  remove.onclick = () => row.remove();
  cell.appendChild(remove);
  row.appendChild(cell);
  $("rows").tBodies[0].appendChild(row);
  return row;
}

function tableRows() {
  return [...$("rows").tBodies[0].rows].map((row) => ({
    field: row.querySelector(".field").value.trim(),
    value: row.querySelector(".value").value,
  })).filter((item) => item.field || item.value.trim());
}

function tableJson() {
  return JSON.stringify({ table: tableRows() });
}

function setTable(items) {
  $("rows").tBodies[0].replaceChildren();
  for (const item of items) addRow(String(item.field ?? ""), String(item.value ?? ""));
  if (!items.length) addRow();
}

function applyJsonl() {
  const line = $("jsonl").value.split("\n").map((l) => l.trim()).find((l) => l);
  try {
    const parsed = JSON.parse(line || "");
    if (!parsed || !Array.isArray(parsed.table)) throw new Error('expected {"table": [{"field": ..., "value": ...}, ...]}');
    setTable(parsed.table);
    showError("");
  } catch (error) {
    showError(`JSONL: ${error.message}`);
  }
}

// --- models, versions, examples --------------------------------------------------------
async function loadModels() {
  const { models } = await getJson("/v1/models");
  const select = $("model");
  select.replaceChildren(...models.map((m) => new Option(m.name, m.name)));
  const wanted = new URLSearchParams(location.hash.slice(1)).get("model");
  if (wanted && models.some((m) => m.name === wanted)) select.value = wanted;
  await selectModel(select.value);
}

async function selectModel(name) {
  state.model = name;
  state.version = "";
  const status = await getJson(modelPath());
  const versions = (status.model_version_status || []).filter((v) => v.state === "AVAILABLE");
  $("version").replaceChildren(new Option("latest", ""), ...versions.map((v) => new Option(v.version, v.version)));
  await selectVersion("");
}

async function selectVersion(version) {
  state.version = version;
  const metadata = await getJson(modelPath("/metadata"));
  state.signatures = Object.keys(metadata.metadata.signature_def.signature_def || {});
  $("signature-note").textContent = state.signatures.includes("explain") ? ""
    : "this model has no explain signature: text and score only";
  try {
    state.examples = (await getJson(modelPath("/examples"))).examples;
  } catch (error) {
    state.examples = [];  // another server: no examples endpoint
  }
  renderExamples();
}

function exampleLabel(items, index) {
  const name = items.find((item) => item.field === "name");
  const title = name ? name.value : items.map((item) => item.value).join(" ");
  return `${index + 1}. ${title.slice(0, 24)} (${items.length})`;
}

function renderExamples() {
  const box = $("examples");
  box.replaceChildren();
  state.examples.forEach((text, index) => {
    const items = JSON.parse(text).table || [];
    const button = document.createElement("button");
    button.type = "button";
    button.className = "example";
    button.textContent = exampleLabel(items, index);
    button.title = items.map((item) => `${item.field}: ${item.value}`).join("\n");
    button.onclick = () => { setTable(items); showError(""); };
    box.appendChild(button);
  });
}

// --- generate and show ------------------------------------------------------------------
async function generate() {
  const table = tableJson();
  const params = new URLSearchParams({ model: state.model, table });
  history.replaceState(null, "", `#${params}`);
  $("permalink").href = `#${params}`;
  showError("");
  const signature = state.signatures.includes("explain") ? "explain" : "serving_default";
  $("generate").disabled = true;
  try {
    const body = JSON.stringify({ signature_name: signature, inputs: { tables: [table] } });
    const { outputs } = await getJson(modelPath(":predict"), { method: "POST", body,
      headers: { "Content-Type": "application/json" } });
    render(outputs);
  } catch (error) {
    $("output").hidden = true;
    showError(error.message);
  } finally {
    $("generate").disabled = false;
  }
}

const first = (outputs, key, fallback) => (outputs[key] ? outputs[key][0] : fallback);

function render(outputs) {
  $("output").hidden = false;
  $("text").textContent = first(outputs, "text", "");
  $("score").textContent = `score ${Number(first(outputs, "score", 0)).toFixed(3)}`;
  const tokens = first(outputs, "tokens", []);
  const shown = tokens.map((t, i) => i).filter((i) => tokens[i] !== "");
  const sources = first(outputs, "source", []);
  const fields = first(outputs, "source_field", []);
  const records = sources.map((s, i) => i).filter((i) => sources[i] !== "");
  const label = (r) => (fields[r] ? `${fields[r]}: ${sources[r]}` : sources[r]);
  renderTokens(shown, tokens, first(outputs, "copied_from", []), first(outputs, "copy_probability", []), label);
  renderHeatmap(shown, tokens, records, first(outputs, "attention", []), label);
  renderSlots(first(outputs, "slot_attributes", []), first(outputs, "slot_errors", []));
  renderPlan(first(outputs, "plan", []), label);
  renderCandidates(outputs);
}

function highlight(record, on) {
  document.querySelectorAll(`[data-record="${record}"]`).forEach((el) => el.classList.toggle("hot", on));
  const rows = [...$("rows").tBodies[0].rows];
  // records are value tokens: light the table row whose value holds this record's text
  const text = (document.querySelector(`th[data-record="${record}"]`) || {}).dataset;
  if (!text) return;
  rows.forEach((row) => {
    const hit = row.querySelector(".field").value.trim() === text.field
      && row.querySelector(".value").value.split(/\s+/).includes(text.value);
    row.classList.toggle("hot", on && hit);
  });
}

function renderTokens(shown, tokens, copiedFrom, copyProbability, label) {
  const box = $("tokens");
  box.replaceChildren();
  for (const t of shown) {
    const span = document.createElement("span");
    span.className = "tok";
    span.textContent = tokens[t];
    const record = copiedFrom[t];
    if (record >= 0) {
      span.classList.add("copied");
      span.dataset.record = record;
      span.style.setProperty("--p", (0.35 + 0.65 * copyProbability[t]).toFixed(2));
      span.title = `copied from record ${record} (${label(record)}), p(copy) = ${copyProbability[t].toFixed(2)}`;
      span.onmouseenter = () => highlight(record, true);
      span.onmouseleave = () => highlight(record, false);
    } else if (copyProbability.length) {
      span.title = `generated, p(copy) = ${Number(copyProbability[t] || 0).toFixed(2)}`;
    }
    box.appendChild(span);
    box.appendChild(document.createTextNode(" "));
  }
}

function renderHeatmap(shown, tokens, records, attention, label) {
  const table = $("heatmap");
  table.replaceChildren();
  const width = attention.length && attention[0].length ? attention[0].length : 0;
  if (!width) {
    table.insertRow().insertCell().textContent = "this model family has no attention to show";
    return;
  }
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  const fields = {};
  for (const r of records) {
    const th = document.createElement("th");
    th.textContent = label(r);
    th.dataset.record = r;
    const [field, ...value] = label(r).split(": ");
    th.dataset.field = value.length ? field : "";
    th.dataset.value = value.length ? value.join(": ") : field;
    head.appendChild(th);
    fields[r] = th;
  }
  const body = table.createTBody();
  for (const t of shown) {
    const row = body.insertRow();
    const th = document.createElement("th");
    th.textContent = tokens[t];
    row.appendChild(th);
    const peak = Math.max(1e-9, ...records.map((r) => attention[t][r]));
    for (const r of records) {
      const cell = row.insertCell();
      const weight = attention[t][r];
      cell.className = "cell";
      cell.style.background = `rgba(214, 69, 61, ${(weight / peak).toFixed(3)})`;
      cell.title = `${tokens[t]} \u2192 ${label(r)}: ${weight.toFixed(3)}`;
    }
  }
}

function renderSlots(attributes, errors) {
  const box = $("slots");
  box.replaceChildren();
  document.querySelectorAll("#rows tr").forEach((row) => row.classList.remove("slot-error"));
  if (!attributes.length) return;
  const present = new Set(tableRows().map((item) => item.field.toLowerCase().replace(/[^0-9a-z]/g, "")));
  const title = document.createElement("strong");
  title.textContent = "slots: ";
  box.appendChild(title);
  attributes.forEach((attribute, i) => {
    const kind = errors[i];
    if (!kind && !present.has(attribute)) return;
    const badge = document.createElement("span");
    badge.className = `slot ${kind || "ok"}`;
    badge.textContent = kind ? `${attribute}: ${kind}` : attribute;
    box.appendChild(badge);
    if (kind === "missed" || kind === "wrong") {
      document.querySelectorAll("#rows tbody tr").forEach((row) => {
        const key = row.querySelector(".field").value.toLowerCase().replace(/[^0-9a-z]/g, "");
        if (key === attribute) row.classList.add("slot-error");
      });
    }
  });
}

function renderPlan(plan, label) {
  const steps = plan.filter((r) => r >= 0);
  $("plan").textContent = steps.length ? `content plan: ${steps.map(label).join(" \u2192 ")}` : "";
}

function renderCandidates(outputs) {
  const body = $("candidates").tBodies[0];
  body.replaceChildren();
  const texts = first(outputs, "candidates", [first(outputs, "text", "")]);
  const scores = first(outputs, "candidate_scores", [first(outputs, "score", 0)]);
  const errors = first(outputs, "candidate_slot_errors", []);
  const chosen = first(outputs, "chosen", 0);
  texts.forEach((text, k) => {
    if (!text) return;  // a dead beam
    const row = body.insertRow();
    if (k === chosen) row.className = "chosen";
    const values = [k === chosen ? `${k + 1} \u2713` : `${k + 1}`, text, Number(scores[k]).toFixed(3),
      errors.length ? errors[k] : ""];
    values.forEach((value, i) => {
      const cell = row.insertCell();
      cell.textContent = value;
      if (i !== 1) cell.className = "num";
    });
  });
}

// --- start ------------------------------------------------------------------------------
function tableFromHash() {
  const table = new URLSearchParams(location.hash.slice(1)).get("table");
  if (!table) return false;
  try {
    setTable(JSON.parse(table).table || []);
    return true;
  } catch (error) {
    showError(`permalink: ${error.message}`);
    return false;
  }
}

async function start() {
  $("add-row").onclick = () => addRow().querySelector("input").focus();
  $("apply-jsonl").onclick = applyJsonl;
  $("generate").onclick = generate;
  $("model").onchange = (e) => selectModel(e.target.value).catch((err) => showError(err.message));
  $("version").onchange = (e) => selectVersion(e.target.value).catch((err) => showError(err.message));
  const fromLink = tableFromHash();
  try {
    await loadModels();
  } catch (error) {
    showError(`cannot list the served models: ${error.message}`);
  }
  if (!fromLink) setTable(state.examples.length ? JSON.parse(state.examples[0]).table : [
    { field: "name", value: "The Vaults" }, { field: "eatType", value: "pub" }]);
  if (fromLink) generate();
  document.body.dataset.ready = "true";
}

start();
