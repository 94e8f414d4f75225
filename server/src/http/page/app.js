// lexlip's search page: plain JS over the JSON API of the server that serves it.
// State that can be shared lives in the URL (?c=collection&q=text&k=…); the query image does not.
"use strict";

const $ = (id) => document.getElementById(id);
const PARAMS = ["c", "q", "k", "t", "m", "x", "f"];
let collections = [];
let queryImage = null; // base64 of the query image, when one is chosen
// Whether the user (or the address) chose what to find; if not, a text query finds images and
// an image query finds texts, when the collection holds them (otherwise everything).
let targetChosen = false;
// What the address asked for that the page could not do (an unknown collection, a mode the
// collection lacks): said above the results until the user picks another collection.
let pageNotice = "";
// The mode the address asked for.
let requestedMode = "";

// ---- the API ---------------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls the API; resolves to the JSON body, or rejects with an ApiFailure that says why. */
async function api(path, body) {
  const headers = {};
  const key = $("api-key").value.trim();
  if (key) headers["Authorization"] = "Bearer " + key;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiFailure(0, "network", "Cannot reach the lexlip server (is it running?).");
  }
  let json = null;
  try {
    json = await response.json();
  } catch (e) {
    json = null;
  }
  if (!response.ok) {
    const err = (json && json.error) || {};
    throw new ApiFailure(response.status, err.code || "error", explainError(response.status, err.message));
  }
  return json;
}

/** Turns an HTTP status and the server's message into a sentence for the user. */
function explainError(status, message) {
  const said = message || "no details";
  if (status === 401) return "This server needs an API key: enter it under “API key”. (" + said + ")";
  if (status === 503) return "The server is busy or a request took too long; try again in a moment. (" + said + ")";
  if (status === 413) return "That is too large for this server (" + said + ").";
  return said;
}

function showMessage(text, kind) {
  const box = $("message");
  box.textContent = text;
  box.className = kind || "error";
  box.hidden = !text;
}

// ---- collections -----------------------------------------------------------------------

async function loadCollections(wanted) {
  const select = $("collection");
  pageNotice = "";
  try {
    collections = (await api("/v1/collections")).collections || [];
  } catch (e) {
    showMessage(e.message);
    return false;
  }
  select.replaceChildren();
  for (const c of collections) {
    const option = document.createElement("option");
    option.value = c.name;
    option.textContent = `${c.name} (${c.images} images, ${c.texts} texts)`;
    select.append(option);
  }
  if (collections.length === 0) {
    showMessage("This server has no collections yet: index one with `lexlip index`, add documents over the API, or run `lexlip demo`.", "info");
    return false;
  }
  if (wanted && collections.some((c) => c.name === wanted)) select.value = wanted;
  else if (wanted) {
    pageNotice =
      `There is no collection “${wanted}”; showing “${select.value}”. ` +
      `The collections are: ${collections.map((c) => c.name).join(", ")}.`;
  }
  collectionChanged();
  showMessage(pageNotice, "info");
  return true;
}

/** What a query finds unless the user chose: the other modality, when the collection holds it. */
function defaultTarget() {
  const c = currentCollection();
  const wanted = queryImage ? "text" : "image";
  const held = c ? (wanted === "image" ? c.images : c.texts) : 1;
  return held > 0 ? wanted : "";
}

function currentCollection() {
  return collections.find((c) => c.name === $("collection").value);
}

/** Dense and hybrid search only make sense on collections that keep dense vectors. */
function collectionChanged() {
  const c = currentCollection();
  const dense = !!(c && c.dense_dim);
  for (const option of $("mode").options) {
    if (option.value !== "sparse") option.disabled = !dense;
  }
  if (!dense && $("mode").value !== "sparse") {
    if (requestedMode && requestedMode !== "sparse") {
      pageNotice +=
        (pageNotice ? " " : "") +
        `Mode “${requestedMode}” needs dense vectors, which “${c ? c.name : ""}” does not keep: ` +
        "searching the sparse index.";
    }
    $("mode").value = "sparse";
  }
  requestedMode = "";
  if (!targetChosen) $("target").value = defaultTarget();
}

// ---- the query -------------------------------------------------------------------------

function parseFilter(text) {
  const metadata = {};
  for (const part of text.split(",")) {
    const p = part.trim();
    if (!p) continue;
    const eq = p.indexOf("=");
    if (eq <= 0) throw new Error(`Filter “${p}” is not key=value.`);
    const value = p.slice(eq + 1).trim();
    // Numbers and booleans match as JSON values; anything else as a string.
    let parsed = value;
    if (/^(true|false|-?\d+(\.\d+)?)$/.test(value)) parsed = JSON.parse(value);
    metadata[p.slice(0, eq).trim()] = parsed;
  }
  return metadata;
}

function writeUrl() {
  const url = new URL(location.href);
  const values = {
    c: $("collection").value,
    q: queryImage ? "" : $("q").value.trim(),
    k: $("k").value,
    t: targetChosen ? $("target").value : "",
    m: $("mode").value,
    x: $("exact").value,
    f: $("filter").value.trim(),
  };
  for (const p of PARAMS) {
    // A chosen target is kept even when it is "all" (the empty value).
    if (values[p] || (p === "t" && targetChosen)) url.searchParams.set(p, values[p]);
    else url.searchParams.delete(p);
  }
  history.replaceState(null, "", url);
}

function readUrl() {
  const s = new URL(location.href).searchParams;
  if (s.has("q")) $("q").value = s.get("q");
  if (s.has("k")) $("k").value = s.get("k");
  if (s.has("t")) {
    $("target").value = s.get("t");
    targetChosen = true;
  }
  if (s.has("m")) {
    requestedMode = s.get("m");
    $("mode").value = requestedMode;
  }
  if (s.has("x")) $("exact").value = s.get("x");
  if (s.has("f")) $("filter").value = s.get("f");
  return s.get("c");
}

async function search() {
  const collection = $("collection").value;
  const text = $("q").value.trim();
  if (!collection) {
    showMessage("Pick a collection first (none is loaded).");
    return;
  }
  if (!text && !queryImage) {
    showMessage("Type a query or choose an image.", "info");
    return;
  }
  const c = currentCollection();
  if (c && c.documents === 0) {
    showMessage(`Collection “${collection}” is empty: add documents first.`, "info");
    return;
  }
  let filter;
  try {
    filter = parseFilter($("filter").value);
  } catch (e) {
    showMessage(e.message);
    return;
  }
  const k = Math.max(1, Math.min(1000, parseInt($("k").value, 10) || 20));
  const body = {
    query: queryImage ? { image: queryImage } : { text },
    k,
    mode: $("mode").value,
    explain: true,
    filter: Object.keys(filter).length ? { metadata: filter } : {},
  };
  if ($("target").value) body.target = $("target").value;
  // The server's approximate default: the query's lightest terms left out of the bounds.
  if ($("exact").value === "approx") body.exact = false;
  writeUrl();
  showMessage(pageNotice, "info");
  $("status").textContent = "Searching…";
  const started = performance.now();
  try {
    const response = await api(`/v1/collections/${encodeURIComponent(collection)}/search`, body);
    render(collection, response, performance.now() - started, body);
  } catch (e) {
    $("status").textContent = "";
    $("results").replaceChildren();
    $("query-cloud-box").hidden = true;
    showMessage(e.message);
  }
}

// ---- results ---------------------------------------------------------------------------

function render(collection, response, roundTripMs, request) {
  const hits = response.hits || [];
  const path = response.path === "dense_fallback" ? "dense (the sparse index matched too few)" : response.path;
  $("status").textContent =
    `${hits.length} hit${hits.length === 1 ? "" : "s"} · search ${response.took_ms.toFixed(1)} ms on the server ` +
    `(${Math.round(roundTripMs)} ms round trip) · ${path} index`;
  const terms = Object.entries(response.query_terms || {});
  $("query-cloud-box").hidden = terms.length === 0;
  drawCloud($("query-cloud"), terms, (t, w) => `${t}: impact ${w}`);
  const list = $("results");
  // The server judges the list by its first hit against the model's calibration: every hit
  // is weak or none is, so the greying never contradicts the ranking shown.
  const weak = response.weak === true;
  list.replaceChildren(...hits.map((hit, i) => card(collection, hit, i + 1, weak)));
  if (hits.length > 0 && weak) {
    const note = document.createElement("li");
    note.className = "empty weak-note";
    note.textContent =
      "Nothing here matches this query well: even the best hit shares little with it " +
      `(match ${percent(hits[0].match_strength)}). The model may not know these words or this kind of picture.`;
    list.prepend(note);
  }
  if (hits.length === 0) {
    const empty = document.createElement("li");
    empty.className = "empty";
    empty.textContent = emptyResult(request);
    list.append(empty);
  }
}

/** Why a search found nothing: no shared term, among the documents the filters left. */
function emptyResult(request) {
  const filters = [];
  if (request && request.target) filters.push(`Find: ${request.target}s only`);
  const metadata = request && request.filter && request.filter.metadata;
  if (metadata) {
    filters.push("metadata " + Object.entries(metadata).map(([k, v]) => `${k}=${v}`).join(", "));
  }
  if (filters.length === 0) return "No document shares a term with this query.";
  return (
    `No document left by the filters (${filters.join("; ")}) shares a term with this query: ` +
    "loosen them (Find: all, an empty filter) to search every document."
  );
}

function card(collection, hit, rank, weak) {
  const li = document.createElement("li");
  li.className = "card " + hit.modality;
  if (hit.modality === "image") {
    const img = document.createElement("img");
    img.loading = "lazy";
    img.alt = hit.text || hit.id;
    img.src = `/v1/collections/${encodeURIComponent(collection)}/documents/${encodeURIComponent(hit.id)}/thumbnail`;
    img.addEventListener("error", () => {
      const none = document.createElement("div");
      none.className = "no-thumb";
      none.textContent = hit.uri || "no thumbnail stored";
      img.replaceWith(none);
    });
    li.append(img);
  }
  const body = document.createElement("div");
  body.className = "body";
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = hit.text || hit.uri || hit.id;
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = `#${rank} · ${hit.id} · score ${formatScore(hit.score)}`;
  if (hit.match_strength !== undefined) {
    meta.textContent += ` · match ${percent(hit.match_strength)}`;
    meta.title = "match: the score as a share of the query's score against itself (dense: cosine similarity)";
  }
  body.append(title, meta);
  if (weak) {
    li.classList.add("weak");
    const badge = document.createElement("div");
    badge.className = "badge";
    badge.textContent = "weak match";
    body.append(badge);
  }
  if (hit.explain && hit.explain.length) {
    const total = hit.explain.reduce((s, t) => s + t.contribution, 0) || 1;
    const terms = document.createElement("ul");
    terms.className = "terms";
    terms.setAttribute("aria-label", "matched terms");
    for (const t of hit.explain.slice(0, 8)) {
      const chip = document.createElement("li");
      chip.textContent = `${t.term} ${Math.round((100 * t.contribution) / total)}%`;
      chip.title = `${t.term}: query ${t.query_impact} × document ${t.doc_impact} = ${t.contribution}`;
      terms.append(chip);
    }
    body.append(terms);
  }
  li.append(body);
  return li;
}

function percent(x) {
  return `${Math.round(100 * x)} %`;
}

function formatScore(score) {
  return Number.isInteger(score) ? String(score) : score.toFixed(4);
}

/** A word cloud: the 48 heaviest terms sized by weight (an image lexicon has hundreds). */
function drawCloud(box, entries, describe) {
  const sorted = entries.slice().sort((a, b) => b[1] - a[1]).slice(0, 48);
  const max = sorted.length ? sorted[0][1] : 1;
  box.replaceChildren(
    ...sorted.map(([term, weight]) => {
      const span = document.createElement("span");
      span.textContent = term;
      span.title = describe(term, weight);
      const r = max > 0 ? weight / max : 0;
      span.style.fontSize = (0.75 + 1.75 * Math.sqrt(r)).toFixed(2) + "em";
      span.style.opacity = (0.45 + 0.55 * r).toFixed(2);
      return span;
    })
  );
}

// ---- the query image -------------------------------------------------------------------

function readImage(file) {
  return new Promise((resolve, reject) => {
    if (!file || !file.type.startsWith("image/")) {
      reject(new Error("That is not an image file."));
      return;
    }
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
    reader.onerror = () => reject(new Error("Cannot read that file."));
    reader.readAsDataURL(file);
  });
}

async function setQueryImage(file) {
  try {
    queryImage = await readImage(file);
  } catch (e) {
    showMessage(e.message);
    return;
  }
  const preview = $("query-image");
  if (preview.src.startsWith("blob:")) URL.revokeObjectURL(preview.src);
  preview.src = URL.createObjectURL(file);
  $("drop-hint").hidden = true;
  $("drop-preview").hidden = false;
  // An image usually looks for texts (image→text); keep the target if the user chose one.
  if (!targetChosen) $("target").value = defaultTarget();
  search();
}

function clearQueryImage() {
  queryImage = null;
  $("file").value = "";
  $("drop-hint").hidden = false;
  $("drop-preview").hidden = true;
  if (!targetChosen) $("target").value = defaultTarget();
}

// ---- what the model sees ---------------------------------------------------------------

async function showLexicon(event) {
  event.preventDefault();
  const file = $("lex-file").files[0];
  const text = $("lex-text").value.trim();
  const body = {};
  try {
    if (file) body.image = await readImage(file);
    else if (text) body.text = text;
    else throw new Error("Type a text or choose an image.");
  } catch (e) {
    $("lex-status").textContent = e.message;
    return;
  }
  if ($("collection").value) body.collection = $("collection").value;
  const img = $("lex-image");
  img.hidden = !file;
  if (file) img.src = URL.createObjectURL(file);
  $("lex-status").textContent = "Encoding…";
  try {
    const r = await api("/v1/encode", body);
    // Heaviest first: the table shows the top 50 (JSON objects come back in key order).
    const terms = Object.entries(r.terms || {}).sort((a, b) => b[1] - a[1]);
    $("lex-status").textContent =
      `${terms.length} non-zero terms` + (file ? " for the image" : ` for “${text}”`) + " (sizes follow the weights).";
    drawCloud($("lex-cloud"), terms, (t, w) => `${t}: weight ${w.toFixed(3)}`);
    const rows = terms.slice(0, 50).map(([t, w]) => {
      const tr = document.createElement("tr");
      for (const v of [t, w.toFixed(3), (r.impacts || {})[t] ?? 0]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.append(td);
      }
      return tr;
    });
    $("lex-table").tBodies[0].replaceChildren(...rows);
    $("lex-table").hidden = rows.length === 0;
  } catch (e) {
    $("lex-status").textContent = e.message;
    $("lex-cloud").replaceChildren();
    $("lex-table").hidden = true;
  }
}

// ---- wiring ----------------------------------------------------------------------------

function selectTab(name) {
  const views = { search: [$("tab-search"), $("view-search")], lexicon: [$("tab-lexicon"), $("view-lexicon")] };
  for (const [view, [tab, panel]] of Object.entries(views)) {
    tab.setAttribute("aria-selected", String(view === name));
    panel.hidden = view !== name;
  }
}

function wire() {
  $("search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    if ($("q").value.trim()) clearQueryImage();
    search();
  });
  $("collection").addEventListener("change", () => {
    pageNotice = "";
    showMessage("");
    collectionChanged();
    if ($("q").value.trim() || queryImage) search();
  });
  $("target").addEventListener("change", () => {
    targetChosen = true;
  });
  for (const id of ["target", "mode", "exact"]) {
    $(id).addEventListener("change", () => {
      if ($("q").value.trim() || queryImage) search();
    });
  }
  $("file").addEventListener("change", () => {
    if ($("file").files[0]) setQueryImage($("file").files[0]);
  });
  $("clear-image").addEventListener("click", clearQueryImage);
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    const file = e.dataTransfer && e.dataTransfer.files[0];
    if (file) setQueryImage(file);
  });
  document.addEventListener("paste", (e) => {
    const item = [...((e.clipboardData && e.clipboardData.items) || [])].find((i) => i.type.startsWith("image/"));
    if (item) {
      e.preventDefault();
      selectTab("search");
      setQueryImage(item.getAsFile());
    }
  });
  document.addEventListener("keydown", (e) => {
    const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName);
    if (e.key === "/" && !typing) {
      e.preventDefault();
      selectTab("search");
      $("q").focus();
    } else if (e.key === "Escape" && queryImage) {
      clearQueryImage();
    }
  });
  $("tab-search").addEventListener("click", () => selectTab("search"));
  $("tab-lexicon").addEventListener("click", () => selectTab("lexicon"));
  $("lexicon-form").addEventListener("submit", showLexicon);
  const key = $("api-key");
  key.value = sessionStorage.getItem("lexlip-api-key") || "";
  key.addEventListener("change", () => {
    sessionStorage.setItem("lexlip-api-key", key.value);
    loadCollections($("collection").value);
  });
}

/** Says which model encodes the queries and what it knows (its `lexlip.json` card). */
async function showModel() {
  let ready;
  try {
    ready = await api("/readyz");
  } catch (e) {
    return;
  }
  const model = ready && ready.models && ready.models.model;
  if (!model || !model.name) return;
  const box = $("model-card");
  box.replaceChildren();
  const name = document.createElement("strong");
  name.textContent = model.name;
  box.append("Model: ", name);
  if (model.card) box.append(" — " + model.card);
  if (model.readme) {
    const link = document.createElement("a");
    link.href = model.readme;
    link.textContent = "how it was made";
    link.target = "_blank";
    box.append(" (", link, ")");
  }
  box.hidden = false;
}

async function start() {
  wire();
  showModel();
  const wanted = readUrl();
  if ((await loadCollections(wanted)) && $("q").value.trim()) search();
}

start();
