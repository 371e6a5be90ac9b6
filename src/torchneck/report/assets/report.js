// torchneck report: charts and tables drawn from the embedded report data.
// Every string from the data is inserted with textContent / createTextNode, never as HTML.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("torchneck-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = {
    kernel: "#4e79a7", memcpy: "#f28e2b", memset: "#e15759", communication: "#76b7b2", runtime: "#59a14f",
    dataloader: "#edc948", cpu_exec: "#b07aa1", other: "#bab0ac", op: "#9c755f", annotation: "#d3d3d3",
    sync: "#e15759",
  };

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function svgEl(tag, attrs, title) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (title) { const t = document.createElementNS(SVG, "title"); t.textContent = title; node.appendChild(t); }
    return node;
  }
  function empty(host, text) { host.appendChild(el("p", { class: "empty" }, text)); }
  function ms(us) { return (us / 1e3).toFixed(2) + " ms"; }
  function fmtBytes(b) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return b.toFixed(i ? 1 : 0) + " " + u[i];
  }
  function legend(host, keys) {
    const box = el("div", { class: "legend" });
    for (const k of keys) {
      const item = el("span"); const sw = el("i"); sw.style.background = COLORS[k] || "#999";
      item.appendChild(sw); item.appendChild(document.createTextNode(k.replace("_", " "))); box.appendChild(item);
    }
    host.appendChild(box);
  }
  const rank0 = (DATA.ranks && DATA.ranks[0]) || null;
  const views = DATA.views || {};
  const flaggedOps = new Set();
  for (const f of DATA.findings || []) for (const o of f.ops || []) flaggedOps.add(o);

  // -- step time breakdown: one stacked bar per profiled step ---------------------------------
  function stepChart() {
    const host = document.getElementById("step-chart");
    const items = rank0 && rank0.steps ? rank0.steps.items : [];
    if (!items || !items.length) return empty(host, "No steps in the trace.");
    const cats = Object.keys(items[0].breakdown_us);
    const max = Math.max(...items.map((s) => s.duration_us)) || 1;
    const bw = Math.max(8, Math.min(48, Math.floor(900 / items.length) - 4));
    const W = Math.max(300, items.length * (bw + 4) + 60), H = 220;
    const svg = svgEl("svg", { width: W, height: H + 30, role: "img", "aria-label": "step time breakdown" });
    svg.appendChild(svgEl("text", { x: 0, y: 12, "font-size": 11 })).textContent = ms(max);
    items.forEach((s, i) => {
      let y = H;
      const x = 50 + i * (bw + 4);
      for (const c of cats) {
        const h = (s.breakdown_us[c] / max) * (H - 20);
        if (h <= 0) continue;
        y -= h;
        svg.appendChild(svgEl("rect", { x, y, width: bw, height: h, fill: COLORS[c] || "#999", class: "step-bar" },
          `step ${s.index}: ${c.replace("_", " ")} ${ms(s.breakdown_us[c])} of ${ms(s.duration_us)}`));
      }
      const label = svgEl("text", { x: x + bw / 2, y: H + 14, "font-size": 10, "text-anchor": "middle" });
      label.textContent = String(s.index); svg.appendChild(label);
    });
    host.appendChild(svg);
    legend(host, cats.filter((c) => items.some((s) => s.breakdown_us[c] > 0)));
  }

  // -- timeline of the representative step ----------------------------------------------------
  function timeline() {
    const host = document.getElementById("timeline");
    const tl = views.timeline;
    if (!tl || !tl.lanes || !tl.lanes.length) return empty(host, "No timeline (no trace or no steps).");
    const W = 1100, LABEL = 150, ROW = 14, MAXDEPTH = 10;
    const scale = (W - LABEL) / (tl.duration_us || 1);
    let y = 20;
    const svg = svgEl("svg", { width: W, role: "img", "aria-label": "timeline" });
    const caption = svgEl("text", { x: 0, y: 12, "font-size": 11 });
    caption.textContent = `step ${tl.step}: ${ms(tl.duration_us)}` +
      (tl.events_dropped ? ` (${tl.events_dropped} shortest events not drawn)` : "");
    svg.appendChild(caption);
    const used = new Set();
    for (const lane of tl.lanes) {
      const depth = Math.min(MAXDEPTH, 1 + Math.max(0, ...lane.events.map((e) => e[4])));
      const label = svgEl("text", { x: 0, y: y + 11, "font-size": 11 });
      label.textContent = lane.name.length > 22 ? lane.name.slice(0, 21) + "…" : lane.name;
      svg.appendChild(label);
      for (const [t, d, nid, cat, dep] of lane.events) {
        if (dep >= MAXDEPTH) continue;
        const name = tl.names[nid];
        used.add(cat);
        const cls = "tl-ev" + (flaggedOps.has(name) ? " flagged" : "");
        svg.appendChild(svgEl("rect", {
          x: LABEL + t * scale, y: y + dep * ROW, width: Math.max(0.5, d * scale), height: ROW - 2,
          fill: COLORS[cat] || "#999", class: cls,
        }, `${name}\n${cat} · ${(d / 1e3).toFixed(3)} ms at +${(t / 1e3).toFixed(3)} ms`));
      }
      y += depth * ROW + 8;
    }
    svg.setAttribute("height", y);
    host.appendChild(svg);
    legend(host, [...used]);
    if (flaggedOps.size) host.appendChild(el("p", { class: "empty" }, "Outlined: ops named by a finding."));
  }

  // -- flame graph (icicle) of the sampled Python stacks; click a frame to zoom ----------------
  function flame() {
    const host = document.getElementById("flame");
    const trees = [["profiled steps", views.stacks_window], ["whole run", views.stacks]].filter(([, t]) => t && t.s);
    if (!trees.length) return empty(host, "No Python samples.");
    const choose = el("div", { class: "tabs" });
    const box = el("div", { class: "flame" });
    if (trees.length > 1) host.appendChild(choose);
    host.appendChild(box);
    const ROWH = 18, MAXDEPTH = 48;
    let root = trees[0][1];
    function draw(top) {
      box.textContent = "";
      let maxDepth = 0;
      function place(node, x0, width, depth) {
        if (depth > MAXDEPTH) return;
        maxDepth = Math.max(maxDepth, depth);
        const where = node.file ? `${node.file}:${node.line}` : "";
        const div = el("div", { class: "node " + (depth === 0 ? "root" : node.user ? "user" : "lib") },
          node.name + (where ? "  " + where.split("/").slice(-1)[0] : ""));
        div.style.left = x0 + "%"; div.style.width = width + "%"; div.style.top = depth * ROWH + "px";
        div.title = `${node.name}  ${where}\n${node.s.toFixed(3)} s (${(100 * node.s / root.s).toFixed(1)}% of samples)`;
        div.addEventListener("click", (ev) => { ev.stopPropagation(); draw(depth === 0 && top !== root ? root : node); });
        box.appendChild(div);
        let x = x0;
        for (const c of node.children || []) {
          const w = width * (c.s / (node.s || 1));
          if (w < 0.15) continue;
          place(c, x, w, depth + 1);
          x += w;
        }
      }
      place(top, 0, 100, 0);
      box.style.height = (maxDepth + 1) * ROWH + "px";
    }
    trees.forEach(([label, tree], i) => {
      const b = el("button", { type: "button", "data-flame": label }, label);
      b.addEventListener("click", () => {
        for (const x of choose.children) x.classList.remove("active");
        b.classList.add("active");
        root = tree;
        draw(root);
      });
      if (i === 0) b.classList.add("active");
      choose.appendChild(b);
    });
    draw(root);
    host.appendChild(el("p", { class: "empty" }, "Orange: your code; grey: libraries. Click a frame to zoom, the top bar to reset."));
  }

  // -- memory over the profiled steps -----------------------------------------------------------
  function memory() {
    const host = document.getElementById("memory");
    const series = views.memory || [];
    if (!series.length) return empty(host, "No memory events recorded.");
    const W = 1000, H = 180, L = 70;
    for (const s of series) {
      if (!s.t_us.length) continue;
      const tmax = Math.max(...s.t_us) || 1, bmax = Math.max(...s.bytes) || 1;
      const svg = svgEl("svg", { width: W, height: H + 20, role: "img", "aria-label": "memory " + s.device });
      const pts = s.t_us.map((t, i) => `${L + (t / tmax) * (W - L)},${H - (s.bytes[i] / bmax) * (H - 10)}`).join(" ");
      svg.appendChild(svgEl("polyline", { points: pts, fill: "none", stroke: "#4e79a7", "stroke-width": 1.5 }));
      const a = svgEl("text", { x: 0, y: 12, "font-size": 11 }); a.textContent = fmtBytes(bmax); svg.appendChild(a);
      const b = svgEl("text", { x: 0, y: H + 14, "font-size": 11 }); b.textContent = `${s.device}, ${ms(tmax)}`;
      svg.appendChild(b);
      host.appendChild(svg);
    }
  }

  // -- sortable, filterable tables ----------------------------------------------------------------
  function tables() {
    const specs = [];
    const ops = rank0 && rank0.ops;
    if (ops) {
      specs.push({ id: "ops", title: "Ops by name", rows: ops.by_name || [],
        cols: [["name", "op"], ["count", "count"], ["self_us", "self µs"], ["total_us", "total µs"], ["mean_us", "mean µs"]] });
      specs.push({ id: "shapes", title: "Ops by shape", rows: ops.by_shape || [],
        cols: [["name", "op"], ["shapes", "input shapes"], ["count", "count"], ["self_us", "self µs"]] });
    }
    if (DATA.ops_by_line && DATA.ops_by_line.length)
      specs.push({ id: "lines", title: "Ops by your line", rows: DATA.ops_by_line,
        cols: [["op", "op"], ["file", "file"], ["line", "line"], ["function", "function"], ["count", "count"], ["self_us", "self µs"], ["source", "from"]] });
    const gpu = rank0 && rank0.gpu;
    if (gpu && gpu.present && gpu.top_kernels)
      specs.push({ id: "kernels", title: "Kernels", rows: gpu.top_kernels,
        cols: [["name", "kernel"], ["family", "family"], ["count", "count"], ["time_us", "time µs"], ["mean_us", "mean µs"]] });
    const py = DATA.python && (DATA.python.window || DATA.python.whole_run);
    if (py && py.lines && py.lines.length)
      specs.push({ id: "python", title: "Python lines", rows: py.lines,
        cols: [["file", "file"], ["line", "line"], ["function", "function"], ["total_s", "total s"], ["self_s", "self s"], ["outside_ops_s", "outside ops s"]] });
    const dist = DATA.distributed;
    if (dist && dist.ranks && dist.ranks.length) {
      const straggler = dist.straggler ? dist.straggler.rank : null;
      const flagged = new Set((dist.stragglers || []).map((r) => r.rank));
      const rows = dist.ranks.map((r) => ({
        rank: r.rank, straggler: r.rank === straggler || flagged.has(r.rank) ? "yes" : "", host: r.host || "",
        status: r.status || "", steps: r.steps,
        median_step_ms: r.median_step_us ? r.median_step_us / 1e3 : null,
        collectives_ms_per_step: r.comm && r.comm.present ? r.comm.per_step_us / 1e3 : null,
        late_ms_per_step: r.lateness_us != null ? r.lateness_us / 1e3 : null,
        top_collective: r.comm && r.comm.by_type && r.comm.by_type.length ? r.comm.by_type[0].type : "",
      }));
      specs.unshift({ id: "ranks", title: "Ranks", rows, cols: Object.keys(rows[0]).map((k) => [k, k.replaceAll("_", " ")]) });
    }
    if (DATA.diff) for (const [key, title] of [["findings", "Findings: A → B"], ["ops", "Ops that changed most"], ["kernels", "Kernels that changed most"], ["python", "Python lines that moved"]]) {
      const rows = DATA.diff[key] || [];
      if (rows.length) specs.push({ id: "diff-" + key, title, rows, cols: Object.keys(rows[0]).map((k) => [k, k]) });
    }
    const area = document.getElementById("table-area");
    const filter = document.getElementById("table-filter");
    if (!specs.length) { filter.style.display = "none"; return empty(area, "No tables."); }
    const tabs = el("div", { class: "tabs" });
    area.appendChild(tabs);
    const holder = el("div");
    area.appendChild(holder);
    let current = null;
    function show(spec, button) {
      for (const b of tabs.children) b.classList.remove("active");
      button.classList.add("active");
      holder.textContent = "";
      current = buildTable(spec);
      holder.appendChild(current);
      applyFilter();
    }
    function applyFilter() {
      if (!current) return;
      const q = filter.value.trim().toLowerCase();
      for (const tr of current.tBodies[0].rows) tr.style.display = !q || tr.textContent.toLowerCase().includes(q) ? "" : "none";
    }
    filter.addEventListener("input", applyFilter);
    specs.forEach((spec, i) => {
      const b = el("button", { type: "button", "data-table": spec.id }, spec.title);
      b.addEventListener("click", () => show(spec, b));
      tabs.appendChild(b);
      if (i === 0) show(spec, b);
    });
  }

  function buildTable(spec) {
    const table = el("table", { class: "data", id: "table-" + spec.id });
    const head = table.createTHead().insertRow();
    const body = table.createTBody();
    const numeric = spec.cols.map(([k]) => spec.rows.some((r) => typeof r[k] === "number"));
    function cell(v) {
      if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(v >= 100 ? 1 : 3);
      if (v === null || v === undefined) return "";
      return typeof v === "object" ? JSON.stringify(v) : String(v);
    }
    function fill(rows) {
      body.textContent = "";
      for (const r of rows) {
        const tr = body.insertRow();
        spec.cols.forEach(([k], j) => { const td = tr.insertCell(); td.textContent = cell(r[k]); if (numeric[j]) td.className = "num"; });
      }
    }
    let sortKey = null, asc = true;
    spec.cols.forEach(([k, title], j) => {
      const th = el("th", { "data-key": k }, title);
      th.addEventListener("click", () => {
        asc = sortKey === k ? !asc : !numeric[j];
        sortKey = k;
        for (const h of head.cells) h.classList.remove("sorted-asc", "sorted-desc");
        th.classList.add(asc ? "sorted-asc" : "sorted-desc");
        const rows = spec.rows.slice().sort((a, b) => {
          const x = a[k], y = b[k];
          const c = typeof x === "number" && typeof y === "number" ? x - y : cell(x).localeCompare(cell(y));
          return asc ? c : -c;
        });
        fill(rows);
        const f = document.getElementById("table-filter");
        if (f) f.dispatchEvent(new Event("input"));
      });
      head.appendChild(th);
    });
    fill(spec.rows);
    return table;
  }

  for (const draw of [stepChart, timeline, flame, memory, tables]) {
    try { draw(); } catch (err) {
      console.error("torchneck report: " + draw.name + " failed", err);
    }
  }
})();
