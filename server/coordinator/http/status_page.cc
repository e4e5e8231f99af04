#include "server/coordinator/http/status_page.h"

namespace meshserve {
namespace {

constexpr char kHtml[] = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>meshserve status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#1d2330;background:#f6f7f9}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px}
.muted{color:#6b7280}.badge{display:inline-block;padding:1px 8px;border-radius:10px;
font-size:12px;font-weight:600;color:#fff}
.ok{background:#15803d}.warn{background:#b45309}.bad{background:#b91c1c}
#workers{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:10px}
.card{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:10px 12px}
.card b{font-size:15px}table{border-collapse:collapse;background:#fff;min-width:60%}
td,th{border:1px solid #d8dce3;padding:4px 10px;text-align:left}th{background:#eef0f4}
tr.model{cursor:pointer}tr.sel{background:#e0ecff}
#params{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
.param{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:8px 10px}
code{font:12px ui-monospace,monospace;white-space:nowrap}
td.state{max-width:420px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
</style></head><body>
<h1>meshserve <span id="ready" class="badge warn">…</span></h1>
<div class="muted" id="updated">loading /v1/status …</div>
<h2>Workers</h2><div id="workers"></div>
<h2>Models</h2>
<table><thead><tr><th>model</th><th>state</th><th>mesh</th><th>generation</th>
<th>requests</th><th>in flight</th></tr></thead><tbody id="models"></tbody></table>
<div id="generation-section" hidden><h2>Generation</h2>
<table><thead><tr><th>model</th><th>running</th><th>waiting</th><th>tokens</th>
<th>TTFT ms (mean · p50 · p99)</th><th>ITL ms (mean · p50 · p99)</th>
<th>KV cache per device</th></tr></thead><tbody id="generation"></tbody></table></div>
<h2 id="sharding-title">Sharding</h2><div id="params"></div>
<h2>Recent requests</h2>
<table><thead><tr><th>age</th><th>model</th><th>id</th><th>total ms</th>
<th>compute ms</th><th>status</th></tr></thead><tbody id="recent"></tbody></table>
<script>
"use strict";
// tab20, as matplotlib (and so JAX's visualize_array_sharding) colours tiles.
const COLORS=["#1f77b4","#aec7e8","#ff7f0e","#ffbb78","#2ca02c","#98df8a","#d62728",
"#ff9896","#9467bd","#c5b0d5","#8c564b","#c49c94","#e377c2","#f7b6d2","#7f7f7f",
"#c7c7c7","#bcbd22","#dbdb8d","#17becf","#9edae5"];
let chosen=decodeURIComponent((location.hash.match(/model=([^&]+)/)||[])[1]||"");
const esc=s=>String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
function light(hex){const n=parseInt(hex.slice(1),16);
  return ((n>>16)*299+((n>>8)&255)*587+(n&255)*114)/1000>150;}
function health(w){
  if(!w.alive)return["dead","bad"];if(w.suspect)return["suspect","warn"];
  if(w.warming)return["warming","warn"];
  if(w.draining)return["draining","warn"];return w.healthy?["healthy","ok"]:["no status","warn"];}
function workerCard(w){
  const [h,cls]=health(w);
  const hosted=w.placements.map(p=>esc(p.model)+": devices "+p.devices.join(",")).join("<br>");
  return `<div class="card worker" data-worker="${w.id}"><b>worker ${w.id}</b>
  <span class="badge ${cls}">${h}</span><div class="muted">${esc(w.address)}</div>
  <div>${w.cores} cores · ${(w.param_bytes/1048576).toFixed(1)} MiB params</div>
  <div>served ${w.requests_served??"?"} · heartbeat ${w.heartbeat_ms_ago} ms ago</div>
  <div class="muted">${hosted||"no devices"}</div></div>`;}
// One param's grid: column widths and row heights follow the shard extents.
function gridSvg(p,deviceWorkers){
  const g=p.grid,n=p.shape.length,d0=n>=2?p.shape[0]:1,d1=n>=2?p.shape[1]:(n?p.shape[0]:1);
  const W=240,H=Math.max(50,Math.min(240,Math.round(W*d0/d1*(n<2?0.25:1))));
  const x=g.cols.map(c=>[c[0]/d1*W,(c[1]-c[0])/d1*W]),y=g.rows.map(r=>[r[0]/d0*H,(r[1]-r[0])/d0*H]);
  let s=`<svg class="grid" width="${W+2}" height="${H+2}" viewBox="-1 -1 ${W+2} ${H+2}">`;
  for(const t of g.tiles){
    const c=COLORS[t.devices[0]%COLORS.length],[tx,tw]=x[t.col],[ty,th]=y[t.row];
    const label="CPU "+t.devices.join(",");
    const fs=Math.max(8,Math.min(13,tw/(label.length*0.62),th*0.45));
    const who=[...new Set(t.devices.map(d=>deviceWorkers[d]))].map(w=>"worker "+w).join(", ");
    s+=`<g class="tile"><title>${esc(label)} on ${esc(who)}</title>
    <rect x="${tx}" y="${ty}" width="${tw}" height="${th}" fill="${c}" stroke="#333" stroke-width="1"/>
    <text x="${tx+tw/2}" y="${ty+th/2}" font-size="${fs}" text-anchor="middle"
     dominant-baseline="central" fill="${light(c)?"#111":"#fff"}">${esc(label)}</text></g>`;}
  return s+"</svg>";}
// A latency summary in ms: "mean · p50 · p99", "-" before the first sample.
function lat(l){return l.count?[l.mean_ms,l.p50_ms,l.p99_ms].map(v=>v.toFixed(1)).join(" · "):"-";}
function kv(g){const mib=b=>(b/1048576).toFixed(1),cap=g.kv_cache_bytes_capacity;
  return `${mib(g.kv_cache_bytes_used)} / ${mib(cap)} MiB`+
    (cap?` (${(100*g.kv_cache_bytes_used/cap).toFixed(0)}%)`:"");}
function generationRows(models){
  return models.filter(m=>m.text_generation).map(m=>{const g=m.text_generation;
    return `<tr class="gen" data-model="${esc(m.name)}"><td>${esc(m.name)}</td>
    <td>${g.running}</td><td>${g.waiting}</td><td>${g.tokens_generated}</td>
    <td>${lat(g.time_to_first_token)}</td><td>${lat(g.inter_token)}</td>
    <td>${kv(g)}</td></tr>`;}).join("");}
function render(st){
  const ready=st.models.every(m=>m.ready||m.state.startsWith("error"));
  const r=document.getElementById("ready");r.textContent=ready?"ready":"not ready";
  r.className="badge "+(ready?"ok":"warn");
  document.getElementById("updated").textContent=`${st.workers.length} workers · `+
    `${st.models.length} models · updated ${new Date().toLocaleTimeString()}`;
  document.getElementById("workers").innerHTML=st.workers.map(workerCard).join("");
  if(!st.models.some(m=>m.name===chosen&&m.params)){
    const m=st.models.find(m=>m.params&&m.params.length);chosen=m?m.name:"";}
  document.getElementById("models").innerHTML=st.models.map(m=>
    `<tr class="model${m.name===chosen?" sel":""}" data-model="${esc(m.name)}">
    <td>${esc(m.name)}</td><td class="state" title="${esc(m.state)}">${esc(m.state)}</td><td><code>${esc(m.mesh||"-")}</code></td>
    <td>${m.generation}</td><td>${m.requests}</td><td>${m.in_flight}</td></tr>`).join("");
  const gen=generationRows(st.models);
  document.getElementById("generation").innerHTML=gen;
  document.getElementById("generation-section").hidden=!gen;
  for(const tr of document.querySelectorAll("tr.model"))
    tr.onclick=()=>{chosen=tr.dataset.model;location.hash="model="+encodeURIComponent(chosen);render(st);};
  const m=st.models.find(m=>m.name===chosen);
  document.getElementById("sharding-title").textContent=m?
    `Sharding of ${m.name} on mesh (${m.mesh})`:"Sharding (no placed model)";
  document.getElementById("params").innerHTML=!m?"":m.params.map(p=>
    `<div class="param" data-param="${esc(p.name)}"><b>${esc(p.name)}</b>
    <div><code>${esc(p.dtype)}[${p.shape.join(",")}] ${esc(p.spec)}</code></div>
    ${p.grid?gridSvg(p,m.device_workers):"<div class='muted'>"+esc(p.grid_error)+"</div>"}
    ${p.grid&&p.grid.folded_dims?`<div class="muted">dims 2.. not drawn</div>`:""}</div>`).join("");
  document.getElementById("recent").innerHTML=st.recent.slice(0,15).map(q=>
    `<tr><td>${(q.age_ms/1000).toFixed(1)} s</td><td>${esc(q.model)}</td><td>${esc(q.id)}</td>
    <td>${q.total_ms.toFixed(2)}</td><td>${q.compute_ms.toFixed(2)}</td>
    <td>${q.code==="OK"?"OK":`<span title="${esc(q.error)}">${esc(q.code)}</span>`}</td></tr>`).join("");}
async function tick(){
  try{const res=await fetch("/v1/status",{cache:"no-store"});render(await res.json());}
  catch(e){document.getElementById("updated").textContent="cannot reach the coordinator: "+e;}
  setTimeout(tick,1000);}
tick();
</script></body></html>
)HTML";

}  // namespace

absl::string_view StatusPageHtml() { return kHtml; }

}  // namespace meshserve
