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

  // -- timeline of the representative step: one labelled lane per CPU thread and GPU stream ----
  // A time axis, the outer spans of each thread with their names written in (inner levels below,
  // at most LEVELS deep), each GPU stream's kernels with the idle gaps between them marked, and
  // the ops named by a finding outlined. Meant to be read at a normal window width.
  function shortName(name) {
    return name.replace(/^autograd::engine::evaluate_function: /, "bwd: ").replace(/^aten::/, "")
      .replace(/^torchneck@([^@]*)@(\d+)@.*$/, "line $2 ($1)").replace(/^void /, "").replace(/<.*$/, "");
  }
  function niceStep(span, ticks) {
    const raw = span / ticks, p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function timeline() {
    const host = document.getElementById("timeline");
    const tl = views.timeline;
    if (!tl || !tl.lanes || !tl.lanes.length) return empty(host, "No timeline (no trace or no steps).");
    const LEVELS = 3, ROW = 18, LABEL = 190, GAP_MIN = 0.02;
    const W = Math.max(720, Math.min(1400, host.clientWidth || 1100));
    const span = tl.duration_us || 1, scale = (W - LABEL - 10) / span;
    const x = (t) => LABEL + Math.max(0, Math.min(span, t)) * scale;
    const svg = svgEl("svg", { width: W, role: "img", "aria-label": "timeline of a typical step" });
    let y = 4;
    const caption = svgEl("text", { x: 0, y: y + 12, "font-size": 12, "font-weight": 600 });
    caption.textContent = `step ${tl.step}: ${ms(span)}` +
      (tl.events_dropped ? ` (${tl.events_dropped} shortest events not drawn)` : "");
    svg.appendChild(caption);
    y += 22;
    const tick = niceStep(span, 8);
    for (let t = 0; t <= span + 1e-9; t += tick) {
      svg.appendChild(svgEl("line", { x1: x(t), x2: x(t), y1: y, y2: y + 6, stroke: "#889" }));
      const lab = svgEl("text", { x: x(t) + 2, y: y + 16, "font-size": 10, fill: "#556" });
      lab.textContent = tick >= 1000 ? (t / 1e3).toFixed(tick >= 10000 ? 0 : 1) + " ms" : Math.round(t) + " µs";
      svg.appendChild(lab);
    }
    y += 22;
    const gridTop = y;
    const used = new Set();
    const lanes = tl.lanes.slice().sort((a, b) => (a.kind === b.kind ? 0 : a.kind === "cpu" ? -1 : 1));
    for (const lane of lanes) {
      const levels = Math.min(LEVELS, 1 + Math.max(0, ...lane.events.map((e) => e[4])));
      const height = levels * ROW + (lane.kind === "gpu" ? ROW : 0);
      svg.appendChild(svgEl("rect", { x: 0, y: y - 2, width: W, height: height + 4, fill: "#f7f8fa" }));
      const label = svgEl("text", { x: 4, y: y + 13, "font-size": 11 }, lane.name);
      label.textContent = lane.name.length > 28 ? lane.name.slice(0, 27) + "…" : lane.name;
      svg.appendChild(label);
      for (const [t, d, nid, cat, dep] of lane.events) {
        if (dep >= LEVELS) continue;
        const name = tl.names[nid];
        used.add(cat);
        const x0 = x(t), w = Math.max(1, x(t + d) - x0), top = y + dep * ROW;
        const flagged = flaggedOps.has(name);
        svg.appendChild(svgEl("rect", {
          x: x0, y: top, width: w, height: ROW - 3, rx: 2, fill: COLORS[cat] || "#999",
          class: "tl-ev" + (flagged ? " flagged" : ""),
        }, `${name}\n${cat} · ${ms(d)} at +${ms(t)}`));
        const text = shortName(name);
        if (w > 36) {
          const fit = Math.floor((w - 6) / 6.2);
          const light = ["annotation", "dataloader", "other", "memcpy"].includes(cat);
          const lab = svgEl("text", { x: x0 + 3, y: top + 11, "font-size": 10, fill: light ? "#222" : "#fff",
            class: "tl-label" });
          lab.textContent = text.length > fit ? text.slice(0, Math.max(1, fit - 1)) + "…" : text;
          svg.appendChild(lab);
        }
      }
      if (lane.kind === "gpu") {  // the stream's idle gaps, each at least GAP_MIN of the step
        const busy = lane.events.filter((e) => e[4] === 0).map((e) => [e[0], e[0] + e[1]]).sort((a, b) => a[0] - b[0]);
        let end = 0;
        const gapRow = y + levels * ROW;
        const gaps = [];
        for (const [s0, s1] of busy) { if (s0 > end) gaps.push([end, s0]); end = Math.max(end, s1); }
        if (end < span) gaps.push([end, span]);
        for (const [g0, g1] of gaps) {
          if (g1 - g0 < GAP_MIN * span) continue;
          const gx = x(g0), gw = x(g1) - gx;
          svg.appendChild(svgEl("rect", { x: gx, y: gapRow + 2, width: gw, height: ROW - 7, class: "tl-idle" },
            `GPU idle ${ms(g1 - g0)} at +${ms(g0)}`));
          if (gw > 60) {
            const lab = svgEl("text", { x: gx + 3, y: gapRow + 11, "font-size": 10, fill: "#a33" });
            lab.textContent = `idle ${ms(g1 - g0)}`;
            svg.appendChild(lab);
          }
        }
      }
      y += height + 10;
    }
    for (let t = 0; t <= span + 1e-9; t += tick) {
      svg.insertBefore(svgEl("line", { x1: x(t), x2: x(t), y1: gridTop, y2: y, stroke: "#e3e6ea" }),
        svg.childNodes[1]);
    }
    svg.setAttribute("height", y);
    host.appendChild(svg);
    legend(host, [...used]);
    host.appendChild(el("p", { class: "empty" },
      "Outer spans on top, the ops they call below; hover for names and times." +
      (flaggedOps.size ? " Outlined in red: ops named by a finding. Red bars under a GPU stream: idle gaps." : "")));
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
    // torch.compile: which ops and kernels ran inside a compiled graph (inductor-generated or ATen fallback)
    const origins = (rank0 && rank0.compiled && rank0.compiled.origins) || {};
    function origin(map, name) {
      const o = map && map[name];
      if (!o) return "";
      const ids = o.graphs || [];
      return (o.origin === "inductor" ? "inductor" : "ATen fallback") + (ids.length ? " (graph " + ids.slice(0, 3).join(", ") + ")" : "");
    }
    const hasOpOrigins = origins.ops && Object.keys(origins.ops).length > 0;
    const hasKernelOrigins = origins.kernels && Object.keys(origins.kernels).length > 0;
    if (ops) {
      const opRows = hasOpOrigins ? (ops.by_name || []).map((r) => Object.assign({}, r, { origin: origin(origins.ops, r.name) })) : (ops.by_name || []);
      specs.push({ id: "ops", title: "Ops by name", rows: opRows,
        cols: [["name", "op"], ["count", "count"], ["self_us", "self µs"], ["total_us", "total µs"], ["mean_us", "mean µs"]]
          .concat(hasOpOrigins ? [["origin", "in compiled graph"]] : []) });
      specs.push({ id: "shapes", title: "Ops by shape", rows: ops.by_shape || [],
        cols: [["name", "op"], ["shapes", "input shapes"], ["count", "count"], ["self_us", "self µs"]] });
    }
    if (DATA.ops_by_line && DATA.ops_by_line.length)
      specs.push({ id: "lines", title: "Ops by your line", rows: DATA.ops_by_line,
        cols: [["op", "op"], ["file", "file"], ["line", "line"], ["function", "function"], ["count", "count"], ["self_us", "self µs"], ["source", "from"]] });
    const gpu = rank0 && rank0.gpu;
    if (gpu && gpu.present && gpu.top_kernels)
      specs.push({ id: "kernels", title: "Kernels",
        rows: hasKernelOrigins ? gpu.top_kernels.map((r) => Object.assign({}, r, { origin: origin(origins.kernels, r.name) })) : gpu.top_kernels,
        cols: [["name", "kernel"], ["family", "family"], ["count", "count"], ["time_us", "time µs"], ["mean_us", "mean µs"]]
          .concat(hasKernelOrigins ? [["origin", "origin"]] : []) });
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
