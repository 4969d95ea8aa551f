// The hdet dashboard: plain SVG, no dependencies. Reads /v1 with the session cookie (same origin).
"use strict";
(function () {
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf"];
  const SVG = "http://www.w3.org/2000/svg";

  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin" });
    if (r.status === 401 || r.status === 403) { location.href = "/login"; throw new Error("signed out"); }
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return r.json();
  }

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    return a >= 1e4 || a < 1e-3 ? v.toExponential(1) : +v.toPrecision(3) + "";
  }

  // series: [{label, color, points: [[x, y]], width, dash}]; y may be log-scaled.
  function drawPlot(svg, series, logY) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 440, H = 240, L = 52, R = 10, T = 8, B = 22;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const pts = series.flatMap(s => s.points).filter(p => p[1] !== null && isFinite(p[1]) && (!logY || p[1] > 0));
    if (pts.length === 0) { el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg).textContent = "waiting for windows"; return; }
    const ty = v => (logY ? Math.log10(v) : v);
    let [x0, x1] = [Math.min(...pts.map(p => p[0])), Math.max(...pts.map(p => p[0]))];
    let [y0, y1] = [Math.min(...pts.map(p => ty(p[1]))), Math.max(...pts.map(p => ty(p[1])))];
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
    const sy = y => T + (1 - (ty(y) - y0) / (y1 - y0)) * (H - T - B);
    el("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#d9dee4" }, svg);
    for (let i = 0; i <= 4; i++) {
      const yv = y0 + (y1 - y0) * i / 4, py = T + (1 - i / 4) * (H - T - B);
      el("line", { x1: L, x2: W - R, y1: py, y2: py, stroke: "#eef0f3" }, svg);
      el("text", { x: L - 4, y: py + 3, "text-anchor": "end" }, svg).textContent = fmt(logY ? 10 ** yv : yv);
      const xv = x0 + (x1 - x0) * i / 4;
      el("text", { x: sx(xv), y: H - 6, "text-anchor": "middle" }, svg).textContent = Math.round(xv);
    }
    for (const s of series) {
      const ok = s.points.filter(p => p[1] !== null && isFinite(p[1]) && (!logY || p[1] > 0));
      if (ok.length === 0) continue;
      const d = ok.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join("");
      el("path", { d, fill: "none", stroke: s.color, "stroke-width": s.width || 1.2,
                   "stroke-dasharray": s.dash || "none", "data-series": s.label }, svg);
      if (ok.length < 60) for (const p of ok) el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 1.8, fill: s.color }, svg);
    }
  }

  function panel(container, id, title) {
    let box = document.getElementById(id);
    if (!box) {
      box = document.createElement("section");
      box.className = "panel"; box.id = id;
      box.innerHTML = "<h2></h2><div class='legend'></div>";
      box.querySelector("h2").textContent = title;
      box.appendChild(el("svg", { role: "img", "aria-label": title }));
      container.appendChild(box);
    }
    return box;
  }

  function legend(box, series) {
    const lg = box.querySelector(".legend");
    lg.innerHTML = "";
    for (const s of series) {
      const span = document.createElement("span");
      span.innerHTML = "<i></i>";
      span.querySelector("i").style.background = s.color;
      span.appendChild(document.createTextNode(s.label));
      lg.appendChild(span);
    }
  }

  function render(container, records) {
    const rows = [...records.values()].sort((a, b) => a.window - b.window);
    container.dataset.windows = String(rows.length);
    if (rows.length === 0) return;
    const replicas = rows[rows.length - 1].losses.length;
    for (const name of Object.keys(rows[rows.length - 1].params)) {
      const centre = p => (p.center !== undefined && p.center !== null) ? p.center : p.base;
      const series = [{ label: "base (steered)", color: "#1d232b", width: 2.4,
                        points: rows.map(r => [r.step, r.params[name] ? centre(r.params[name]) : null]) },
                      { label: "schedule", color: "#8a94a0", width: 1.2, dash: "6 3",
                        points: rows.map(r => [r.step, r.params[name] ? r.params[name].base : null]) }];
      for (let k = 0; k < replicas; k++) {
        series.push({ label: "replica " + k, color: PALETTE[k % PALETTE.length], dash: "3 2",
                      points: rows.map(r => [r.step, r.params[name] ? r.params[name].values[k] : null]) });
      }
      const box = panel(container, "param-" + name, name + ": base and per-replica value");
      legend(box, series); drawPlot(box.querySelector("svg"), series, true);
    }
    const losses = [];
    for (let k = 0; k < replicas; k++) {
      losses.push({ label: "replica " + k, color: PALETTE[k % PALETTE.length],
                    points: rows.map(r => [r.step, r.losses[k]]) });
    }
    const lossBox = panel(container, "losses", "window loss per replica");
    legend(lossBox, losses); drawPlot(lossBox.querySelector("svg"), losses, false);
    const keys = [...new Set(rows.flatMap(r => Object.keys(r.metrics || {})))].filter(k => k.startsWith("val"));
    const metrics = keys.map((k, i) => ({ label: k, color: PALETTE[(i + 3) % PALETTE.length], width: 2,
      points: rows.filter(r => r.metrics && r.metrics[k] !== undefined).map(r => [r.step, r.metrics[k]]) }));
    const valBox = panel(container, "validation", "validation metric");
    legend(valBox, metrics); drawPlot(valBox.querySelector("svg"), metrics, false);
  }

  async function jobPage(container) {
    const id = container.dataset.job;
    const records = new Map();
    let pending = false;
    const redraw = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; render(container, records); });
    };
    const status = async () => {
      const job = await getJSON("/v1/jobs/" + encodeURIComponent(id));
      const s = document.getElementById("status");
      s.textContent = job.status; s.className = "status " + job.status;
      document.getElementById("title").textContent = job.name ? `${job.name} (${job.id})` : job.id;
      const p = job.progress;
      document.getElementById("progress").textContent =
        `window ${p.windows}/${p.total_windows}, step ${p.step === null ? 0 : p.step}/${p.total_steps}`;
      const m = Object.entries(job.latest_metrics).map(([k, v]) => `${k} ${v === null ? "-" : fmt(v)}`);
      document.getElementById("summary").textContent =
        `task ${job.spec.task}, ${job.spec.replicas} replicas, sync every ${job.spec.sync_every} steps` +
        (m.length ? "; latest " + m.join(", ") : "") + (job.message ? "; " + job.message : "");
      return job;
    };
    const show = e => { document.getElementById("error").textContent = String(e.message || e); };
    try { await status(); } catch (e) { show(e); return; }
    const timer = setInterval(() => status().catch(show), 3000);
    const source = new EventSource("/v1/jobs/" + encodeURIComponent(id) + "/stream");
    source.addEventListener("window", ev => {
      const rec = JSON.parse(ev.data);
      records.set(rec.window, rec);
      redraw();
    });
    source.addEventListener("end", () => {
      source.close(); clearInterval(timer); status().catch(show); redraw();
    });
    redraw();
  }

  async function jobsPage(tbody, empty) {
    const load = async () => {
      const page = await getJSON("/v1/jobs?limit=200");
      empty.hidden = page.items.length > 0;
      tbody.innerHTML = "";
      for (const job of page.items) {
        const tr = document.createElement("tr");
        const cells = [job.id, job.name || "", job.spec.task, job.status,
          `${Math.round(100 * job.progress.fraction)}% (${job.progress.windows}/${job.progress.total_windows})`,
          Object.entries(job.latest_metrics).map(([k, v]) => `${k} ${v === null ? "-" : fmt(v)}`).join(", "),
          job.created_at.replace("T", " ").slice(0, 19)];
        cells.forEach((text, i) => {
          const td = document.createElement("td");
          if (i === 0) {
            const a = document.createElement("a"); a.href = "/jobs/" + encodeURIComponent(job.id);
            a.textContent = text; td.appendChild(a);
          } else if (i === 3) {
            const s = document.createElement("span"); s.className = "status " + text; s.textContent = text;
            td.appendChild(s);
          } else td.textContent = text;
          tr.appendChild(td);
        });
        tbody.appendChild(tr);
      }
    };
    await load();
    setInterval(() => load().catch(() => {}), 3000);
  }

  window.hdet = { jobPage, jobsPage, drawPlot };
})();
