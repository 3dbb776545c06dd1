/**
 * The console's history charts (served as /assets/history.js, loaded by console.html): per minute,
 * fires and failures as bars and lateness p95 as a line, for the cluster and each job, drawn by
 * uPlot (vendored: /assets/uplot.js) and redrawn to their panel's width on resize.
 */
'use strict';

/* global uPlot */
/* exported cronwardenHistoryPage */

/** The history view, given the console's helpers (`cw`: el, get, time, dur, pad). */
function cronwardenHistoryPage(cw) {
  const $ = (id) => document.getElementById(id);
  const { el, get, time, dur, pad } = cw;
  let charts = [];
  const CHART_HEIGHT = 200;
  const bars = uPlot.paths.bars({ size: [0.8, 24] });
  function chart(title, xs, series) {
    const total = (a) => a.reduce((sum, v) => sum + v, 0);
    const late = series.latenessP95Ms.filter((v) => v !== null);
    const target = el('div', { class: 'chart' });
    const panel = el(
      'div',
      { class: 'panel' },
      el('b', {}, title),
      el(
        'div',
        { class: 'muted' },
        total(series.fires) +
          ' fires, ' +
          total(series.failures) +
          ' failures' +
          (late.length ? ', lateness p95 up to ' + dur(Math.max(...late)) : ''),
      ),
      target,
    );
    $('charts').append(panel);
    const upTo = (min) => (u, lo, hi) => [0, Math.max(min, hi)];
    const opts = {
      width: target.clientWidth,
      height: CHART_HEIGHT,
      scales: { x: { time: true }, n: { range: upTo(1) }, ms: { range: upTo(10) } },
      axes: [
        { stroke: '#646970', grid: { stroke: '#eee' }, size: 52, values: (u, splits) => splits.map(clock) },
        { scale: 'n', label: 'runs / minute', stroke: '#646970', grid: { stroke: '#eee' }, size: 44 },
        {
          scale: 'ms',
          side: 1,
          label: 'lateness p95',
          stroke: '#996800',
          grid: { show: false },
          size: 64,
          values: (u, vals) => vals.map((v) => dur(v)),
        },
      ],
      series: [
        { value: (u, v) => (v === null ? '–' : time(new Date(v * 1000).toISOString())) },
        {
          label: 'fires',
          scale: 'n',
          fill: '#72aee6',
          stroke: '#72aee6',
          paths: bars,
          points: { show: false },
          value: count,
        },
        {
          label: 'failures',
          scale: 'n',
          fill: '#d63638',
          stroke: '#d63638',
          paths: bars,
          points: { show: false },
          value: count,
        },
        // Empty minutes are gaps: the line never joins two minutes across one without a started run.
        {
          label: 'lateness p95',
          scale: 'ms',
          stroke: '#996800',
          width: 1.5,
          spanGaps: false,
          value: (u, v) => (v === null ? '–' : dur(v)),
        },
      ],
    };
    // A minute without fires (or failures) has no bar at all, rather than one of height 0 drawn as a line.
    const bar = (a) => a.map((v) => v || null);
    charts.push({
      plot: new uPlot(opts, [xs, bar(series.fires), bar(series.failures), series.latenessP95Ms], target),
      target,
    });
  }
  const count = (u, v) => (v === null ? (u.cursor.idx === null ? '–' : 0) : v);
  /** A time axis tick in this browser's zone, 24 h as every date on the page; the date under the first tick of each day. */
  function clock(v, i, splits) {
    const d = new Date(v * 1000),
      prev = i > 0 ? new Date(splits[i - 1] * 1000) : null;
    const hm = pad(d.getHours()) + ':' + pad(d.getMinutes());
    return !prev || prev.getDate() !== d.getDate()
      ? hm + '\n' + d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate())
      : hm;
  }
  /** Minutes shown: the whole range asked for, or for "since the first fire" from the first minute with data (at least 15). */
  function shownFrom(h, auto) {
    if (!auto) return 0;
    const first = h.cluster.fires.findIndex((v, i) => v > 0 || h.cluster.failures[i] > 0);
    return first < 0 ? Math.max(0, h.minutes - 60) : Math.max(0, Math.min(first, h.minutes - 15));
  }
  async function history() {
    const choice = String(new FormData($('history-form')).get('minutes'));
    const h = await get('api/history?minutes=' + (choice === 'auto' ? 1440 : encodeURIComponent(choice)));
    const from = shownFrom(h, choice === 'auto'),
      start = Date.parse(h.from) / 1000;
    const xs = h.cluster.fires.slice(from).map((_, i) => start + (from + i) * 60);
    const cut = (s) => ({
      fires: s.fires.slice(from),
      failures: s.failures.slice(from),
      latenessP95Ms: s.latenessP95Ms.slice(from),
    });
    for (const c of charts) c.plot.destroy();
    charts = [];
    $('charts').replaceChildren();
    chart('cluster', xs, cut(h.cluster));
    for (const name of Object.keys(h.jobs).sort()) chart(name, xs, cut(h.jobs[name]));
  }
  let resizing = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      for (const c of charts) c.plot.setSize({ width: c.target.clientWidth, height: CHART_HEIGHT });
    }, 100);
  });

  return { show: history };
}
