// cachekeeper dashboard: the recent sessions and, per session, a chart of its turns.
//
// Everything shown that a client controls (session ids, model names, routes) is set as text
// (textContent / text nodes), never parsed as HTML. The API is fetched with relative URLs, so
// the page works wherever it is served (/_cachekeeper/ or /t/<token>/_cachekeeper/).
"use strict";

(function () {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const KINDS = [
    { key: "uncached_input_tokens", cls: "uncached", label: "uncached input" },
    { key: "cache_read_tokens", cls: "read", label: "cache read" },
    { key: "cache_write_tokens", cls: "write", label: "cache write" },
  ];

  const $ = (id) => document.getElementById(id);
  let current = null; // the open session's id

  // ---- DOM helpers: text only, never HTML ----

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function setAttrs(e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) e.setAttribute(k, String(v));
    }
  }

  function append(e, children) {
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }

  // ---- formatting ----

  const intFmt = new Intl.NumberFormat("en-US");

  function tokens(n) {
    return n === null || n === undefined ? null : intFmt.format(n);
  }

  /** A token number, or a muted "not reported". */
  function tokenCell(n, cls) {
    const t = tokens(n);
    return t === null
      ? el("td", { class: "num na" }, "not reported")
      : el("td", { class: "num" + (cls ? " " + cls : "") }, t);
  }

  function compact(n) {
    const a = Math.abs(n);
    if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e3) return (n / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
    return String(Math.round(n));
  }

  function share(x) {
    return x === null || x === undefined ? "n/a" : (x * 100).toFixed(1) + "%";
  }

  function money(m) {
    const sign = m.saving < 0 ? "−" : "";
    return sign + Math.abs(m.saving).toFixed(2) + " " + m.currency;
  }

  /** The saving: money where [[pricing]] covers the model, else billed-input equivalents. */
  function saving(s) {
    if (s.money && s.money.length) return s.money.map(money).join(" + ");
    if (s.saving_equiv === null || s.saving_equiv === undefined) return "not priced";
    return compact(s.saving_equiv) + " input-token eq.";
  }

  function when(ms) {
    const d = new Date(ms);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function ago(ms) {
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " d ago";
  }

  function shortId(id) {
    return id.length > 20 ? id.slice(0, 18) + "…" : id;
  }

  // ---- data ----

  function since() {
    return $("since").value;
  }

  async function getJson(url) {
    const r = await fetch(url, { cache: "no-store", headers: { Accept: "application/json" } });
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return r.json();
  }

  function query() {
    const s = since();
    return s ? "?since=" + encodeURIComponent(s) : "";
  }

  function setStatus(text, isError) {
    const st = $("status");
    st.textContent = text;
    st.classList.toggle("error", !!isError);
  }

  async function loadSessions() {
    setStatus("loading…");
    let list;
    try {
      list = await getJson("api/sessions" + query());
    } catch (e) {
      setStatus("cannot load sessions (" + e.message + ")", true);
      return;
    }
    renderSessions(list);
    setStatus(list.length + (list.length === 1 ? " session" : " sessions") +
      " · updated " + new Date().toLocaleTimeString());
  }

  async function openSession(id) {
    current = id;
    for (const tr of document.querySelectorAll("#sessions tr.session")) {
      tr.classList.toggle("selected", tr.dataset.session === id);
    }
    let d;
    try {
      d = await getJson("api/sessions/" + encodeURIComponent(id) + query());
    } catch (e) {
      setStatus("cannot load session (" + e.message + ")", true);
      return;
    }
    if (current !== id) return; // another one was opened meanwhile
    renderDetail(d);
  }

  // ---- the sessions table ----

  function renderSessions(list) {
    const body = document.querySelector("#sessions tbody");
    clear(body);
    $("empty").hidden = list.length > 0;
    for (const s of list) {
      const shareCell = el("td", { class: "num share" });
      if (s.cache_read_share === null) {
        shareCell.classList.add("na");
        shareCell.appendChild(document.createTextNode("n/a"));
      } else {
        const pct = Math.max(0, Math.min(1, s.cache_read_share)) * 100;
        const fill = el("span", { class: "meter-fill" });
        fill.style.width = pct.toFixed(1) + "%"; // CSSOM, allowed by the page's CSP
        shareCell.appendChild(el("span", { class: "meter", "aria-hidden": "true" }, fill));
        shareCell.appendChild(el("span", { class: "share-text" }, share(s.cache_read_share)));
      }
      const models = s.models && s.models.length > 1 ? " (+" + (s.models.length - 1) + ")" : "";
      const tr = el("tr", { class: "session", tabindex: "0" },
        el("td", { class: "session-id", title: s.session }, el("code", {}, shortId(s.session))),
        el("td", { class: "route" }, s.route),
        el("td", { class: "model", title: (s.models || [s.model]).join(", ") }, s.model + models),
        el("td", { class: "num turns" }, String(s.turns)),
        el("td", { class: "last", title: when(s.last_ts_ms) }, ago(s.last_ts_ms)),
        shareCell,
        tokenCell(s.cache_write_tokens, "writes"),
        el("td", { class: "num collapses" + (s.collapses ? " warn" : "") }, String(s.collapses)),
        el("td", { class: "num saving" + (s.saving_equiv < 0 ? " neg" : "") }, saving(s)),
      );
      tr.dataset.session = s.session;
      if (s.session === current) tr.classList.add("selected");
      tr.addEventListener("click", () => openSession(s.session));
      tr.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" || ev.key === " ") {
          ev.preventDefault();
          openSession(s.session);
        }
      });
      body.appendChild(tr);
    }
  }

  // ---- one session ----

  function stat(dl, term, value, cls) {
    dl.appendChild(el("div", { class: "stat" + (cls ? " " + cls : "") },
      el("dt", {}, term), el("dd", {}, value)));
  }

  function renderDetail(d) {
    const s = d.summary;
    $("detail").hidden = false;
    $("detail-id").textContent = s.session;

    const dl = $("stats");
    clear(dl);
    stat(dl, "Route", s.route);
    stat(dl, s.models.length > 1 ? "Models" : "Model", s.models.join(", "));
    stat(dl, "Turns", String(s.turns));
    stat(dl, "Cache-read share", share(s.cache_read_share), "big");
    stat(dl, "Uncached input", tokens(s.uncached_input_tokens) ?? "not reported");
    stat(dl, "Cache read", tokens(s.cache_read_tokens) ?? "not reported");
    stat(dl, "Cache write", tokens(s.cache_write_tokens) ?? "not reported");
    stat(dl, "Output", tokens(s.output_tokens) ?? "not reported");
    stat(dl, "Collapses", s.collapses + (s.collapse_write_tokens !== null
      ? " · " + tokens(s.collapse_write_tokens) + " write tokens" : ""), s.collapses ? "warn" : "");
    stat(dl, "Billed input (equiv.)", s.billed_equiv === null ? "not priced"
      : compact(s.billed_equiv) + " of " + compact(s.no_cache_equiv) + " without cache");
    const sign = s.saving_equiv === null ? "" : s.saving_equiv < 0 ? "neg" : "good";
    stat(dl, "Saving", saving(s), sign);

    const causes = $("by-cause");
    clear(causes);
    for (const c of s.by_cause) {
      causes.appendChild(el("span", { class: "cause-chip" },
        el("strong", {}, c.cause),
        " " + c.collapses + (c.collapses === 1 ? " collapse" : " collapses") +
        (c.write_tokens !== null ? " · " + tokens(c.write_tokens) + " write tokens" : "")));
    }

    drawChart(d.turns);
    renderTurns(d.turns);
    $("detail").scrollIntoView({ block: "start", behavior: "smooth" });
  }

  function renderTurns(turns) {
    const body = document.querySelector("#turns tbody");
    clear(body);
    for (const t of turns) {
      const c = t.collapse;
      const collapse = c
        ? el("td", { class: "collapse" },
          el("span", { class: "cause" }, c.cause), " at ", el("code", {}, c.at),
          c.write_tokens !== null ? " · " + tokens(c.write_tokens) + " written" : "")
        : el("td", { class: "muted" }, "—");
      const tr = el("tr", { class: "turn-row" + (c ? " collapsed" : "") },
        el("td", { class: "num" }, String(t.turn)),
        el("td", { title: when(t.ts_ms) }, new Date(t.ts_ms).toLocaleTimeString()),
        el("td", { class: "model" }, t.model),
        tokenCell(t.uncached_input_tokens),
        tokenCell(t.cache_read_tokens),
        tokenCell(t.cache_write_tokens),
        tokenCell(t.output_tokens),
        collapse,
      );
      tr.dataset.turn = String(t.turn);
      body.appendChild(tr);
    }
  }

  // ---- the chart ----

  /** A round upper bound for the y axis and its tick step. */
  function niceScale(max) {
    if (max <= 0) return { top: 1, step: 1 };
    const raw = max / 4;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    return { top: Math.ceil(max / step) * step, step };
  }

  function drawChart(turns) {
    const chart = $("chart");
    clear(chart);
    const n = turns.length;
    const margin = { left: 64, right: 20, top: 70, bottom: 40 };
    const avail = Math.max(480, chart.parentElement.clientWidth - 2) - margin.left - margin.right;
    const group = Math.max(14, avail / Math.max(n, 1));
    const plotW = group * n;
    const plotH = 240;
    const width = margin.left + Math.max(plotW, 200) + margin.right;
    const height = margin.top + plotH + margin.bottom;
    chart.setAttribute("width", String(width));
    chart.setAttribute("height", String(height));
    chart.setAttribute("viewBox", "0 0 " + width + " " + height);

    let max = 0;
    for (const t of turns) for (const k of KINDS) max = Math.max(max, t[k.key] || 0);
    const { top, step } = niceScale(max);
    const y = (v) => margin.top + plotH - (v / top) * plotH;

    // axes and grid
    const axis = svg("g", { class: "axis" });
    for (let v = 0; v <= top + step / 2; v += step) {
      axis.appendChild(svg("line", { class: "grid", x1: margin.left, x2: margin.left + plotW, y1: y(v), y2: y(v) }));
      axis.appendChild(svg("text", { class: "tick", x: margin.left - 8, y: y(v) + 4, "text-anchor": "end" }, compact(v)));
    }
    axis.appendChild(svg("text", { class: "axis-title", x: 14, y: margin.top + plotH / 2,
      transform: "rotate(-90 14 " + (margin.top + plotH / 2) + ")", "text-anchor": "middle" }, "tokens"));
    axis.appendChild(svg("text", { class: "axis-title", x: margin.left + plotW / 2, y: height - 6,
      "text-anchor": "middle" }, "turn"));
    chart.appendChild(axis);

    // one bar group per turn
    // Bars at most 18 px wide, centred in their group.
    const barW = Math.max(2, Math.min(18, (group * 0.64) / KINDS.length));
    const pad = (group - barW * KINDS.length) / 2;
    const labelEvery = Math.ceil(26 / group);
    const bars = svg("g", { class: "bars" });
    turns.forEach((t, i) => {
      const x0 = margin.left + i * group;
      const g = svg("g", { class: "turn" + (t.collapse ? " collapsed" : ""), "data-turn": t.turn });
      g.appendChild(svg("title", {}, "turn " + t.turn + " · " + KINDS.map((k) =>
        k.label + ": " + (tokens(t[k.key]) ?? "not reported")).join(" · ")));
      g.appendChild(svg("rect", { class: "hover", x: x0, y: margin.top, width: group, height: plotH }));
      KINDS.forEach((k, j) => {
        const v = t[k.key];
        if (v === null || v === undefined) return;
        const h = v > 0 ? Math.max(1.5, plotH - (y(v) - margin.top)) : 0;
        g.appendChild(svg("rect", { class: "bar " + k.cls, x: x0 + pad + j * barW, y: margin.top + plotH - h,
          width: Math.max(1, barW - 1), height: h, "data-value": v }));
      });
      if (i % labelEvery === 0 || i === n - 1) {
        g.appendChild(svg("text", { class: "tick turn-label", x: x0 + group / 2, y: margin.top + plotH + 16,
          "text-anchor": "middle" }, String(t.turn)));
      }
      bars.appendChild(g);
    });
    chart.appendChild(svg("line", { class: "baseline", x1: margin.left, x2: margin.left + plotW,
      y1: margin.top + plotH, y2: margin.top + plotH }));
    chart.appendChild(bars);

    // collapse markers, labels in up to three rows so they do not overlap
    const rowsEnd = [-Infinity, -Infinity, -Infinity];
    const markers = svg("g", { class: "collapses" });
    turns.forEach((t, i) => {
      const c = t.collapse;
      if (!c) return;
      // Just left of the turn's bars: the prefix broke before this turn.
      const cx = margin.left + i * group + pad - Math.min(4, pad / 2);
      const text = c.cause + " @ " + c.at;
      const w = text.length * 6.6;
      let row = rowsEnd.findIndex((end) => cx - 4 > end);
      if (row < 0) row = rowsEnd.indexOf(Math.min(...rowsEnd));
      const ly = 16 + row * 17;
      const anchorStart = cx + w < width - 4;
      rowsEnd[row] = anchorStart ? cx + w : cx;
      const m = svg("g", { class: "collapse-marker", "data-turn": t.turn, "data-cause": c.cause });
      m.appendChild(svg("title", {}, "turn " + t.turn + ": prefix collapse at " + c.at + ", cause " + c.cause +
        (c.write_tokens !== null ? ", " + tokens(c.write_tokens) + " tokens written" : "")));
      m.appendChild(svg("line", { class: "collapse-line", x1: cx, x2: cx, y1: ly + 4, y2: margin.top + plotH }));
      m.appendChild(svg("circle", { class: "collapse-dot", cx, cy: ly + 4, r: 3.5 }));
      m.appendChild(svg("text", { class: "collapse-label", x: anchorStart ? cx + 6 : cx - 6, y: ly + 8,
        "text-anchor": anchorStart ? "start" : "end" }, text));
      markers.appendChild(m);
    });
    chart.appendChild(markers);
  }

  // ---- wiring ----

  function init() {
    $("refresh").addEventListener("click", async () => {
      await loadSessions();
      if (current !== null) openSession(current);
    });
    $("since").addEventListener("change", async () => {
      await loadSessions();
      if (current !== null) openSession(current);
    });
    $("close").addEventListener("click", () => {
      current = null;
      $("detail").hidden = true;
      for (const tr of document.querySelectorAll("#sessions tr.session.selected")) tr.classList.remove("selected");
    });
    loadSessions();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
