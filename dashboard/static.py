"""The dashboard's one stylesheet and one script (vanilla JS, no build step)."""
# ruff: noqa: E501 - CSS and JS read better unwrapped

from __future__ import annotations

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{display:flex;gap:1em;align-items:center;padding:.5em 1em;background:#243447;color:#fff;flex-wrap:wrap}
header a{color:#cde;text-decoration:none;padding:.2em .5em}header a.on{color:#fff;border-bottom:2px solid #fc6}
header form{margin:0}header .who{margin-left:auto}
main{padding:1em 1.5em}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;background:#fff;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eef}.num{text-align:right;font-variant-numeric:tabular-nums}
.err{color:#b00}.flash{background:#ffd;border:1px solid #cc9;padding:.5em}
.card{background:#fff;border:1px solid #ddd;padding:.6em;margin:.6em 0;display:block}
.card label{margin-right:1em;display:inline-block}
button{cursor:pointer}.danger{background:#c33;color:#fff;border:0;padding:.3em .8em}
.chart{background:#fff;border:1px solid #ddd;max-width:100%}
pre{background:#fff;border:1px solid #ddd;padding:.6em;overflow:auto;max-height:30em;white-space:pre-wrap;word-break:break-all}
.path{list-style:none;padding:0;border-left:3px solid #9ab;margin-left:.5em}.path .step{padding:.3em .8em;position:relative}
.path .step::before{content:"";position:absolute;left:-.45em;top:.75em;width:.6em;height:.6em;border-radius:50%;background:#9ab}
.success{color:#080}.failed{color:#b00}
.views button.on{font-weight:bold}.timeline{max-width:100%;background:#fff}.note{color:#666}
"""

JS = r"""
'use strict';
(function () {
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
  const KEEP = 120;

  function drawChart(canvas, series) {
    const ctx = canvas.getContext('2d');
    const w = canvas.width, h = canvas.height, pad = 30;
    ctx.clearRect(0, 0, w, h);
    let max = 1;
    for (const pts of Object.values(series)) for (const v of pts) if (v > max) max = v;
    ctx.fillStyle = '#666'; ctx.font = '11px sans-serif';
    ctx.fillText(String(max), 2, 10); ctx.fillText('0', 2, h - pad + 4);
    let i = 0;
    for (const [name, pts] of Object.entries(series)) {
      const color = COLORS[i % COLORS.length];
      ctx.strokeStyle = color; ctx.beginPath();
      pts.forEach((v, j) => {
        const x = pad + (w - pad - 4) * j / (KEEP - 1);
        const y = (h - pad) - (h - pad - 12) * v / max;
        if (j === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
      ctx.fillStyle = color; ctx.fillText(name + ' ' + (pts.length ? pts[pts.length - 1] : ''), pad + 150 * i, h - 8);
      i += 1;
    }
  }

  function live(el) {
    const charts = {};
    const source = new EventSource(el.dataset.live);
    source.onmessage = (ev) => {
      const data = JSON.parse(ev.data);
      for (const [k, v] of Object.entries(data.values || {})) {
        document.querySelectorAll('[data-k="' + CSS.escape(k) + '"]').forEach((cell) => { cell.textContent = String(v); });
      }
      for (const [name, points] of Object.entries(data.charts || {})) {
        const canvas = document.querySelector('canvas[data-chart="' + CSS.escape(name) + '"]');
        if (!canvas) continue;
        const series = charts[name] || (charts[name] = {});
        for (const [s, v] of Object.entries(points)) {
          const pts = series[s] || (series[s] = []);
          pts.push(v); if (pts.length > KEEP) pts.shift();
        }
        drawChart(canvas, series);
      }
      document.body.dataset.liveUpdates = String(Number(document.body.dataset.liveUpdates || 0) + 1);
    };
    source.onerror = () => { document.body.dataset.liveError = '1'; };
    window.addEventListener('pagehide', () => source.close());
  }

  function filter(input) {
    const table = document.querySelector(input.dataset.filter);
    const showSys = document.getElementById('show-sys');
    // at most data-page-rows matching rows are laid out; the note says how many match
    const pageRows = Number(table.dataset.pageRows || Infinity);
    const note = document.querySelector('[data-more-for="' + table.id + '"]');
    const apply = () => {
      const needle = input.value.toLowerCase();
      const all = showSys ? showSys.checked : true;
      let matching = 0;
      for (const row of table.tBodies[0].rows) {
        const sys = row.className && row.className !== 'k-normal';
        const match = !(!all && sys) && row.textContent.toLowerCase().includes(needle);
        if (match) matching += 1;
        row.hidden = !match || matching > pageRows;
      }
      if (note) {
        note.textContent = matching > pageRows
          ? 'showing ' + pageRows + ' of ' + matching + ' matching: filter to narrow' : '';
      }
    };
    input.addEventListener('input', apply);
    if (showSys) showSys.addEventListener('change', apply);
    apply();
  }

  document.addEventListener('DOMContentLoaded', () => {
    document.querySelectorAll('[data-live]').forEach(live);
    document.querySelectorAll('[data-filter]').forEach(filter);
    document.querySelectorAll('[data-autosubmit]').forEach((s) => s.addEventListener('change', () => s.form.submit()));
    document.querySelectorAll('form[data-confirm]').forEach((f) => f.addEventListener('submit', (ev) => {
      if (!window.confirm(f.dataset.confirm)) ev.preventDefault();
    }));
    document.querySelectorAll('[data-view]').forEach((b) => b.addEventListener('click', () => {
      document.querySelectorAll('[data-view]').forEach((o) => o.classList.toggle('on', o === b));
      document.querySelectorAll('[data-body]').forEach((p) => { p.hidden = p.dataset.body !== b.dataset.view; });
    }));
  });
})();
"""
