// clustersim explore: reads the controls, asks the server for the step, draws what it says.
// It computes nothing: every number comes from /api/step (the simulator's Python API).
"use strict";

const CONTROLS = ["scenario", "gpus", "fabric", "tp", "pp", "dp", "cp", "zero", "mb", "seq", "precision"];
const PART_NAMES = {
  compute: "compute", tp_comm_exposed: "exposed TP comm", cp_comm_exposed: "exposed CP comm",
  ep_comm: "expert all-to-all", zero3_gather_exposed: "exposed ZeRO-3 gathers",
  pipeline_bubble: "pipeline bubble", pp_comm_exposed: "exposed pipeline sends",
  dp_comm_exposed: "exposed DP comm", optimizer: "optimizer", param_gather: "param all-gather",
  outer_optimizer: "outer optimizer",
};
const GIB = 2 ** 30;
let pending = null;
let generation = 0;

function el(id) { return document.getElementById(id); }

function fill(select, values, keepFirst) {
  const first = keepFirst ? [select.options[0]] : [];
  select.replaceChildren(...first);
  for (const v of values) {
    const o = document.createElement("option");
    o.value = String(v); o.textContent = String(v);
    select.appendChild(o);
  }
}

function readControls() {
  const params = new URLSearchParams();
  for (const name of CONTROLS) {
    const v = el(name).value.trim();
    if (v !== "") params.set(name, v);
  }
  return params;
}

function writeControls(params) {
  for (const name of CONTROLS) {
    if (params.has(name)) el(name).value = params.get(name);
  }
}

function seconds(s) {
  if (s < 1e-3) return (s * 1e6).toPrecision(3) + " µs";
  if (s < 1) return (s * 1e3).toPrecision(3) + " ms";
  return s.toPrecision(4) + " s";
}

function rate(x) {
  for (const [u, k] of [["G", 1e9], ["M", 1e6], ["k", 1e3]]) if (x >= k) return (x / k).toPrecision(3) + u;
  return x.toPrecision(3);
}

function drawBreakdown(r) {
  const traces = Object.entries(r.breakdown).filter(([, v]) => v > 0).map(([k, v]) => ({
    type: "bar", orientation: "h", name: PART_NAMES[k] || k, x: [v], y: ["step"],
    hovertemplate: `${PART_NAMES[k] || k}: ${seconds(v)} (${(100 * v / r.step_time_s).toFixed(1)}%)<extra></extra>`,
  }));
  Plotly.react("breakdown", traces, {
    title: { text: `Where the ${seconds(r.step_time_s)} step goes` }, barmode: "stack",
    xaxis: { title: { text: "seconds" } }, yaxis: { visible: false }, height: 320,
    legend: { orientation: "h", y: -0.3 }, margin: { l: 20, r: 20, t: 50, b: 40 },
  }, { displayModeBar: false, responsive: true });
}

function drawMemory(r, hbm) {
  const traces = Object.entries(r.memory_breakdown).filter(([, v]) => v > 0).map(([k, v]) => ({
    type: "bar", orientation: "h", name: k, x: [v / GIB], y: ["GPU"],
    hovertemplate: `${k}: ${(v / GIB).toFixed(2)} GiB<extra></extra>`,
  }));
  const fits = r.fits ? "fits" : "DOES NOT FIT";
  Plotly.react("memory-chart", traces, {
    title: { text: `Memory of the fullest GPU: ${(r.memory_per_gpu_bytes / GIB).toFixed(1)} of ${(hbm / GIB).toFixed(1)} GiB (${fits})` },
    barmode: "stack", xaxis: { title: { text: "GiB" }, range: [0, 1.1 * Math.max(hbm, r.memory_per_gpu_bytes) / GIB] },
    yaxis: { visible: false }, height: 320, legend: { orientation: "h", y: -0.3 },
    shapes: [{ type: "line", x0: hbm / GIB, x1: hbm / GIB, y0: -0.5, y1: 0.5, line: { color: "#c0392b", dash: "dash", width: 2 } }],
    margin: { l: 20, r: 20, t: 50, b: 40 },
  }, { displayModeBar: false, responsive: true });
}

function drawTimeline(timeline) {
  const kinds = {};
  for (const line of timeline) {
    for (const p of line.passes) {
      const t = kinds[p.kind] || (kinds[p.kind] = { type: "bar", orientation: "h", name: p.kind === "F" ? "forward" : p.kind === "B" ? "backward" : p.kind, x: [], base: [], y: [], text: [], textposition: "none", hovertemplate: "%{text}<extra></extra>" });
      t.x.push(p.end_s - p.start_s); t.base.push(p.start_s); t.y.push(`stage ${line.stage}`);
      t.text.push(`stage ${line.stage} ${p.kind} micro-batch ${p.mb}${p.chunk ? " chunk " + p.chunk : ""}: ${seconds(p.start_s)} to ${seconds(p.end_s)}`);
    }
  }
  const stages = timeline.map((l) => `stage ${l.stage}`);
  Plotly.react("timeline", Object.values(kinds), {
    title: { text: timeline.length ? "Pipeline timeline per stage (forward and backward passes of each micro-batch)" : "No pipeline timeline for this model" },
    barmode: "overlay", xaxis: { title: { text: "seconds from the step's start" } },
    yaxis: { categoryorder: "array", categoryarray: stages.slice().reverse() },
    height: Math.max(240, 90 + 40 * stages.length), margin: { l: 70, r: 20, t: 50, b: 40 },
  }, { displayModeBar: false, responsive: true });
}

function show(data) {
  const r = data.result;
  el("step-time").textContent = seconds(r.step_time_s);
  el("throughput").textContent = `${rate(r.tokens_per_s)} ${data.throughput_unit}`;
  el("mfu").textContent = `${(100 * r.mfu).toFixed(1)}%`;
  el("memory").textContent = `${(r.memory_per_gpu_bytes / GIB).toFixed(1)} GiB${r.fits ? "" : " (does not fit)"}`;
  el("cost").textContent = r.cost_per_step_usd == null ? "no price" : `$${r.cost_per_step_usd.toFixed(4)} per step`;
  el("plan").textContent = `${data.scenario}: ${r.gpus} x ${r.gpu} on ${r.topology}; ` +
    Object.entries(r.plan).filter(([k]) => ["tp", "pp", "dp", "cp", "zero", "micro_batch", "micro_batches", "recompute"].includes(k))
      .map(([k, v]) => `${k}=${v}`).join(" ");
  el("breakdown").dataset.breakdown = JSON.stringify(r.breakdown);
  drawBreakdown(r);
  drawMemory(r, data.hbm_bytes);
  drawTimeline(data.timeline);
  el("notes").replaceChildren(...[...data.notes, ...r.notes].map((n) => { const li = document.createElement("li"); li.textContent = n; return li; }));
}

async function update() {
  const params = readControls();
  history.replaceState(null, "", "?" + params.toString());
  const mine = ++generation;
  document.body.classList.add("busy");
  try {
    const reply = await fetch("/api/step?" + params.toString());
    const data = await reply.json();
    if (mine !== generation) return;  // a newer change is on its way
    if (data.error) {
      el("error").textContent = data.error;
    } else {
      el("error").textContent = "";
      show(data);
    }
    document.body.dataset.updated = String(mine);
  } finally {
    if (mine === generation) document.body.classList.remove("busy");
  }
}

function schedule() {
  clearTimeout(pending);
  pending = setTimeout(update, 120);
}

async function start() {
  const opts = await (await fetch("/api/options")).json();
  fill(el("scenario"), [...opts.scenarios, ...opts.studies], false);
  fill(el("fabric"), opts.fabrics, true);
  fill(el("zero"), opts.zero, true);
  fill(el("precision"), opts.precisions, true);
  const params = new URLSearchParams(location.search);
  if (!params.has("scenario")) params.set("scenario", "llama3-8b-dgx");
  writeControls(params);
  for (const name of CONTROLS) {
    el(name).addEventListener("change", schedule);
    el(name).addEventListener("input", schedule);
  }
  await update();
}

start();
