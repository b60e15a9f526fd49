/* report_html.c: report.html, one self-contained page per run (see report_html.h). The page is a
 * fixed template (HTML_HEAD, HTML_TAIL: markup, style and the drawing script, no network) around
 * one JSON object with the run's figures, built with cJSON. */
#include "report_html.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report.h"
#include "scenario.h"

/* The template. The script reads the JSON from #vrsim-data, draws the summary, the timeline
 * (stacked categories, allocated and reserved lines, phase band, step, peak and OOM marks),
 * the breakdown, the live tensors and the segment map, then sets <body data-ok="1">. */
static const char HTML_HEAD[] =
    "<!DOCTYPE html>\n"
    "<html lang=\"en\">\n"
    "<head>\n"
    "<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>vrsim report</title>\n"
    "<style>\n"
    "body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto; max-width: 1180px; color: #1d2330; padding: 0 16px; }\n"
    "h1 { font-size: 22px; margin: 0 0 4px; }\n"
    "h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #dde2ea; padding-bottom: 4px; }\n"
    ".sub { color: #5a6475; margin: 2px 0; }\n"
    ".verdict { font-size: 17px; font-weight: 600; margin: 12px 0 6px; }\n"
    ".fits { color: #1b7a3a; } .oom { color: #b3261e; }\n"
    ".err { color: #b3261e; font-weight: 600; }\n"
    "table { border-collapse: collapse; margin: 6px 0; }\n"
    "td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }\n"
    "th { color: #5a6475; font-weight: 600; }\n"
    "td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }\n"
    ".legend span { display: inline-block; margin-right: 14px; white-space: nowrap; }\n"
    ".legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px; vertical-align: -1px; border-radius: 2px; }\n"
    "#tip { position: fixed; pointer-events: none; background: rgba(29,35,48,.92); color: #fff; padding: 6px 8px; border-radius: 4px; font-size: 12px; display: none; white-space: pre; z-index: 5; }\n"
    "svg text { font: 11px system-ui, sans-serif; fill: #3a4252; }\n"
    ".bar { display: inline-block; height: 10px; background: #5b8def; vertical-align: middle; border-radius: 2px; }\n"
    ".note { color: #5a6475; font-size: 12.5px; }\n"
    "</style>\n"
    "</head>\n"
    "<body>\n"
    "<h1 id=\"title\">vrsim report</h1>\n"
    "<p id=\"err\" class=\"err\"></p>\n"
    "<div id=\"summary\"></div>\n"
    "<h2>What would help</h2>\n"
    "<div id=\"variants\"></div>\n"
    "<h2>Memory over the run</h2>\n"
    "<p class=\"note\">Allocated memory stacked by category, with PyTorch's reserved memory (what the caching allocator holds from CUDA) as a line. The band above the chart shows the phase of the op running; hover for details.</p>\n"
    "<div id=\"timeline\"></div>\n"
    "<h2>Breakdown at peak</h2>\n"
    "<div id=\"breakdown\"></div>\n"
    "<h2>Largest tensors live at peak</h2>\n"
    "<div id=\"live\"></div>\n"
    "<h2>Segment map at peak</h2>\n"
    "<p class=\"note\">Every segment the allocator holds from cudaMalloc, in address order, wrapped into rows; blocks in use are blue (large pool) or violet (small pool), cached free blocks orange. Free blocks are reserved but unusable for a request larger than the gap: that is allocator slack.</p>\n"
    "<div id=\"segments\"></div>\n"
    "<div id=\"tip\"></div>\n"
    "<script type=\"application/json\" id=\"vrsim-data\">\n";

static const char HTML_TAIL[] =
    "</script>\n"
    "<script>\n"
    "(function () {\n"
    "  'use strict';\n"
    "  var NS = 'http://www.w3.org/2000/svg';\n"
    "  var CAT_COLORS = { parameters: '#4c78a8', gradients: '#f58518', optimizer_state: '#54a24b',\n"
    "    activations: '#e45756', temporaries: '#b279a2', allocator_slack: '#bab0ac', cuda_context: '#9d755d' };\n"
    "  var PHASE_COLORS = { build: '#9aa3b2', forward: '#4c9be8', backward: '#f0a23b', recompute: '#c77dd8',\n"
    "    optimizer: '#3fae6a', zero_grad: '#b9c0cc', communication: '#e0605a' };\n"
    "  var EXTRA = ['#72b7b2', '#eeca3b', '#ff9da6', '#9c755f', '#79706e'];\n"
    "  // streams as the engine numbers them (graph.h STREAM_COUNT): 0 compute, then the others\n"
    "  var STREAMS = ['compute', 'collectives', 'host to device', 'device to host', 'reduce-scatter', 'symmetric memory'];\n"
    "  var STREAM_COLORS = ['', '#e0605a', '#8c6bb1', '#6b8cb1', '#d9843b', '#c0504d'];\n"
    "  function color(map, name, i) { return map[name] || EXTRA[i % EXTRA.length]; }\n"
    "  function svg(tag, attrs, parent) {\n"
    "    var e = document.createElementNS(NS, tag);\n"
    "    for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "    if (parent) parent.appendChild(e);\n"
    "    return e;\n"
    "  }\n"
    "  function html(tag, text, parent, cls) {\n"
    "    var e = document.createElement(tag);\n"
    "    if (text !== undefined && text !== null) e.textContent = text;\n"
    "    if (cls) e.className = cls;\n"
    "    if (parent) parent.appendChild(e);\n"
    "    return e;\n"
    "  }\n"
    "  function gib(b) { return (b / 1073741824).toFixed(2) + ' GiB'; }\n"
    "  function mib(b) { return (b / 1048576).toFixed(1) + ' MiB'; }\n"
    "  function size(b) { return b >= 1073741824 ? gib(b) : mib(b); }\n"
    "  function pretty(s) { return s.replace(/_/g, ' '); }\n"
    "\n"
    "  function summary(D) {\n"
    "    document.title = 'vrsim: ' + D.scenario;\n"
    "    document.getElementById('title').textContent = 'vrsim: ' + D.scenario;\n"
    "    var s = document.getElementById('summary');\n"
    "    if (D.title) html('p', D.title + (D.overrides ? ' (with --set ' + D.overrides + ')' : ''), s, 'sub');\n"
    "    else if (D.overrides) html('p', 'with --set ' + D.overrides, s, 'sub');\n"
    "    html('p', D.model + ' on ' + D.gpu_name + ' (' + D.gpus + ' GPU' + (D.gpus === 1 ? '' : 's') + ')', s, 'sub');\n"
    "    html('p', D.settings, s, 'sub');\n"
    "    var v;\n"
    "    if (D.fits) {\n"
    "      var w = D.worst || D.step;\n"
    "      v = 'FITS: peak reserved ' + gib(w.peak_reserved) + ' of ' + gib(D.capacity) + ' usable (' +\n"
    "        (100 * w.peak_reserved / D.capacity).toFixed(1) + ' %), ' + gib(Math.max(0, D.capacity - w.peak_reserved)) + ' headroom' +\n"
    "        (D.worst && D.worst.index !== D.step.index ? ', at step ' + D.worst.index + ' (its worst)' : '');\n"
    "      if (D.retries > 0) v += '; fits only after the allocator freed its cache and retried, ' + D.retries + (D.retries === 1 ? ' time' : ' times');\n"
    "    } else {\n"
    "      v = 'DOES NOT FIT: CUDA out of memory ' + (D.oom.step < 0 ? 'while building the model' :\n"
    "        'in step ' + D.oom.step) + ' at ' + D.oom.op + ' (tried to allocate ' + mib(D.oom.requested) +\n"
    "        '; ' + gib(D.oom.allocated) + ' allocated, ' + gib(D.oom.reserved_unallocated) + ' reserved but unallocated)';\n"
    "    }\n"
    "    html('p', v, s, 'verdict ' + (D.fits ? 'fits' : 'oom'));\n"
    "    if (!D.step) return;\n"
    "    var t = html('table', null, s);\n"
    "    var rows = [['step', D.step.index + (D.fits ? ' (steady state)' : ' (failed)')],\n"
    "      ['peak allocated', gib(D.step.peak_allocated)], ['peak reserved', gib(D.step.peak_reserved)],\n"
    "      ['capacity', gib(D.capacity) + ' (after ' + mib(D.context_bytes) + ' of CUDA context)']];\n"
    "    if (D.step.peak_op) rows.push(['peak at', D.step.peak_op + ' (' + D.step.peak_phase + ')']);\n"
    "    if (D.deepspeed) rows.push(['DeepSpeed config', D.deepspeed.read + (D.deepspeed.unknown ? '; keys DeepSpeed does not know: ' + D.deepspeed.unknown : '')]);\n"
    "    if (D.notes) rows.push(['notes', D.notes]);\n"
    "    if (!D.fits) rows.push(['live tensors, breakdown, segments', 'at the out-of-memory error']);\n"
    "    if (D.step.step_ms > 0) rows.push(['step time', D.step.step_ms.toFixed(1) + ' ms (' + D.cost_source + ')' +\n"
    "      (D.tokens_per_s > 0 ? ', ' + Math.round(D.tokens_per_s) + ' tokens/s per GPU' : '')]);\n"
    "    rows.forEach(function (r) { var tr = html('tr', null, t); html('th', r[0], tr); html('td', r[1], tr); });\n"
    "  }\n"
    "\n"
    "  function timeline(D) {\n"
    "    var S = D.samples, n = S.t.length, box = document.getElementById('timeline');\n"
    "    if (!n) { html('p', 'No timeline: the run recorded no memory samples.', box, 'note'); return; }\n"
    "    var rowsUsed = {};\n"
    "    D.bands.forEach(function (b) { rowsUsed[b[4] || 0] = 1; });\n"
    "    var streams = Object.keys(rowsUsed).map(Number).sort(function (a, b) { return a - b; });\n"
    "    if (!streams.length) streams = [0];\n"
    "    var rowOf = {};\n"
    "    streams.forEach(function (s, i) { rowOf[s] = i; });\n"
    "    var W = 1140, ml = 92, mr = 16, mt = 18 + 14 * streams.length, mb = 40, ph = 360, H = mt + ph + mb, pw = W - ml - mr;\n"
    "    var tmax = S.t[n - 1] || 1, ymax = 0, i, c;\n"
    "    for (i = 0; i < n; i++) ymax = Math.max(ymax, S.r[i], S.a[i]);\n"
    "    var capM = D.capacity / 1048576;\n"
    "    if (capM > 0 && capM < ymax * 1.6) ymax = Math.max(ymax, capM);\n"
    "    ymax = ymax * 1.06 || 1;\n"
    "    var root = svg('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, id: 'timeline-svg' }, box);\n"
    "    function X(t) { return ml + pw * t / tmax; }\n"
    "    function Y(m) { return mt + ph - ph * m / ymax; }\n"
    "    // y grid in GiB\n"
    "    var stepG = [1, 2, 5, 10, 20, 50, 100, 200, 500].find(function (g) { return ymax / 1024 / g <= 8; }) || 1000;\n"
    "    for (var g = 0; g * 1024 <= ymax; g += stepG) {\n"
    "      svg('line', { x1: ml, x2: ml + pw, y1: Y(g * 1024), y2: Y(g * 1024), stroke: '#e6e9ef' }, root);\n"
    "      svg('text', { x: ml - 6, y: Y(g * 1024) + 4, 'text-anchor': 'end' }, root).textContent = g + ' GiB';\n"
    "    }\n"
    "    for (i = 0; i <= 10; i++) {\n"
    "      var tx = tmax * i / 10;\n"
    "      svg('text', { x: X(tx), y: mt + ph + 16, 'text-anchor': 'middle' }, root).textContent =\n"
    "        tmax >= 10000 ? (tx / 1000).toFixed(1) + ' s' : tx.toFixed(0) + ' ms';\n"
    "    }\n"
    "    // phase bands: one row per stream; compute by phase, the others by stream (communication, copies)\n"
    "    streams.forEach(function (s, i) {\n"
    "      svg('text', { x: ml - 6, y: 4 + 14 * i + 10, 'text-anchor': 'end' }, root).textContent = STREAMS[s] || ('stream ' + s);\n"
    "    });\n"
    "    D.bands.forEach(function (b) {\n"
    "      var x0 = X(b[0]), x1 = Math.max(X(b[1]), x0 + 0.5), s = b[4] || 0;\n"
    "      var fill = s === 0 ? color(PHASE_COLORS, D.phases[b[2]], b[2]) : (STREAM_COLORS[s] || EXTRA[s % EXTRA.length]);\n"
    "      var r = svg('rect', { x: x0, y: 4 + 14 * rowOf[s], width: x1 - x0, height: 11, fill: fill, 'class': 'band' }, root);\n"
    "      svg('title', {}, r).textContent = (STREAMS[s] || 'stream ' + s) + ': ' + D.phases[b[2]] + ', step ' + b[3] + ', ' + b[0].toFixed(2) + '-' + b[1].toFixed(2) + ' ms';\n"
    "    });\n"
    "    D.steps.forEach(function (s) {\n"
    "      svg('line', { x1: X(s[1]), x2: X(s[1]), y1: 4, y2: mt + ph, stroke: '#8792a2', 'stroke-dasharray': '3,3' }, root);\n"
    "      svg('text', { x: X(s[1]) + 3, y: mt + 10 }, root).textContent = 'step ' + s[0];\n"
    "    });\n"
    "    // stacked categories\n"
    "    var base = new Float64Array(n);\n"
    "    D.categories.forEach(function (name, ci) {\n"
    "      var top = new Float64Array(n), up = [], down = [];\n"
    "      for (i = 0; i < n; i++) top[i] = base[i] + S.c[i * D.categories.length + ci];\n"
    "      for (i = 0; i < n; i++) up.push((i ? 'L' : 'M') + X(S.t[i]).toFixed(1) + ',' + Y(top[i]).toFixed(1));\n"
    "      for (i = n - 1; i >= 0; i--) down.push('L' + X(S.t[i]).toFixed(1) + ',' + Y(base[i]).toFixed(1));\n"
    "      svg('path', { d: up.join('') + down.join('') + 'Z', fill: color(CAT_COLORS, name, ci), 'fill-opacity': 0.8,\n"
    "        stroke: 'none', 'class': 'area', 'data-category': name }, root);\n"
    "      base = top;\n"
    "    });\n"
    "    function line(arr, col, w, dash, cls) {\n"
    "      var d = [];\n"
    "      for (i = 0; i < n; i++) d.push((i ? 'L' : 'M') + X(S.t[i]).toFixed(1) + ',' + Y(arr[i]).toFixed(1));\n"
    "      var a = { d: d.join(''), fill: 'none', stroke: col, 'stroke-width': w, 'class': cls };\n"
    "      if (dash) a['stroke-dasharray'] = dash;\n"
    "      svg('path', a, root);\n"
    "    }\n"
    "    line(S.a, '#1d2330', 1.2, null, 'allocated');\n"
    "    line(S.r, '#d62728', 1.6, null, 'reserved');\n"
    "    if (capM <= ymax) {\n"
    "      svg('line', { x1: ml, x2: ml + pw, y1: Y(capM), y2: Y(capM), stroke: '#b3261e', 'stroke-width': 1.5, 'stroke-dasharray': '6,4' }, root);\n"
    "      svg('text', { x: ml + pw - 4, y: Y(capM) - 5, 'text-anchor': 'end', fill: '#b3261e' }, root).textContent = 'capacity ' + gib(D.capacity);\n"
    "    }\n"
    "    if (D.peak_t !== null && D.peak_t !== undefined) {\n"
    "      svg('line', { x1: X(D.peak_t), x2: X(D.peak_t), y1: mt, y2: mt + ph, stroke: '#1d2330', 'stroke-width': 1 }, root);\n"
    "      var pr = X(D.peak_t) > ml + pw - 40;\n"
    "      svg('text', { x: X(D.peak_t) + (pr ? -4 : 4), y: mt + 24, 'text-anchor': pr ? 'end' : 'start' }, root).textContent = 'peak';\n"
    "    }\n"
    "    if (D.oom_t !== null && D.oom_t !== undefined) {\n"
    "      svg('line', { x1: X(D.oom_t), x2: X(D.oom_t), y1: mt, y2: mt + ph, stroke: '#b3261e', 'stroke-width': 2 }, root);\n"
    "      svg('text', { x: X(D.oom_t) - 4, y: mt + 24, 'text-anchor': 'end', fill: '#b3261e' }, root).textContent = 'out of memory';\n"
    "    }\n"
    "    svg('rect', { x: ml, y: mt, width: pw, height: ph, fill: 'none', stroke: '#aab2c0' }, root);\n"
    "    var lg = html('div', null, box, 'legend');\n"
    "    D.categories.forEach(function (name, ci) {\n"
    "      var sp = html('span', null, lg); html('i', null, sp).style.background = color(CAT_COLORS, name, ci);\n"
    "      sp.appendChild(document.createTextNode(pretty(name)));\n"
    "    });\n"
    "    [['allocated', '#1d2330'], ['reserved', '#d62728']].forEach(function (p) {\n"
    "      var sp = html('span', null, lg); var ic = html('i', null, sp); ic.style.background = p[1]; ic.style.height = '3px';\n"
    "      sp.appendChild(document.createTextNode(p[0] + ' (line)'));\n"
    "    });\n"
    "    var used = {};\n"
    "    D.bands.forEach(function (b) { if (!(b[4] || 0)) used[b[2]] = 1; });\n"
    "    Object.keys(used).forEach(function (k) {\n"
    "      var sp = html('span', null, lg); html('i', null, sp).style.background = color(PHASE_COLORS, D.phases[k], +k);\n"
    "      sp.appendChild(document.createTextNode('phase: ' + D.phases[k]));\n"
    "    });\n"
    "    streams.forEach(function (s) {\n"
    "      if (!s) return;\n"
    "      var sp = html('span', null, lg); html('i', null, sp).style.background = STREAM_COLORS[s] || EXTRA[s % EXTRA.length];\n"
    "      sp.appendChild(document.createTextNode((s === 1 || s === 4 ? 'communication: ' : 'copy: ') + (STREAMS[s] || 'stream ' + s)));\n"
    "    });\n"
    "    // hover\n"
    "    var tip = document.getElementById('tip'), cursor = svg('line', { y1: mt, y2: mt + ph, stroke: '#555', visibility: 'hidden' }, root);\n"
    "    root.addEventListener('mousemove', function (ev) {\n"
    "      var rc = root.getBoundingClientRect(), t = (ev.clientX - rc.left - ml) / pw * tmax;\n"
    "      if (t < 0 || t > tmax) { tip.style.display = 'none'; cursor.setAttribute('visibility', 'hidden'); return; }\n"
    "      var lo = 0, hi = n - 1;\n"
    "      while (lo < hi) { var mid = (lo + hi) >> 1; if (S.t[mid] < t) lo = mid + 1; else hi = mid; }\n"
    "      var k = lo, lines = [S.t[k].toFixed(3) + ' ms   ' + D.ops[S.o[k]] + '  (' + D.phases[S.p[k]] + ')',\n"
    "        'allocated ' + (S.a[k] / 1024).toFixed(2) + ' GiB   reserved ' + (S.r[k] / 1024).toFixed(2) + ' GiB'];\n"
    "      D.categories.forEach(function (name, ci) { lines.push('  ' + pretty(name) + ' ' + (S.c[k * D.categories.length + ci] / 1024).toFixed(2) + ' GiB'); });\n"
    "      tip.textContent = lines.join('\\n');\n"
    "      tip.style.display = 'block'; tip.style.left = (ev.clientX + 14) + 'px'; tip.style.top = (ev.clientY + 10) + 'px';\n"
    "      cursor.setAttribute('x1', X(S.t[k])); cursor.setAttribute('x2', X(S.t[k])); cursor.setAttribute('visibility', 'visible');\n"
    "    });\n"
    "    root.addEventListener('mouseleave', function () { tip.style.display = 'none'; cursor.setAttribute('visibility', 'hidden'); });\n"
    "    if (D.samples_total > n) html('p', 'Showing ' + n + ' of ' + D.samples_total + ' memory samples (each bucket keeps its highest allocated and reserved values).', box, 'note');\n"
    "  }\n"
    "\n"
    "  function variants(D) {\n"
    "    var box = document.getElementById('variants'), V = D.variants || [];\n"
    "    if (!D.variants_computed) {\n"
    "      html('p', 'Not computed for this run (--no-suggest): each suggestion re-simulates the scenario with a change.', box, 'note');\n"
    "      return;\n"
    "    }\n"
    "    if (!V.length) { html('p', D.fits ? 'None of the changes tried (checkpointing, LoRA, fused AdamW, a smaller micro-batch accumulated, expandable segments, ZeRO stages) lowers the peak here.' : 'None of the changes tried (checkpointing, optimizers, a smaller micro-batch accumulated, offload, more GPUs, larger cards, LoRA/QLoRA, and pairs of them) fits.', box, 'note'); return; }\n"
    "    html('p', 'Each row is the scenario simulated again with the change shown (its --set); savings are in peak reserved memory against this run, time against its step time.' + (D.fits ? '' : ' The changes that fit, training unchanged first, then fewer GPUs, then step time.'), box, 'note');\n"
    "    var t = html('table', null, box), tr = html('tr', null, t), base = D.step ? D.step.peak_reserved : 0;\n"
    "    ['change', '--set', 'fits', 'peak reserved', 'memory', 'step time', 'time'].forEach(function (h, i) { html('th', h, tr, i > 2 ? 'num' : ''); });\n"
    "    V.forEach(function (v) {\n"
    "      tr = html('tr', null, t);\n"
    "      html('td', v.label, tr);\n"
    "      html('td', v.set, tr).style.fontFamily = 'monospace';\n"
    "      if (v.error) { html('td', 'error: ' + v.error, tr).colSpan = 5; return; }\n"
    "      html('td', v.fits ? 'yes' : 'NO', tr, v.fits ? 'fits' : 'oom');\n"
    "      html('td', v.fits ? gib(v.peak_reserved) : '-', tr, 'num');\n"
    "      html('td', v.fits && base ? ((v.peak_reserved <= base ? '-' : '+') + gib(Math.abs(base - v.peak_reserved)) + ' (' + (100 * (v.peak_reserved - base) / base).toFixed(0) + ' %)') : '', tr, 'num');\n"
    "      html('td', v.fits && v.step_ms > 0 ? v.step_ms.toFixed(1) + ' ms' : '-', tr, 'num');\n"
    "      html('td', v.fits && v.step_ms > 0 && D.step && D.step.step_ms > 0 ? ((v.step_ms >= D.step.step_ms ? '+' : '') + (100 * (v.step_ms / D.step.step_ms - 1)).toFixed(0) + ' %') : '', tr, 'num');\n"
    "    });\n"
    "  }\n"
    "\n"
    "  function breakdown(D) {\n"
    "    var box = document.getElementById('breakdown');\n"
    "    if (!D.step) { html('p', 'No step completed.', box, 'note'); return; }\n"
    "    var names = Object.keys(D.breakdown), total = 0;\n"
    "    names.forEach(function (k) { total += Math.max(0, D.breakdown[k]); });\n"
    "    var W = 1140, root = svg('svg', { width: W, height: 34, id: 'breakdown-svg' }, box), x = 0;\n"
    "    names.forEach(function (k, i) {\n"
    "      var w = total ? W * Math.max(0, D.breakdown[k]) / total : 0;\n"
    "      var r = svg('rect', { x: x, y: 4, width: w, height: 24, fill: color(CAT_COLORS, k, i) }, root);\n"
    "      svg('title', {}, r).textContent = pretty(k) + ': ' + size(D.breakdown[k]);\n"
    "      x += w;\n"
    "    });\n"
    "    var t = html('table', null, box), tr = html('tr', null, t);\n"
    "    html('th', '', tr); html('th', 'category', tr); html('th', 'bytes', tr, 'num'); html('th', 'share', tr, 'num');\n"
    "    names.forEach(function (k, i) {\n"
    "      tr = html('tr', null, t);\n"
    "      html('i', null, html('td', null, tr)).style.cssText = 'display:inline-block;width:11px;height:11px;background:' + color(CAT_COLORS, k, i);\n"
    "      html('td', pretty(k) + (k === 'allocator_slack' ? ' (reserved - allocated at peak)' : k === 'cuda_context' ? ' (outside the allocator)' : ''), tr);\n"
    "      html('td', size(D.breakdown[k]), tr, 'num');\n"
    "      html('td', total ? (100 * D.breakdown[k] / total).toFixed(1) + ' %' : '', tr, 'num');\n"
    "    });\n"
    "  }\n"
    "\n"
    "  function live(D) {\n"
    "    var box = document.getElementById('live');\n"
    "    if (!D.live.length) { html('p', 'No live-set snapshot for this run.', box, 'note'); return; }\n"
    "    var t = html('table', null, box), tr = html('tr', null, t), max = D.live[0][2] || 1;\n"
    "    html('th', 'bytes', tr, 'num'); html('th', '', tr); html('th', 'category', tr); html('th', 'tensor', tr);\n"
    "    D.live.forEach(function (l) {\n"
    "      tr = html('tr', null, t);\n"
    "      html('td', size(l[2]), tr, 'num');\n"
    "      var b = html('span', null, html('td', null, tr), 'bar'); b.style.width = Math.max(1, 160 * l[2] / max) + 'px';\n"
    "      b.style.background = color(CAT_COLORS, l[1], 0);\n"
    "      html('td', pretty(l[1]), tr); html('td', l[0], tr);\n"
    "    });\n"
    "    if (D.live_total > D.live.length) html('p', D.live.length + ' of ' + D.live_total + ' live tensors shown (' + size(D.live_bytes) + ' in all).', box, 'note');\n"
    "  }\n"
    "\n"
    "  function segments(D) {\n"
    "    var box = document.getElementById('segments'), segs = D.segments;\n"
    "    if (!segs.length) { html('p', 'No segment map for this run.', box, 'note'); return; }\n"
    "    var total = 0, nfree = 0, freeB = 0;\n"
    "    segs.forEach(function (s) { total += s.size; s.blocks.forEach(function (b) { if (!b[2]) { nfree++; freeB += b[1]; } }); });\n"
    "    html('p', segs.length + ' segments, ' + size(total) + ' reserved; ' + nfree + ' free blocks holding ' + size(freeB) +\n"
    "      '; largest free block ' + size(D.largest_free) + '.', box);\n"
    "    var W = 1140, rows = Math.min(40, Math.max(8, segs.length)), rowH = 14, per = total / rows;\n"
    "    var root = svg('svg', { width: W, height: rows * (rowH + 3), id: 'segments-svg' }, box);\n"
    "    var pos = 0, FREE = '#f39c3d';\n"
    "    function span(a, len, fill, tipText) {\n"
    "      while (len > 0) {\n"
    "        var row = Math.min(rows - 1, Math.floor(pos / per)), rowEnd = (row + 1) * per;\n"
    "        if (row < rows - 1 && rowEnd - pos <= per * 1e-9) { row++; rowEnd += per; } // rounding at a row's end\n"
    "        var take = row === rows - 1 ? len : Math.min(len, rowEnd - pos);\n"
    "        var x = W * (pos - row * per) / per, w = Math.max(W * take / per, fill === FREE ? 2 : 0.6);\n"
    "        var r = svg('rect', { x: x, y: row * (rowH + 3), width: w, height: rowH, fill: fill }, root);\n"
    "        if (tipText) svg('title', {}, r).textContent = tipText;\n"
    "        pos += take; len -= take;\n"
    "      }\n"
    "    }\n"
    "    segs.forEach(function (s) {\n"
    "      var start = pos;\n"
    "      s.blocks.forEach(function (b) {\n"
    "        span(b[0], b[1], b[2] ? (s.small ? '#8e6bd8' : '#4c78a8') : FREE,\n"
    "          (b[2] ? 'allocated ' : 'free ') + size(b[1]) + ' in a ' + size(s.size) + (s.small ? ' small-pool' : '') + ' segment');\n"
    "      });\n"
    "      var row = Math.min(rows - 1, Math.floor(start / per));\n"
    "      svg('rect', { x: W * (start - row * per) / per, y: row * (rowH + 3) - 1, width: 1.5, height: rowH + 2, fill: '#1d2330' }, root);\n"
    "    });\n"
    "    var worst = segs.map(function (s) {\n"
    "      var f = 0, lf = 0;\n"
    "      s.blocks.forEach(function (b) { if (!b[2]) { f += b[1]; lf = Math.max(lf, b[1]); } });\n"
    "      return { s: s, free: f, lf: lf };\n"
    "    }).filter(function (x) { return x.free > 0; }).sort(function (a, b) { return b.free - a.free; }).slice(0, 10);\n"
    "    if (worst.length) {\n"
    "      html('p', 'Segments with the most free space:', box);\n"
    "      var t = html('table', null, box), tr = html('tr', null, t);\n"
    "      ['segment', 'pool', 'blocks', 'free', 'largest free gap'].forEach(function (h, i) { html('th', h, tr, i ? 'num' : ''); });\n"
    "      worst.forEach(function (x) {\n"
    "        tr = html('tr', null, t);\n"
    "        html('td', size(x.s.size), tr); html('td', x.s.small ? 'small' : 'large', tr, 'num');\n"
    "        html('td', String(x.s.blocks.length), tr, 'num'); html('td', size(x.free), tr, 'num'); html('td', size(x.lf), tr, 'num');\n"
    "      });\n"
    "    }\n"
    "  }\n"
    "\n"
    "  try {\n"
    "    var D = JSON.parse(document.getElementById('vrsim-data').textContent);\n"
    "    summary(D);\n"
    "    variants(D);\n"
    "    timeline(D);\n"
    "    breakdown(D);\n"
    "    live(D);\n"
    "    segments(D);\n"
    "    document.body.setAttribute('data-ok', '1');\n"
    "  } catch (e) {\n"
    "    document.body.setAttribute('data-error', String(e && e.message || e));\n"
    "    document.getElementById('err').textContent = 'The report script failed: ' + (e && e.message || e);\n"
    "  }\n"
    "})();\n"
    "</script>\n"
    "</body>\n"
    "</html>\n";

/* Rounds to d decimals so the page carries no meaningless digits (cJSON prints shortest form). */
static double rnd(double x, double scale) { return round(x * scale) / scale; }

#define MIBF(b) ((double)(b) / 1048576.0)

static int op_phase(const Plan *p, int op) {
    if (op < 0 || op >= graph_num_ops(p->graph)) return PH_BUILD;
    return (int)graph_op_c(p->graph, op)->phase;
}

/* Index of each op name in the page's ops table; the table lists only ops that are used. */
typedef struct OpNames { int *idx; cJSON *arr; int n; } OpNames;

static int op_name_index(OpNames *on, const Plan *p, int op) {
    int n_ops = graph_num_ops(p->graph);
    if (op < 0 || op >= n_ops) op = n_ops; /* slot n_ops: "(build)" */
    if (on->idx[op] < 0) {
        on->idx[op] = on->n++;
        cJSON_AddItemToArray(on->arr, cJSON_CreateString(op < n_ops ? graph_op_c(p->graph, op)->name
                                                                     : "(build)"));
    }
    return on->idx[op];
}

/* Which samples the page keeps: all, or per bucket the first, the highest allocated and the
 * highest reserved one, in time order. keep[i] set for kept samples; returns how many. */
static int thin_samples(const SimResult *r, unsigned char *keep) {
    int n = r->n_samples;
    if (n <= REPORT_HTML_MAX_SAMPLES) {
        memset(keep, 1, (size_t)n);
        return n;
    }
    memset(keep, 0, (size_t)n);
    int buckets = REPORT_HTML_MAX_SAMPLES / 3, kept = 0;
    for (int b = 0; b < buckets; b++) {
        int lo = (int)((long)n * b / buckets), hi = (int)((long)n * (b + 1) / buckets);
        if (lo >= hi) continue;
        int ia = lo, ir = lo;
        for (int i = lo; i < hi; i++) {
            if (r->samples[i].allocated > r->samples[ia].allocated) ia = i;
            if (r->samples[i].reserved > r->samples[ir].reserved) ir = i;
        }
        kept += !keep[lo] + (ia != lo && !keep[ia]) + (ir != lo && ir != ia && !keep[ir]);
        keep[lo] = keep[ia] = keep[ir] = 1;
    }
    if (!keep[n - 1]) { keep[n - 1] = 1; kept++; }
    return kept;
}

/* The reported step's index (report_step), or -1. */
static int step_index(const SimResult *r) {
    if (r->oom) return r->oom_step;
    return r->n_steps - 1;
}

static void add_samples(cJSON *o, const Plan *p, const SimResult *r, OpNames *on) {
    unsigned char *keep = malloc((size_t)r->n_samples + 1);
    cJSON *s = cJSON_AddObjectToObject(o, "samples");
    cJSON *t = cJSON_AddArrayToObject(s, "t"), *a = cJSON_AddArrayToObject(s, "a");
    cJSON *rs = cJSON_AddArrayToObject(s, "r"), *c = cJSON_AddArrayToObject(s, "c");
    cJSON *ph = cJSON_AddArrayToObject(s, "p"), *op = cJSON_AddArrayToObject(s, "o");
    cJSON_AddNumberToObject(o, "samples_total", r->n_samples);
    if (!keep) return;
    thin_samples(r, keep);
    for (int i = 0; i < r->n_samples; i++) {
        if (!keep[i]) continue;
        const MemSample *m = &r->samples[i];
        cJSON_AddItemToArray(t, cJSON_CreateNumber(rnd(m->t_ns / 1e6, 1e4)));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(rnd(MIBF(m->allocated), 100)));
        cJSON_AddItemToArray(rs, cJSON_CreateNumber(rnd(MIBF(m->reserved), 100)));
        for (int k = 0; k < CAT_COUNT; k++)
            cJSON_AddItemToArray(c, cJSON_CreateNumber(rnd(MIBF(m->cat[k]), 100)));
        cJSON_AddItemToArray(ph, cJSON_CreateNumber(op_phase(p, m->op)));
        cJSON_AddItemToArray(op, cJSON_CreateNumber(op_name_index(on, p, m->op)));
    }
    free(keep);
}

/* Phase bands from the op spans, one row per stream: consecutive spans of one stream, phase and
 * step merged (unless the stream idles between them for more than 0.1 % of the run), as
 * [t0 ms, t1 ms, phase, step, stream]; and the start time of every step. */
static void add_bands(cJSON *o, const Plan *p, const SimResult *r) {
    enum { MAX_STREAMS = 16 };
    cJSON *bands = cJSON_AddArrayToObject(o, "bands");
    cJSON *steps = cJSON_AddArrayToObject(o, "steps");
    int cur_phase[MAX_STREAMS], cur_step[MAX_STREAMS], last_step = -1;
    double t0[MAX_STREAMS], t1[MAX_STREAMS];
    for (int k = 0; k < MAX_STREAMS; k++) cur_phase[k] = cur_step[k] = -1;
    double end = 0;
    for (int i = 0; i < r->n_spans; i++) if (r->spans[i].end_ns > end) end = r->spans[i].end_ns;
    double gap = end * 1e-3;
    for (int i = 0; i <= r->n_spans; i++) {
        const OpSpan *s = i < r->n_spans ? &r->spans[i] : NULL;
        int st = s ? (s->stream >= 0 && s->stream < MAX_STREAMS ? s->stream : MAX_STREAMS - 1) : -1;
        int ph = s ? op_phase(p, s->op) : -2;
        if (s && ph == cur_phase[st] && s->step == cur_step[st] && s->start_ns <= t1[st] + gap) {
            if (s->end_ns > t1[st]) t1[st] = s->end_ns;
            continue;
        }
        /* close the band of this stream (all of them at the end) */
        for (int k = 0; k < MAX_STREAMS; k++) {
            if ((s && k != st) || cur_phase[k] < 0) continue;
            cJSON *b = cJSON_CreateArray();
            cJSON_AddItemToArray(b, cJSON_CreateNumber(rnd(t0[k] / 1e6, 1e4)));
            cJSON_AddItemToArray(b, cJSON_CreateNumber(rnd(t1[k] / 1e6, 1e4)));
            cJSON_AddItemToArray(b, cJSON_CreateNumber(cur_phase[k]));
            cJSON_AddItemToArray(b, cJSON_CreateNumber(cur_step[k]));
            cJSON_AddItemToArray(b, cJSON_CreateNumber(k));
            cJSON_AddItemToArray(bands, b);
            cur_phase[k] = -1;
        }
        if (!s) break;
        if (s->step != last_step) {
            cJSON *sa = cJSON_CreateArray();
            cJSON_AddItemToArray(sa, cJSON_CreateNumber(s->step));
            cJSON_AddItemToArray(sa, cJSON_CreateNumber(rnd(s->start_ns / 1e6, 1e4)));
            cJSON_AddItemToArray(steps, sa);
            last_step = s->step;
        }
        cur_phase[st] = ph;
        cur_step[st] = s->step;
        t0[st] = s->start_ns;
        t1[st] = s->end_ns;
    }
}

/* Time of the reported step's peak (the first sample in that step reaching its peak allocated),
 * and of the OOM (the last sample), in ms; null when unknown. */
static void add_marks(cJSON *o, const SimResult *r) {
    int si = step_index(r);
    const StepResult *sr = report_step(r);
    double start = -1;
    for (int i = 0; i < r->n_spans; i++)
        if (r->spans[i].step == si) { start = r->spans[i].start_ns; break; }
    int best = -1;
    if (sr && start >= 0)
        for (int i = 0; i < r->n_samples; i++)
            if (r->samples[i].t_ns >= start && r->samples[i].allocated >= sr->peak_allocated) { best = i; break; }
    if (best >= 0) cJSON_AddNumberToObject(o, "peak_t", rnd(r->samples[best].t_ns / 1e6, 1e4));
    else cJSON_AddNullToObject(o, "peak_t");
    if (r->oom && r->n_samples > 0)
        cJSON_AddNumberToObject(o, "oom_t", rnd(r->samples[r->n_samples - 1].t_ns / 1e6, 1e4));
    else cJSON_AddNullToObject(o, "oom_t");
}

static void add_segments(cJSON *o, const SimResult *r) {
    cJSON *segs = cJSON_AddArrayToObject(o, "segments");
    cJSON *seg = NULL, *blocks = NULL;
    uint64_t seg_addr = 0, seg_size = 0;
    bool small = false;
    for (size_t i = 0; i <= r->n_segmap; i++) {
        const AllocBlockInfo *b = i < r->n_segmap ? &r->segmap[i] : NULL;
        if (seg && (!b || b->segment_addr != seg_addr)) {
            cJSON_AddNumberToObject(seg, "size", (double)seg_size);
            cJSON_AddBoolToObject(seg, "small", small);
            seg = NULL;
        }
        if (!b) break;
        if (!seg) {
            seg = cJSON_CreateObject();
            cJSON_AddItemToArray(segs, seg);
            seg_addr = b->segment_addr;
            seg_size = 0;
            small = b->small_pool;
            cJSON_AddNumberToObject(seg, "addr", (double)seg_addr);
            blocks = cJSON_AddArrayToObject(seg, "blocks");
        }
        cJSON *bl = cJSON_CreateArray();
        cJSON_AddItemToArray(bl, cJSON_CreateNumber((double)(b->addr - seg_addr)));
        cJSON_AddItemToArray(bl, cJSON_CreateNumber((double)b->size));
        cJSON_AddItemToArray(bl, cJSON_CreateNumber(b->allocated ? 1 : 0));
        cJSON_AddItemToArray(blocks, bl);
        seg_size += b->size;
    }
    cJSON_AddNumberToObject(o, "largest_free", (double)r->largest_free_at_peak);
}

static cJSON *page_data(const Plan *p, const SimResult *r, const ReportVariant *v, int nv,
                        bool computed) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const StepResult *s = report_step(r);
    cJSON_AddStringToObject(o, "scenario", p->name);
    cJSON_AddStringToObject(o, "title", p->title);
    cJSON_AddStringToObject(o, "model", p->model);
    cJSON_AddStringToObject(o, "gpu", p->dev.key);
    cJSON_AddStringToObject(o, "gpu_name", p->dev.name);
    cJSON_AddNumberToObject(o, "gpus", p->gpus);
    cJSON_AddStringToObject(o, "settings", p->settings);
    cJSON_AddBoolToObject(o, "fits", report_fits(r));
    if (p->overrides[0]) cJSON_AddStringToObject(o, "overrides", p->overrides);
    cJSON_AddStringToObject(o, "cost_source", report_cost_source(p));
    cJSON_AddNumberToObject(o, "retries", (double)report_alloc_retries(r));
    if (p->notes[0]) cJSON_AddStringToObject(o, "notes", p->notes);
    if (p->deepspeed_read[0]) {
        cJSON *ds = cJSON_AddObjectToObject(o, "deepspeed");
        cJSON_AddStringToObject(ds, "read", p->deepspeed_read);
        cJSON_AddStringToObject(ds, "unknown", p->deepspeed_unknown);
    }
    int w = report_worst_step(r);
    if (w >= 0 && !r->oom) {
        cJSON *wo = cJSON_AddObjectToObject(o, "worst");
        cJSON_AddNumberToObject(wo, "index", w);
        cJSON_AddNumberToObject(wo, "peak_reserved", (double)r->steps[w].peak_reserved);
    }
    cJSON_AddNumberToObject(o, "capacity", (double)p->alloc.capacity);
    cJSON_AddNumberToObject(o, "context_bytes", (double)p->dev.context_bytes);
    if (s && s->time_ns > 0 && p->tokens_per_step > 0)
        cJSON_AddNumberToObject(o, "tokens_per_s", rnd(p->tokens_per_step / (s->time_ns / 1e9), 10));
    if (s) {
        cJSON *st = cJSON_AddObjectToObject(o, "step");
        cJSON_AddNumberToObject(st, "index", step_index(r));
        cJSON_AddNumberToObject(st, "peak_allocated", (double)s->peak_allocated);
        cJSON_AddNumberToObject(st, "peak_reserved", (double)s->peak_reserved);
        cJSON_AddNumberToObject(st, "step_ms", rnd(s->time_ns / 1e6, 1e4));
        if (s->peak_op >= 0 && s->peak_op < graph_num_ops(p->graph)) {
            const Op *op = graph_op_c(p->graph, s->peak_op);
            cJSON_AddStringToObject(st, "peak_op", op->name);
            cJSON_AddStringToObject(st, "peak_phase", phase_name(op->phase));
        }
    } else {
        cJSON_AddNullToObject(o, "step");
    }
    if (r->oom) {
        cJSON *oo = cJSON_AddObjectToObject(o, "oom");
        cJSON_AddNumberToObject(oo, "step", r->oom_step);
        cJSON_AddStringToObject(oo, "op", r->oom_op >= 0 && r->oom_op < graph_num_ops(p->graph)
                                              ? graph_op_c(p->graph, r->oom_op)->name : "(build)");
        cJSON_AddNumberToObject(oo, "requested", (double)r->oom_info.requested);
        cJSON_AddNumberToObject(oo, "allocated", (double)r->oom_info.allocated);
        cJSON_AddNumberToObject(oo, "reserved_unallocated", (double)r->oom_info.reserved_unallocated);
    } else {
        cJSON_AddNullToObject(o, "oom");
    }
    cJSON *cats = cJSON_AddArrayToObject(o, "categories");
    for (int c = 0; c < CAT_COUNT; c++) cJSON_AddItemToArray(cats, cJSON_CreateString(category_name((Category)c)));
    cJSON *phs = cJSON_AddArrayToObject(o, "phases");
    for (int ph = 0; ph < PH_COUNT; ph++) cJSON_AddItemToArray(phs, cJSON_CreateString(phase_name((Phase)ph)));
    cJSON *bd = cJSON_AddObjectToObject(o, "breakdown");
    if (r->oom) {
        /* the moment of the OOM, like the live tensors and the segment map */
        for (int c = 0; c < CAT_COUNT; c++)
            cJSON_AddNumberToObject(bd, category_name((Category)c), (double)r->oom_breakdown[c]);
        cJSON_AddNumberToObject(bd, "allocator_slack", (double)r->oom_info.reserved_unallocated);
        cJSON_AddNumberToObject(bd, "cuda_context", (double)p->dev.context_bytes);
    } else if (s) {
        for (int c = 0; c < CAT_COUNT; c++)
            cJSON_AddNumberToObject(bd, category_name((Category)c), (double)s->peak_breakdown[c]);
        cJSON_AddNumberToObject(bd, "allocator_slack", (double)s->peak_reserved - (double)s->peak_allocated);
        cJSON_AddNumberToObject(bd, "cuda_context", (double)p->dev.context_bytes);
    }
    cJSON *live = cJSON_AddArrayToObject(o, "live");
    double live_bytes = 0;
    for (int i = 0; i < r->n_live_at_peak; i++) {
        live_bytes += (double)r->live_at_peak[i].bytes;
        if (i >= 24) continue;
        const Tensor *t = graph_tensor_c(p->graph, r->live_at_peak[i].tensor);
        cJSON *l = cJSON_CreateArray();
        cJSON_AddItemToArray(l, cJSON_CreateString(t->name));
        cJSON_AddItemToArray(l, cJSON_CreateString(category_name(t->cat)));
        cJSON_AddItemToArray(l, cJSON_CreateNumber((double)r->live_at_peak[i].bytes));
        cJSON_AddItemToArray(live, l);
    }
    cJSON_AddNumberToObject(o, "live_total", r->n_live_at_peak);
    cJSON_AddNumberToObject(o, "live_bytes", live_bytes);
    OpNames on = {.idx = malloc(sizeof(int) * (size_t)(graph_num_ops(p->graph) + 1))};
    on.arr = cJSON_AddArrayToObject(o, "ops");
    if (!on.idx) { cJSON_Delete(o); return NULL; }
    for (int i = 0; i <= graph_num_ops(p->graph); i++) on.idx[i] = -1;
    add_samples(o, p, r, &on);
    free(on.idx);
    add_bands(o, p, r);
    add_marks(o, r);
    add_segments(o, r);
    cJSON_AddBoolToObject(o, "variants_computed", computed);
    cJSON *va = cJSON_AddArrayToObject(o, "variants");
    for (int i = 0; i < nv; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "label", v[i].label);
        cJSON_AddStringToObject(x, "set", v[i].set);
        cJSON_AddBoolToObject(x, "fits", v[i].fits);
        cJSON_AddNumberToObject(x, "peak_reserved", v[i].peak_reserved);
        cJSON_AddNumberToObject(x, "step_ms", rnd(v[i].step_ms, 1e4));
        cJSON_AddItemToArray(va, x);
    }
    return o;
}

/* ---- the page's data as JSON: cJSON_PrintUnformatted's bytes, written faster -------------
 * libcjson 1.7.15 prints every number with sprintf("%1.15g"), reads it back with sscanf and
 * prints "%1.17g" where that did not give the number back; a page holds tens of thousands of
 * numbers, and sscanf made the page's printing most of a run's time. This printer gives the same
 * text (print_value, print_number, print_string_ptr of cJSON.c 1.7.15, unformatted) with
 * strtod for the read-back and integers below 1e15, which "%1.15g" prints as their digits,
 * without printf. */
typedef struct JsBuf { char *p; size_t n, cap; bool bad; } JsBuf;

static char *js_room(JsBuf *b, size_t k) {
    if (b->bad) return NULL;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->n + k + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->bad = true; return NULL; }
        b->p = q;
        b->cap = cap;
    }
    return b->p + b->n;
}

static void js_put(JsBuf *b, const char *s, size_t k) {
    char *w = js_room(b, k);
    if (!w) return;
    memcpy(w, s, k);
    b->n += k;
}

/* d written as "%1.15g" writes it (with '.'), where d is the double nearest m / 10^k for an
 * integer m of at most 15 digits and k in 1..6, and 1e-4 <= |d| < 1e15 (the figures the page
 * rounds to a few decimals): then the 15 significant digits of d are those of m / 10^k (the
 * double's error, under 2^-53 of it, is below half a unit of the 15th digit), "%g" picks the
 * fixed style (exponent -4..14) and drops the trailing zeros; and the text reads back as d.
 * Returns the length, or 0 where d is not such a number (the caller uses printf). */
static int short_decimal(char t[32], double d) {
    static const double P[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
    double a = fabs(d);
    if (!(a >= 1e-4 && a < 1e15)) return 0;
    for (int k = 1; k <= 6; k++) {
        double sc = a * P[k];
        if (!(sc < 1e15) || sc != floor(sc) || sc / P[k] != a) continue;
        unsigned long long m = (unsigned long long)sc;
        char dg[24];
        int n = 0;
        do { dg[n++] = (char)('0' + m % 10); m /= 10; } while (m); /* reversed */
        int len = 0;
        if (d < 0) t[len++] = '-';
        if (n <= k) { /* 0.000ddd */
            t[len++] = '0';
            t[len++] = '.';
            for (int z = 0; z < k - n; z++) t[len++] = '0';
            for (int i = n - 1; i >= 0; i--) t[len++] = dg[i];
        } else {
            for (int i = n - 1; i >= k; i--) t[len++] = dg[i];
            t[len++] = '.';
            for (int i = k - 1; i >= 0; i--) t[len++] = dg[i];
        }
        while (t[len - 1] == '0') len--; /* the fraction's trailing zeros */
        if (t[len - 1] == '.') len--;
        t[len] = 0;
        return len;
    }
    return 0;
}

static void js_number(JsBuf *b, double d, char point) {
    char t[32];
    int len;
    if (isnan(d) || isinf(d)) {
        len = snprintf(t, sizeof t, "null");
    } else if (d == floor(d) && fabs(d) < 1e15 && !(d == 0 && signbit(d))) {
        /* an integer of at most 15 digits: "%1.15g" writes its digits, and they read back */
        unsigned long long u = (unsigned long long)fabs(d);
        char r[24];
        int k = 0;
        do { r[k++] = (char)('0' + u % 10); u /= 10; } while (u);
        len = 0;
        if (d < 0) t[len++] = '-';
        while (k) t[len++] = r[--k];
        t[len] = 0;
    } else if ((len = short_decimal(t, d)) > 0) {
        /* written as "%1.15g" writes it (short_decimal) */
    } else {
        len = snprintf(t, sizeof t, "%1.15g", d);
        char *end;
        double test = strtod(t, &end);
        double mx = fabs(test) > fabs(d) ? fabs(test) : fabs(d);
        if (end == t || !(fabs(test - d) <= mx * DBL_EPSILON)) len = snprintf(t, sizeof t, "%1.17g", d);
    }
    if (len < 0 || len > 25) { b->bad = true; return; } /* cJSON's number buffer: 26 bytes */
    for (int i = 0; i < len; i++) if (t[i] == point) t[i] = '.';
    js_put(b, t, (size_t)len);
}

static void js_string(JsBuf *b, const char *s) {
    if (!s) { js_put(b, "\"\"", 2); return; }
    js_put(b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0;
    for (size_t i = 0;; i++) {
        unsigned char c = u[i];
        if (c > 31 && c != '"' && c != '\\') { run++; continue; }
        js_put(b, s + i - run, run);
        run = 0;
        if (!c) break;
        char e[8];
        switch (c) {
        case '\\': js_put(b, "\\\\", 2); break;
        case '"': js_put(b, "\\\"", 2); break;
        case '\b': js_put(b, "\\b", 2); break;
        case '\f': js_put(b, "\\f", 2); break;
        case '\n': js_put(b, "\\n", 2); break;
        case '\r': js_put(b, "\\r", 2); break;
        case '\t': js_put(b, "\\t", 2); break;
        default:
            snprintf(e, sizeof e, "\\u%04x", c);
            js_put(b, e, 6);
        }
    }
    js_put(b, "\"", 1);
}

static void js_value(JsBuf *b, const cJSON *item, char point) {
    if (b->bad) return;
    switch (item->type & 0xFF) {
    case cJSON_NULL: js_put(b, "null", 4); break;
    case cJSON_False: js_put(b, "false", 5); break;
    case cJSON_True: js_put(b, "true", 4); break;
    case cJSON_Number: js_number(b, item->valuedouble, point); break;
    case cJSON_Raw:
        if (!item->valuestring) { b->bad = true; return; }
        js_put(b, item->valuestring, strlen(item->valuestring));
        break;
    case cJSON_String: js_string(b, item->valuestring); break;
    case cJSON_Array:
    case cJSON_Object: {
        bool obj = (item->type & 0xFF) == cJSON_Object;
        js_put(b, obj ? "{" : "[", 1);
        for (const cJSON *c = item->child; c; c = c->next) {
            if (obj) {
                js_string(b, c->string);
                js_put(b, ":", 1);
            }
            js_value(b, c, point);
            if (c->next) js_put(b, ",", 1);
        }
        js_put(b, obj ? "}" : "]", 1);
        break;
    }
    default: b->bad = true;
    }
}

char *report_json_print(const cJSON *o) {
    JsBuf b = {0};
    struct lconv *lc = localeconv();
    js_value(&b, o, lc && lc->decimal_point ? lc->decimal_point[0] : '.');
    if (!js_room(&b, 0)) { free(b.p); return NULL; }
    b.p[b.n] = 0;
    return b.p;
}

char *report_html_build(const Plan *p, const SimResult *r) {
    return report_html_build_with(p, r, NULL, -1);
}

char *report_html_build_with(const Plan *p, const SimResult *r, const ReportVariant *v, int nv) {
    cJSON *o = page_data(p, r, v, nv > 0 ? nv : 0, nv >= 0);
    if (!o) return NULL;
    char *js = report_json_print(o);
    cJSON_Delete(o);
    if (!js) return NULL;
    /* The JSON sits inside a <script> element, where "</script>" would end it and "<!--" would
     * switch the HTML parser into its script-escaped states (then "</script>" no longer ends the
     * element and the page breaks). Every '<', '>' and '&' is written as a \u00XX escape: they
     * occur only inside JSON strings, where the escape means the same character, so JSON.parse
     * reads the same data and the HTML parser sees none of them. */
    size_t n = strlen(js), extra = 0;
    for (size_t i = 0; i < n; i++) extra += (js[i] == '<' || js[i] == '>' || js[i] == '&') ? 5 : 0;
    size_t total = sizeof HTML_HEAD - 1 + n + extra + sizeof HTML_TAIL - 1 + 2;
    char *out = malloc(total);
    if (!out) { free(js); return NULL; }
    char *w = out;
    memcpy(w, HTML_HEAD, sizeof HTML_HEAD - 1);
    w += sizeof HTML_HEAD - 1;
    for (size_t i = 0; i < n; i++) {
        if (js[i] == '<' || js[i] == '>' || js[i] == '&') {
            snprintf(w, 7, "\\u%04x", (unsigned)(unsigned char)js[i]);
            w += 6;
        } else {
            *w++ = js[i];
        }
    }
    *w++ = '\n';
    memcpy(w, HTML_TAIL, sizeof HTML_TAIL - 1);
    w += sizeof HTML_TAIL - 1;
    *w = 0;
    free(js);
    return out;
}

VrStatus report_html_write(const char *dir, const Plan *p, const SimResult *r, char *err,
                           size_t errlen) {
    return report_html_write_with(dir, p, r, NULL, -1, err, errlen);
}

VrStatus report_html_write_with(const char *dir, const Plan *p, const SimResult *r,
                                const ReportVariant *v, int nv, char *err, size_t errlen) {
    VrStatus st = report_make_dir(dir, err, errlen);
    if (st) return st;
    char *page = report_html_build_with(p, r, v, nv);
    if (!page) {
        snprintf(err, errlen, "out of host memory writing report.html");
        return VR_ENOMEM;
    }
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/report.html", dir);
    st = report_write_file(path, page, strlen(page), err, errlen);
    free(page);
    return st;
}
