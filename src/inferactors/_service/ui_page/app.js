// The supervisor's web page (docs/web-page.md). Plain JavaScript, no library, nothing
// fetched but from this page's own origin. Live through server-sent events read with
// fetch (EventSource cannot send the Authorization header); the page never polls.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "inferactors-token";
const MAX_LOG_LINES = 2000; // lines (not batches) the log view holds; older ones go
const AT_BOTTOM_PX = 24; // how near the end counts as "at the bottom" (then it follows)
const MAX_TIMELINE = 200;
const RETRY_FIRST_MS = 500; // the first wait before connecting again; doubles to RETRY_MAX_MS
const RETRY_MAX_MS = 10000;
const SVG = "http://www.w3.org/2000/svg";

const page = {
  rows: new Map(), // name -> row, as the last "rows" event gave it
  order: [],
  selected: null,
  series: null, // the selected instance's series (plots)
  lastFailure: null, // the selected instance's last failed exit, dated (its last words)
  windowS: 3600,
  logAbort: null,
  busy: false,
};

// ---- the token ------------------------------------------------------------------------

function takeToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const given = fragment.get("token");
  if (given) {
    sessionStorage.setItem(TOKEN_KEY, given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function authorized(headers = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { ...headers, Authorization: `Bearer ${token}` } : headers;
}

function askToken(why) {
  $("login").hidden = false;
  $("login-why").textContent = why || "";
  $("token").focus();
}

class Refused extends Error {}

// ---- server-sent events over fetch ----------------------------------------------------

async function readEvents(path, handlers, signal) {
  const reply = await fetch(path, { headers: authorized(), signal, cache: "no-store" });
  if (reply.status === 401) throw new Refused("the token was refused");
  if (!reply.ok) throw new Error(`${path}: HTTP ${reply.status}`);
  const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trimStart();
      }
      const handle = handlers[name];
      if (handle && data) handle(JSON.parse(data));
    }
  }
}

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

async function live() {
  let delay = RETRY_FIRST_MS;
  for (;;) {
    setConnection("connecting");
    let connected = false;
    const onRowsLive = (data) => {
      connected = true;
      onRows(data);
    };
    try {
      await readEvents("/ui/api/stream", { rows: onRowsLive, changes: onChanges, event: onEvent, sample: onSample });
      setConnection("ended", "the supervisor stopped; waiting for it");
    } catch (error) {
      if (error instanceof Refused) {
        setConnection("refused", "no token");
        askToken(error.message);
        return;
      }
      setConnection("lost", "not connected; retrying");
    }
    if (connected) delay = RETRY_FIRST_MS; // a good connection: start the backoff again
    page.retryMs = delay;
    await sleep(delay);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
}

function setConnection(state, words) {
  const shown = $("connection");
  shown.dataset.state = state;
  shown.textContent = words || (state === "live" ? "live" : state);
  $("reload").disabled = state !== "live";
}

// ---- words ----------------------------------------------------------------------------

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const whole = Math.floor(seconds);
  if (whole < 60) return `${whole}s`;
  if (whole < 3600) return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, "0")}s`;
  return `${Math.floor(whole / 3600)}h${String(Math.floor((whole % 3600) / 60)).padStart(2, "0")}m`;
}

function size(bytes) {
  if (bytes === null || bytes === undefined) return "-";
  for (const [unit, name] of [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"]]) {
    if (Math.abs(bytes) >= unit) return `${(bytes / unit).toFixed(1)} ${name}`;
  }
  return `${bytes} bytes`;
}

function seconds(value) {
  if (value === null || value === undefined) return "-";
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(2)} s`;
}

function percent(value) {
  return value === null || value === undefined ? "-" : `${value.toFixed(0)}%`;
}

function dated(unixSeconds) {
  const at = new Date(unixSeconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  const day = `${at.getFullYear()}-${two(at.getMonth() + 1)}-${two(at.getDate())}`;
  return `${day} ${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`;
}

function clock(unixSeconds) {
  const at = new Date(unixSeconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  const ms = String(at.getMilliseconds()).padStart(3, "0");
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}.${ms}`;
}

function element(tag, attributes = {}, text = null) {
  const made = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) made.setAttribute(key, value);
  if (text !== null) made.textContent = text;
  return made;
}

// ---- the rows -------------------------------------------------------------------------

function onRows(data) {
  setConnection("live");
  const now = performance.now();
  for (const row of data.rows) row.at = now;
  page.rows = new Map(data.rows.map((row) => [row.name, row]));
  page.order = data.rows.map((row) => row.name);
  renderRows();
  renderDoor(data.door);
  if (page.selected && page.rows.has(page.selected)) renderPanelHead(page.rows.get(page.selected));
}

// The rows that changed since the last table (whole), and every name in order when the
// names or their order changed (null otherwise).
function onChanges(data) {
  const now = performance.now();
  for (const row of data.rows) {
    row.at = now;
    page.rows.set(row.name, row);
  }
  if (data.order) {
    page.order = data.order;
    const named = new Set(data.order);
    for (const name of [...page.rows.keys()]) if (!named.has(name)) page.rows.delete(name);
    renderRows();
  } else {
    renderRows(new Set(data.rows.map((row) => row.name)));
  }
  renderDoor(data.door);
  if (page.selected && page.rows.has(page.selected)) renderPanelHead(page.rows.get(page.selected));
}

function renderRows(only) {
  const body = $("instances").tBodies[0];
  if (only) {
    for (const tr of body.rows) if (only.has(tr.dataset.name)) fillRow(tr, page.rows.get(tr.dataset.name));
    return;
  }
  const kept = new Map([...body.rows].map((tr) => [tr.dataset.name, tr]));
  page.order.forEach((name, index) => {
    let tr = kept.get(name);
    if (!tr) tr = newRow(name);
    kept.delete(name);
    fillRow(tr, page.rows.get(name));
    if (body.rows[index] !== tr) body.insertBefore(tr, body.rows[index] || null);
  });
  for (const gone of kept.values()) gone.remove();
  $("empty").hidden = page.order.length > 0;
}

const CELLS = ["name", "state", "endpoint", "model", "pid", "uptime", "restarts", "ttft",
  "memory", "cpu", "detail"];

function newRow(name) {
  const tr = element("tr", { "data-name": name });
  for (const cell of CELLS) tr.append(element("td", { "data-cell": cell }));
  const name_ = tr.querySelector('[data-cell="name"]');
  name_.append(element("button", { type: "button", class: "link", "data-open": name }, name));
  const actions = element("td", { class: "actions" });
  for (const verb of ["start", "stop", "restart"]) {
    const button = element("button", { type: "button", "data-verb": verb, "data-name": name },
      verb[0].toUpperCase() + verb.slice(1));
    actions.append(button);
  }
  tr.append(actions);
  return tr;
}

function fillRow(tr, row) {
  const set = (cell, text) => {
    const td = tr.querySelector(`[data-cell="${cell}"]`);
    if (td.textContent !== text) td.textContent = text;
  };
  const state = tr.querySelector('[data-cell="state"]');
  let badge = state.firstElementChild;
  if (!badge) state.append((badge = element("span")));
  badge.className = `state state-${row.state}`;
  badge.textContent = row.state;
  tr.dataset.state = row.state;
  set("endpoint", row.endpoint || "-");
  set("model", row.model || "-");
  set("pid", row.pid === null ? "-" : String(row.pid));
  set("uptime", duration(uptimeOf(row)));
  set("restarts", String(row.restarts));
  set("ttft", seconds(row.ttft_s));
  set("memory", size(row.rss_bytes));
  set("cpu", percent(row.cpu_percent));
  set("detail", row.detail);
  tr.classList.toggle("selected", row.name === page.selected);
}

function uptimeOf(row) {
  if (row.uptime_s === null || row.pid === null) return null;
  return row.uptime_s + (performance.now() - row.at) / 1000;
}

function tickUptimes() {
  for (const tr of $("instances").tBodies[0].rows) {
    const row = page.rows.get(tr.dataset.name);
    if (row) tr.querySelector('[data-cell="uptime"]').textContent = duration(uptimeOf(row));
  }
}

function renderDoor(door) {
  $("door").hidden = !door;
  if (!door) return;
  const budget = door.budget_bytes;
  const share = budget ? Math.min(door.resident_bytes / budget, 1) : 0;
  $("door-bar").style.width = `${(share * 100).toFixed(1)}%`;
  const against = budget ? ` of ${size(budget)} budget` : "";
  $("door-words").textContent = `resident ${size(door.resident_bytes)}${against}; ` +
    `${door.in_flight} in flight, ${door.queued} queued`;
}

// ---- events and samples ---------------------------------------------------------------

function onEvent(item) {
  if (item.type === "SupervisorOverloaded" || item.type === "SupervisorCaughtUp") {
    $("overload").hidden = item.type === "SupervisorCaughtUp";
    $("overload").textContent = item.words;
  }
  if (!page.selected || item.instance !== page.selected) return;
  addTimeline(item, true);
  if (item.type === "ProcessExited" && item.failed) {
    page.lastFailure = item;
    renderLastWords(page.rows.get(page.selected));
  }
  if (!page.series) return;
  if (item.type === "DeepHealthPassed") page.series.ttft.push([item.at, item.data.ttft_s]);
  if (item.type === "RestartScheduled") page.series.restarts.push(item.at);
  drawPlots();
}

function onSample(samples) {
  const latest = page.selected && samples[page.selected];
  if (!latest || !page.series) return;
  const series = page.series;
  if (latest.probe) {
    const last = series.probe[series.probe.length - 1];
    if (last && last[0] === latest.probe[0]) series.probe[series.probe.length - 1] = latest.probe;
    else series.probe.push(latest.probe);
  }
  const newer = (points, point) => point && (!points.length || points[points.length - 1][0] < point[0]);
  if (newer(series.memory, latest.memory)) series.memory.push(latest.memory);
  if (newer(series.cpu, latest.cpu)) series.cpu.push(latest.cpu);
  drawPlots();
}

// ---- one instance's panel -------------------------------------------------------------

async function select(name) {
  page.selected = name;
  page.series = null;
  page.lastFailure = null;
  $("panel").hidden = false;
  $("timeline").replaceChildren();
  $("log").textContent = "";
  $("log-note").hidden = true;
  renderRows();
  renderPanelHead(page.rows.get(name));
  followLog(name);
  const reply = await fetch(`/ui/api/instances/${encodeURIComponent(name)}`,
    { headers: authorized(), cache: "no-store" });
  if (!reply.ok || page.selected !== name) return;
  const detail = await reply.json();
  page.series = detail.series;
  page.windowS = detail.window_s;
  page.lastFailure = page.lastFailure || detail.last_failure;
  renderLastWords(page.rows.get(name));
  for (const item of detail.timeline) addTimeline(item, true);
  drawPlots();
}

function closePanel() {
  page.selected = null;
  page.series = null;
  if (page.logAbort) page.logAbort.abort();
  $("panel").hidden = true;
  renderRows();
}

function renderPanelHead(row) {
  if (!row) return;
  $("panel-name").textContent = row.name;
  const state = $("panel-state");
  state.className = `state state-${row.state}`;
  state.textContent = row.state;
  $("panel-facts").textContent = [row.flavor, row.mode, row.endpoint, row.model]
    .filter(Boolean).join(" · ");
  renderLastWords(row);
}

function renderLastWords(row) {
  const failure = page.lastFailure;
  const refused = row && row.refused;
  $("last-words").hidden = !(refused || failure);
  if (refused) {
    $("last-words-title").textContent = "Refused at its load or start";
    $("diagnosis").textContent = refused;
    $("last-lines").textContent = "";
  } else if (failure) {
    const diagnosis = failure.data.diagnosis;
    $("last-words-title").textContent =
      `The server's last words, ${dated(failure.at)}: ${failure.words.split("\n")[0]}`;
    $("diagnosis").textContent = diagnosis ? `${diagnosis.kind}: ${diagnosis.line}` : "";
    $("last-lines").textContent = failure.data.last_lines.join("\n");
  }
}

function addTimeline(item, newestFirst) {
  const list = $("timeline");
  const entry = element("li", { class: item.failed ? "failed" : "" });
  entry.append(element("time", {}, dated(item.at)), element("span", { class: "words" }, item.words));
  if (newestFirst) list.prepend(entry);
  else list.append(entry);
  while (list.children.length > MAX_TIMELINE) list.lastElementChild.remove();
}

// The log view: lines wait in `pending` and are drawn once per animation frame, as one
// text node per frame; the view holds at most MAX_LOG_LINES lines (the oldest nodes go,
// or the oldest lines of the first one), so a chatty server costs a bounded view; it
// scrolls to the end only when "follow" is on and the reader was already at the end.
function newLogView(log) {
  const nodes = []; // [text node, its line count], oldest first
  let held = 0; // lines in the nodes
  let pending = [];
  let drawing = false;
  let stopped = false;
  const draw = () => {
    drawing = false;
    if (stopped || !pending.length) return;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight <= AT_BOTTOM_PX;
    const node = document.createTextNode(pending.join("\n") + "\n");
    nodes.push([node, pending.length]);
    held += pending.length;
    pending = [];
    log.append(node);
    while (held > MAX_LOG_LINES) {
      const [first, count] = nodes[0];
      const excess = held - MAX_LOG_LINES;
      if (count <= excess) {
        first.remove();
        nodes.shift();
        held -= count;
      } else {
        let cut = 0;
        for (let left = excess; left > 0; left--) cut = first.data.indexOf("\n", cut) + 1;
        first.deleteData(0, cut);
        nodes[0][1] = count - excess;
        held -= excess;
      }
    }
    if ($("follow").checked && atBottom) log.scrollTop = log.scrollHeight;
  };
  return {
    stop() {
      stopped = true;
      pending = [];
    },
    add(texts) {
      pending.push(...texts);
      if (pending.length > MAX_LOG_LINES) pending = pending.slice(-MAX_LOG_LINES);
      if (!drawing) {
        drawing = true;
        requestAnimationFrame(draw);
      }
    },
  };
}

async function followLog(name) {
  if (page.logAbort) page.logAbort.abort();
  const abort = new AbortController();
  page.logAbort = abort;
  const log = $("log");
  const view = newLogView(log);
  abort.signal.addEventListener("abort", () => view.stop());
  const onLines = (lines) => {
    if (!lines.length) return;
    view.add(lines.map((line) =>
      `${clock(line.at)} ${line.pid}  ${line.text}${line.continued ? " [continues]" : ""}`));
  };
  const onNote = (words) => {
    $("log-note").hidden = false;
    $("log-note").textContent = words;
  };
  try {
    await readEvents(`/ui/api/instances/${encodeURIComponent(name)}/logs`,
      { lines: onLines, note: onNote }, abort.signal);
  } catch (error) {
    if (error.name !== "AbortError" && page.selected === name) onNote(`log stream lost: ${error.message}`);
  }
}

// ---- plots ----------------------------------------------------------------------------

function drawPlots() {
  const series = page.series;
  if (!series) return;
  const now = Date.now() / 1000;
  // the last hour, or less while the history is younger (at least 5 minutes)
  const times = [series.probe, series.ttft, series.memory].flatMap((points) =>
    points.length ? [points[0][0]] : []).concat(series.restarts.slice(0, 1));
  const from = Math.max(now - page.windowS, Math.min(now - 300, ...times));
  plotLines($("plot-probe"), [
    { points: series.probe.map(([t, , max]) => [t, max * 1000]), class: "line faint" },
    { points: series.probe.map(([t, mean]) => [t, mean * 1000]), class: "line" },
  ], from, now);
  plotLines($("plot-ttft"), [{ points: series.ttft, class: "line dots" }], from, now);
  plotBars($("plot-restarts"), series.restarts, from, now, 60);
  plotLines($("plot-memory"), [{ points: series.memory.map(([t, rss]) => [t, rss / 1e6]), class: "line" }],
    from, now);
}

const BOX = { left: 34, right: 316, top: 8, bottom: 104 };

function frame(svg, top, from, now) {
  svg.replaceChildren();
  const svgEl = (tag, attributes, text) => {
    const made = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes)) made.setAttribute(key, value);
    if (text !== undefined) made.textContent = text;
    svg.append(made);
    return made;
  };
  svgEl("rect", { x: BOX.left, y: BOX.top, width: BOX.right - BOX.left, height: BOX.bottom - BOX.top, class: "area" });
  svgEl("text", { x: BOX.left - 4, y: BOX.top + 8, class: "axis end" }, label(top));
  svgEl("text", { x: BOX.left - 4, y: BOX.bottom, class: "axis end" }, "0");
  svgEl("text", { x: BOX.left, y: BOX.bottom + 12, class: "axis" }, `-${Math.round((now - from) / 60)} min`);
  svgEl("text", { x: BOX.right, y: BOX.bottom + 12, class: "axis end" }, "now");
  const x = (t) => BOX.left + ((t - from) / (now - from)) * (BOX.right - BOX.left);
  const y = (v) => BOX.bottom - (v / top) * (BOX.bottom - BOX.top);
  return { svgEl, x, y };
}

function label(value) {
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toPrecision(2);
}

function niceTop(values) {
  const most = Math.max(0, ...values);
  if (most <= 0) return 1;
  const step = 10 ** Math.floor(Math.log10(most));
  return Math.ceil((most * 1.1) / step) * step;
}

function plotLines(svg, lines, from, now) {
  const shown = lines.map((one) => ({ ...one, points: one.points.filter(([t]) => t >= from) }));
  const top = niceTop(shown.flatMap((one) => one.points.map(([, v]) => v)));
  const { svgEl, x, y } = frame(svg, top, from, now);
  if (shown.every((one) => one.points.length === 0)) {
    svgEl("text", { x: (BOX.left + BOX.right) / 2, y: 60, class: "axis middle" }, "no data yet");
    return;
  }
  for (const one of shown) {
    const path = one.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    svgEl("polyline", { points: path, class: one.class });
    if (one.class.includes("dots")) {
      for (const [t, v] of one.points) svgEl("circle", { cx: x(t), cy: y(v), r: 2, class: "dot" });
    }
  }
}

function plotBars(svg, times, from, now, binS) {
  const bins = new Array(Math.ceil((now - from) / binS)).fill(0);
  for (const t of times) {
    if (t >= from) bins[Math.min(bins.length - 1, Math.floor((t - from) / binS))] += 1;
  }
  const top = niceTop(bins);
  const { svgEl, x, y } = frame(svg, top, from, now);
  bins.forEach((count, index) => {
    if (!count) return;
    const left = x(from + index * binS);
    svgEl("rect", { x: left, y: y(count), width: Math.max(1, x(from + binS) - x(from)), height: BOX.bottom - y(count), class: "bar" });
  });
  if (!times.length) svgEl("text", { x: (BOX.left + BOX.right) / 2, y: 60, class: "axis middle" }, "none");
}

// ---- commands -------------------------------------------------------------------------

const WARNINGS = {
  start: (name) => `Start ${name}? Its restart budget is refilled and its server started.`,
  stop: (name) => `Stop ${name}? Its server is stopped (SIGTERM, then SIGKILL after the grace) and not restarted until started again.`,
  restart: (name) => `Restart ${name}? Its server is stopped, then started again.`,
  reload: () => "Reload the run file? Removed instances stop, added ones start, changed ones restart; the rest keep their process.",
};

function confirmed(text, verb) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = verb[0].toUpperCase() + verb.slice(1);
  dialog.showModal();
  return new Promise((done) => {
    const finish = (answer) => {
      $("confirm-ok").onclick = null;
      $("confirm-cancel").onclick = null;
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      done(answer);
    };
    $("confirm-ok").onclick = () => finish(true);
    $("confirm-cancel").onclick = () => finish(false);
    dialog.onclose = () => finish(false);
  });
}

async function command(verb, name) {
  if (page.busy) return;
  if (!(await confirmed(WARNINGS[verb](name), verb))) return;
  page.busy = true;
  const path = verb === "reload" ? "/ui/api/reload" : `/ui/api/instances/${encodeURIComponent(name)}/${verb}`;
  const what = verb === "reload" ? "reload" : `${verb} ${name}`;
  showResult(what, "…", "pending");
  try {
    const reply = await fetch(path, { method: "POST", headers: authorized(), cache: "no-store" });
    const body = await reply.json();
    showResult(what, body.words || JSON.stringify(body), body.ok ? "ok" : "failed");
    if (reply.status === 401) askToken("the token was refused");
  } catch (error) {
    showResult(what, `no answer: ${error.message}`, "failed");
  } finally {
    page.busy = false;
  }
}

function showResult(what, words, outcome) {
  $("result").hidden = false;
  $("result").dataset.outcome = outcome;
  $("result-what").textContent = what;
  $("result-words").textContent = words;
}

// ---- start ----------------------------------------------------------------------------

function wire() {
  $("instances").addEventListener("click", (click) => {
    const target = click.target.closest("button");
    if (!target) return;
    if (target.dataset.open) select(target.dataset.open);
    else if (target.dataset.verb) command(target.dataset.verb, target.dataset.name);
  });
  $("reload").addEventListener("click", () => command("reload", null));
  $("panel-close").addEventListener("click", closePanel);
  $("follow").addEventListener("change", () => {
    if ($("follow").checked) $("log").scrollTop = $("log").scrollHeight;
  });
  $("result-close").addEventListener("click", () => { $("result").hidden = true; });
  const use = (submit) => {
    submit.preventDefault(); // nothing is sent anywhere: the token stays in this tab
    const token = $("token").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    $("login").hidden = true;
    live();
  };
  $("login-form").addEventListener("submit", use);
  setInterval(tickUptimes, 1000);
  setInterval(drawPlots, 30000); // the plots' time axis moves on
}

wire();
takeToken();
live();
