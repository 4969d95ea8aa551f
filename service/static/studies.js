// Studies on the dashboard: the list on "/" and a study's page (its Markdown record and plot).
// Plain DOM; needs dashboard.js (loaded first) for getJSON, which reads /v1 with the session cookie.
"use strict";
(function () {
  const getJSON = window.hdet.getJSON;  // dashboard.js, loaded first

  function cell(tr, text, href, cls) {
    const td = document.createElement("td");
    const node = document.createElement(href ? "a" : "span");
    if (href) node.href = href;
    if (cls) node.className = cls;
    node.textContent = text;
    td.appendChild(node);
    tr.appendChild(td);
  }

  async function studiesList(tbody, empty) {
    const load = async () => {
      const page = await getJSON("/v1/studies?limit=200");
      empty.hidden = page.items.length > 0;
      tbody.innerHTML = "";
      for (const s of page.items) {
        const tr = document.createElement("tr");
        cell(tr, s.id, s.links.dashboard);
        cell(tr, s.name);
        cell(tr, s.status, null, "status " + s.status);
        cell(tr, s.winner || "-");
        cell(tr, s.created_at.replace("T", " ").slice(0, 19));
        tbody.appendChild(tr);
      }
    };
    await load();
    setInterval(() => load().catch(() => {}), 3000);
  }

  // The record is shown as preformatted Markdown; the plot once the runner has written it.
  async function studyPage(root) {
    const id = root.dataset.study;
    const status = document.getElementById("status");
    const summary = document.getElementById("summary");
    const md = document.getElementById("record");
    const img = document.getElementById("plot");
    const error = document.getElementById("error");
    let shown = false;
    const load = async () => {
      const s = await getJSON("/v1/studies/" + encodeURIComponent(id));
      status.textContent = s.status;
      status.className = "status " + s.status;
      const rec = s.record;
      const cells = rec ? Object.keys(rec.cells || {}).length : 0;
      const decided = rec ? Object.keys(rec.decisions || {}).length : 0;
      summary.textContent = `${s.name}: ${s.definition.candidates.length} candidates, ` +
        `${s.definition.stages.length} stages; ${cells} cells recorded, ${decided} stages decided` +
        (s.message ? ` (${s.message})` : "");
      if (shown || !rec || rec.status !== "finished") return ["SUCCEEDED", "FAILED", "STOPPED"].includes(s.status);
      const r = await fetch(s.links.record_md, { credentials: "same-origin" });
      if (!r.ok) return false;
      md.textContent = await r.text();
      img.src = s.links.record_png;
      img.hidden = false;
      shown = true;
      return true;
    };
    const tick = async () => {
      try {
        if (await load()) return;
      } catch (e) { error.textContent = String(e); }
      setTimeout(tick, 2000);
    };
    await tick();
  }

  window.hdetStudies = { studiesList, studyPage };
})();
