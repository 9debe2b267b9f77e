// The status page: polls the control API with the tab's token and draws what it answers.
// Every string from the API (hosts, reasons, seeds: text from the web) goes in as textContent,
// never as HTML. The token lives in sessionStorage: this tab only, never a URL or a cookie.
"use strict";

const TOKEN_KEY = "crawler.token";
const POLL_MS = 2000;
// Counters shown, in this order (the record counts more: GET /crawls/{id} has them all).
const MAIN_COUNTERS = ["fetched", "failed", "disallowed", "filtered", "over_budget",
                       "redirected", "duplicate", "dead_lettered", "cancelled", "requests",
                       "robots_requests", "urls_overflowed", "urls_over_time",
                       "urls_out_of_scope", "urls_blocked_address", "leases_expired"];
const HOST_FIELDS = [["hosts_active", "hosts active"], ["hosts_parked", "hosts parked"],
                     ["urls_on_parked_hosts", "URLs waiting on parked hosts"]];

const $ = (id) => document.getElementById(id);
let selected = decodeURIComponent(location.hash.slice(1)) || null;
let plot = null;
let live = [];  // [epoch s, pages/s of the last minute], one per poll of the selected crawl
let timer = null;
let revision = 0;

function token() { return sessionStorage.getItem(TOKEN_KEY); }

function showLogin(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  $("main").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("token").focus();
  if (timer) { clearTimeout(timer); timer = null; }
}

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, options = {}) {
  const answer = await fetch(path, {
    ...options,
    headers: { "Authorization": "Bearer " + token(), "Accept": "application/json" },
    credentials: "omit", cache: "no-store",
  });
  let body = null;
  try { body = await answer.json(); } catch (e) { body = null; }
  if (answer.status === 401) {
    showLogin("The server refused the token: " + (body && body.detail || "401"));
    throw new ApiError(401, "unauthorised");
  }
  if (!answer.ok) {
    const detail = body && body.detail;
    throw new ApiError(answer.status, typeof detail === "string" ? detail
      : JSON.stringify(detail) || answer.statusText);
  }
  return body;
}

function text(tag, value, className) {
  const element = document.createElement(tag);
  element.textContent = value === null || value === undefined ? "" : String(value);
  if (className) element.className = className;
  return element;
}

function number(value) {
  return typeof value === "number" ? value.toLocaleString("en-US") : "—";
}

function rate(value) {
  return typeof value === "number" ? value.toFixed(1) : "—";
}

function time(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}

function seconds(s) {
  if (typeof s !== "number" || !isFinite(s)) return "—";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? h + " h " : "") + (h || m ? m + " min " : "") + r + " s";
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function showCrawls(page) {
  const crawls = (page && Array.isArray(page.crawls)) ? page.crawls : [];
  $("crawls-empty").hidden = crawls.length > 0;
  fill($("crawls").tBodies[0], crawls.map((crawl) => {
    const counters = crawl.counters || {};
    const row = document.createElement("tr");
    row.dataset.id = crawl.id;
    if (crawl.id === selected) row.className = "selected";
    row.append(text("td", crawl.id), text("td", crawl.state),
               text("td", number(counters.fetched), "num"),
               text("td", number(counters.accepted), "num"),
               text("td", rate(crawl.pages_per_s), "num"), text("td", time(crawl.created_at)));
    row.addEventListener("click", () => select(crawl.id));
    return row;
  }));
  if (!selected && crawls.length) select(crawls[0].id, true);
}

function select(id, quiet) {
  if (selected !== id) { live = []; if (plot) { plot.destroy(); plot = null; } }
  selected = id;
  if (!quiet) history.replaceState(null, "", "#" + encodeURIComponent(id));
  for (const row of $("crawls").tBodies[0].rows) {
    row.className = row.dataset.id === id ? "selected" : "";
  }
  if (!quiet) poll();
}

function tile(label, value, absent) {
  const element = document.createElement("div");
  element.className = "tile" + (absent ? " absent" : "");
  element.append(text("div", value, "value"), text("div", label, "label"));
  if (absent) element.title = "not reported by the API yet";
  return element;
}

function showCrawl(crawl) {
  $("crawl").hidden = false;
  $("crawl-id").textContent = crawl.id;
  $("crawl-state").textContent = crawl.state;
  $("crawl-state").className = "state " + crawl.state;
  $("crawl-reason").textContent = crawl.reason || "";
  const allowed = { running: ["pause", "cancel"], paused: ["resume", "cancel"] }[crawl.state] || [];
  for (const action of ["pause", "resume", "cancel"]) $(action).disabled = !allowed.includes(action);

  const counters = crawl.counters || {};
  const keys = MAIN_COUNTERS.filter((k) => k in counters);
  const tiles = keys.map((k) => tile(k.replace(/_/g, " "), number(counters[k])));
  tiles.push(tile("accepted", number(counters.accepted)),
             tile("frontier (waiting)", number(crawl.frontier)),
             tile("pages/s, last minute", rate(crawl.pages_per_s)));
  if (typeof counters.bytes === "number") {
    tiles.push(tile("MB fetched", (counters.bytes / 1e6).toFixed(1)));
  }
  for (const [field, label] of HOST_FIELDS) {
    const value = crawl[field];
    tiles.push(tile(label, typeof value === "number" ? number(value) : "—",
                    typeof value !== "number"));
  }
  $("tiles").replaceChildren(...tiles);
  showBudget(crawl, counters);
}

function showBudget(crawl, counters) {
  const entries = [];
  const add = (label, value) => {
    const dd = document.createElement("dd");
    if (value instanceof Node) dd.append(value); else dd.textContent = value;
    entries.push(text("dt", label), dd);
  };
  const fetched = counters.fetched || 0;
  if (typeof crawl.max_pages === "number") {
    const share = Math.min(1, fetched / crawl.max_pages);
    const bar = document.createElement("div");
    bar.className = "bar";
    const filled = document.createElement("span");
    filled.style.width = (share * 100).toFixed(1) + "%";
    bar.append(filled);
    add("pages", number(fetched) + " fetched of " + number(crawl.max_pages) +
        " (" + number(Math.max(0, crawl.max_pages - fetched)) + " left)");
    add("", bar);
  }
  add("per host", crawl.max_pages_per_host == null ? "no limit" : number(crawl.max_pages_per_host));
  add("depth", crawl.max_depth == null ? "no limit" : number(crawl.max_depth));
  const rules = [crawl.scope || "all"];
  for (const pattern of crawl.include || []) rules.push("include " + pattern);
  for (const pattern of crawl.exclude || []) rules.push("exclude " + pattern);
  add("scope", rules.join(", "));
  add("min delay", crawl.min_delay == null ? "—" : crawl.min_delay + " s");
  const started = crawl.started_at ? Date.parse(crawl.started_at) / 1000 : null;
  const ended = crawl.ended_at ? Date.parse(crawl.ended_at) / 1000 : null;
  const now = ended || Date.now() / 1000;
  if (started) add("running for", seconds(now - started));
  if (typeof crawl.max_duration_s === "number") {
    add("time budget", seconds(crawl.max_duration_s));
    add("time left", ended ? "ended" : seconds(started + crawl.max_duration_s - now));
  } else {
    add("time left", "no time limit");
  }
  add("started", time(crawl.started_at));
  add("ended", time(crawl.ended_at));
  $("budget").replaceChildren(...entries);
}

function showReport(report) {
  fill($("hosts").tBodies[0], (report.top_hosts || []).map((h) => {
    const row = document.createElement("tr");
    row.append(text("td", h.host), text("td", number(h.pages), "num"),
               text("td", number(h.fetched), "num"), text("td", number(h.failed), "num"));
    return row;
  }));
  fill($("reasons").tBodies[0], (report.top_reasons || []).map((r) => {
    const row = document.createElement("tr");
    row.append(text("td", r.state), text("td", r.reason || "(none)"),
               text("td", number(r.pages), "num"));
    row.cells[1].title = r.reason || "";
    return row;
  }));
  drawPlot(report);
}

function drawPlot(report) {
  const points = (report.rate || []).map((p) => [p.t, p.pages_per_s]);
  // One x axis for both series: the table's intervals and the API's live samples.
  const xs = Array.from(new Set(points.map((p) => p[0]).concat(live.map((p) => p[0]))))
    .sort((a, b) => a - b);
  const byTable = new Map(points), byApi = new Map(live);
  const data = [xs, xs.map((x) => byTable.has(x) ? byTable.get(x) : null),
                xs.map((x) => byApi.has(x) ? byApi.get(x) : null)];
  const element = $("plot");
  const width = Math.max(300, element.clientWidth || 600);
  if (!plot) {
    plot = new uPlot({
      width, height: 220,
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      series: [{},
        { label: "pages/s (per " + report.bucket_s + " s, pages table)", stroke: "#1f5f8b",
          fill: "rgba(31,95,139,0.12)", width: 2, spanGaps: true },
        { label: "pages/s (last minute, API)", stroke: "#c26d00", width: 1.5,
          spanGaps: true, points: { show: true, size: 4 } }],
      axes: [{}, { label: "pages/s" }],
    }, data, element);
  } else {
    plot.setData(data);
  }
  const total = points.reduce((sum, p) => sum + p[1] * report.bucket_s, 0);
  revision += 1;
  element.dataset.revision = String(revision);
  element.dataset.pages = String(Math.round(total));
  $("plot-note").textContent = number(Math.round(total)) + " pages fetched in " +
    number(points.length) + " intervals of " + report.bucket_s + " s; " +
    number(report.rows) + " rows in the table.";
}

async function poll() {
  if (timer) { clearTimeout(timer); timer = null; }
  if (!token()) { showLogin(); return; }
  try {
    showCrawls(await api("crawls?limit=50"));
    if (selected) {
      let crawl = null;
      try {
        crawl = await api("crawls/" + encodeURIComponent(selected));
      } catch (e) {
        if (e.status === 404) { selected = null; $("crawl").hidden = true; } else throw e;
      }
      if (crawl) {
        if (typeof crawl.pages_per_s === "number") {
          live.push([Date.now() / 1000, crawl.pages_per_s]);
          if (live.length > 300) live.shift();
        }
        showCrawl(crawl);
        try {
          showReport(await api("crawls/" + encodeURIComponent(selected) + "/report"));
          $("report-error").textContent = "";
        } catch (e) {
          if (e.status === 401) return;
          $("report-error").textContent = "Breakdowns unavailable: " + e.message;
        }
      }
    }
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.status === 401) return;
    $("updated").textContent = "the API did not answer: " + e.message;
  }
  timer = setTimeout(poll, POLL_MS);
}

async function act(event) {
  const action = event.currentTarget.dataset.action;
  if (!selected) return;
  if (action === "cancel" && !confirm("Cancel crawl " + selected + "? Its waiting URLs end.")) {
    return;
  }
  $("action-error").textContent = "";
  for (const name of ["pause", "resume", "cancel"]) $(name).disabled = true;
  try {
    showCrawl(await api("crawls/" + encodeURIComponent(selected) + "/" + action,
                        { method: "POST" }));
  } catch (e) {
    if (e.status !== 401) $("action-error").textContent = action + ": " + e.message;
  }
  poll();
}

function start() {
  $("login").hidden = true;
  $("main").hidden = false;
  $("forget").hidden = false;
  poll();
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  start();
});
$("forget").addEventListener("click", () => showLogin("Token forgotten."));
for (const name of ["pause", "resume", "cancel"]) $(name).addEventListener("click", act);
window.addEventListener("hashchange", () => {
  const id = decodeURIComponent(location.hash.slice(1));
  if (id && id !== selected) select(id);
});
if (token()) start(); else showLogin();
