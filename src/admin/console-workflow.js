/**
 * The console's workflow run page (served as /assets/workflow.js, loaded by console.html): the run's
 * graph laid out by dagre (vendored: /assets/dagre.js) and drawn here as SVG from the model
 * (/assets/workflow-model.js): each step a box coloured by its state with its duration and fan-out
 * counts, an edge per need, the critical path highlighted; a step's detail (its runs, their
 * attempts, results and errors) on click; retry, cancel and signal. Like the page itself it puts
 * every name, error and result into the page as text, never as HTML, and styles the SVG through
 * classes (the page's CSP allows no inline style attribute).
 */
'use strict';

/* global dagre, cronwardenWorkflowModel */
/* exported cronwardenWorkflowPage */

/** The page, given the console's helpers (`cw`: el, get, act, time, dur, state, runLink, fill, attemptRows, notice). */
function cronwardenWorkflowPage(cw) {
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';
  const ACTIVE = new Set(['running', 'retrying']);
  const DONE = new Set(['completed', 'superseded']);
  /** What the page shows now: the run, the JSON it was drawn from, the step and the step run opened. */
  let shown = { id: null, key: '', step: null, run: null, runKey: '' };
  const at = (iso) => (iso ? Date.parse(iso) : null);

  /** Text width in the SVG's fonts, to size the boxes before dagre places them. */
  const measure = (() => {
    const ctx = document.createElement('canvas').getContext('2d');
    return (text, bold) => {
      ctx.font = (bold ? '600 12px' : '11px') + ' system-ui, sans-serif';
      return ctx.measureText(text).width;
    };
  })();
  const LINE = 15;
  const PAD = 9;
  /** Box widths: what the widest line needs (a failure's reason aside: it is cut to fit), within these. */
  const MIN_BOX = 140;
  const MAX_BOX = 250;
  /** Smaller than this, the graph scrolls in its box instead of shrinking (its text would be too small). */
  const MIN_SCALE = 0.7;

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) e.append(c);
    return e;
  }
  /** An edge through dagre's points as a smooth B-spline (the curve d3's curveBasis draws). */
  function curve(points) {
    const p = points.map((q) => [Math.round(q.x * 10) / 10, Math.round(q.y * 10) / 10]);
    if (p.length < 3) return 'M' + p.map((q) => q.join(',')).join('L');
    let d = 'M' + p[0].join(',') + 'L' + [(5 * p[0][0] + p[1][0]) / 6, (5 * p[0][1] + p[1][1]) / 6].join(',');
    for (let i = 1; i < p.length - 1; i++) {
      const [a, b, c] = [p[i - 1], p[i], p[i + 1]];
      d +=
        'C' +
        [
          (2 * a[0] + b[0]) / 3,
          (2 * a[1] + b[1]) / 3,
          (a[0] + 2 * b[0]) / 3,
          (a[1] + 2 * b[1]) / 3,
          (a[0] + 4 * b[0] + c[0]) / 6,
          (a[1] + 4 * b[1] + c[1]) / 6,
        ].join(',');
    }
    const [b, c] = [p[p.length - 2], p[p.length - 1]];
    return (
      d +
      'C' +
      [(2 * b[0] + c[0]) / 3, (2 * b[1] + c[1]) / 3, (b[0] + 2 * c[0]) / 3, (b[1] + 2 * c[1]) / 3, c[0], c[1]].join(',')
    );
  }
  function layout(boxes, edges, rankdir) {
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir, nodesep: 22, ranksep: 46, marginx: 6, marginy: 6 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const b of boxes) g.setNode(b.name, { width: b.width, height: b.height });
    for (const [from, to] of edges) g.setEdge(from, to);
    dagre.layout(g);
    return g;
  }

  /** The graph: left to right, or top to bottom where that fits a narrow box better; scaled a little, or scrolled, past that. */
  function drawGraph(view, m) {
    const box = $('wf-graph');
    const edges = view.steps.flatMap((s) => s.needs.map((n) => [n, s.name]));
    const sized = m.steps.flatMap((x) => x.lines.filter((l) => l.cls !== 'wf-reason'));
    const widest = Math.max(...sized.map((l) => measure(l.text, l.cls === 'wf-name')));
    const width = Math.max(MIN_BOX, Math.min(MAX_BOX, Math.ceil(widest) + 2 * PAD));
    const boxes = m.steps.map((x) => ({ name: x.step.name, width, height: x.lines.length * LINE + 2 * PAD - 3 }));
    const room = box.clientWidth || 1000;
    let g = layout(boxes, edges, 'LR');
    if (g.graph().width > room) {
      const tb = layout(boxes, edges, 'TB');
      if (tb.graph().width < g.graph().width) g = tb;
    }
    const { width: W, height: H } = g.graph();
    const scale = W > room && room / W >= MIN_SCALE ? room / W : 1;
    const onPath = new Map(m.critical.map((c, i) => [c.name, i]));
    // Arrowheads of a fixed size, whatever the edge's width.
    const arrow = (id, size) =>
      svg(
        'marker',
        {
          id,
          viewBox: '0 0 10 10',
          refX: 9,
          refY: 5,
          markerUnits: 'userSpaceOnUse',
          markerWidth: size,
          markerHeight: size,
          orient: 'auto',
        },
        svg('path', { d: 'M0,0L10,5L0,10z', class: id }),
      );
    const root = svg(
      'svg',
      {
        class: 'wf-svg',
        viewBox: `0 0 ${W} ${H}`,
        width: Math.ceil(W * scale),
        height: Math.ceil(H * scale),
        role: 'img',
        'aria-label': 'workflow ' + view.workflow + ': ' + view.steps.length + ' steps',
      },
      svg('defs', {}, arrow('wf-arrow', 9), arrow('wf-arrow-critical', 12)),
    );
    const edgeLayer = svg('g', { class: 'wf-edges' });
    for (const e of g.edges()) {
      // On the path: the edge from one step of the chain to the next.
      const on = onPath.has(e.v) && onPath.get(e.w) === onPath.get(e.v) + 1;
      edgeLayer.append(
        svg('path', {
          class: 'wf-edge' + (on ? ' critical' : ''),
          'data-from': e.v,
          'data-to': e.w,
          d: curve(g.edge(e).points),
          'marker-end': on ? 'url(#wf-arrow-critical)' : 'url(#wf-arrow)',
        }),
      );
    }
    const nodeLayer = svg('g', { class: 'wf-nodes' });
    for (const x of m.steps) {
      const name = x.step.name;
      const n = g.node(name);
      const left = -n.width / 2 + PAD;
      const text = svg('text', { x: left, y: -n.height / 2 + PAD + 9 });
      x.lines.forEach((l, i) => {
        const fit = fitText(l.text, n.width - 2 * PAD, l.cls === 'wf-name');
        text.append(svg('tspan', { x: left, dy: i ? LINE : 0, class: l.cls }, fit));
      });
      const cls =
        'wf-node st-' + x.drawn + (onPath.has(name) ? ' critical' : '') + (shown.step === name ? ' selected' : '');
      const node = svg(
        'g',
        { class: cls, 'data-step': name, transform: `translate(${n.x},${n.y})`, tabindex: 0, role: 'button' },
        svg('title', {}, x.lines.map((l) => l.text).join('\n')),
        svg('rect', { x: -n.width / 2, y: -n.height / 2, width: n.width, height: n.height, rx: 6 }),
        text,
      );
      // The critical path's boxes: a halo around the box, so the box keeps its state's colours.
      if (onPath.has(name))
        node.prepend(
          svg('rect', {
            class: 'wf-halo',
            x: -n.width / 2 - 4,
            y: -n.height / 2 - 4,
            width: n.width + 8,
            height: n.height + 8,
            rx: 9,
          }),
        );
      node.addEventListener('click', () => openStep(name));
      node.addEventListener('keydown', (ev) => {
        if (ev.key !== 'Enter' && ev.key !== ' ') return;
        ev.preventDefault();
        openStep(name);
      });
      nodeLayer.append(node);
    }
    root.append(edgeLayer, nodeLayer);
    box.replaceChildren(root);
  }
  /** A line cut with an ellipsis to fit the box (the whole text is the box's tooltip). */
  function fitText(line, room, bold) {
    if (measure(line, bold) <= room) return line;
    let n = line.length;
    while (n > 1 && measure(line.slice(0, n) + '…', bold) > room) n--;
    return line.slice(0, n) + '…';
  }

  function header(view, m) {
    $('wf-title').replaceChildren('Workflow run ' + view.id + ' · ' + view.workflow + ' · ', cw.state(view.state));
    const path = m.critical;
    const fields = [
      ['workflow', cw.el('a', { href: '#runs?job=' + encodeURIComponent(view.workflow) }, view.workflow)],
      ['state', cw.state(view.state)],
      ['scheduled', cw.time(view.scheduledAt)],
      ['started', cw.time(view.steps.length ? new Date(m.runStart).toISOString() : null)],
      ['finished', cw.time(view.finishedAt)],
      ['length', view.steps.length ? cw.dur(m.lengthMs) + (view.finishedAt ? '' : ' so far') : '–'],
      [
        'critical path',
        path.length
          ? cw.el(
              'span',
              { id: 'wf-critical' },
              path.map((c) => c.name + ' ' + cw.dur(c.ms)).join(' → ') +
                ' = ' +
                cw.dur(path.reduce((sum, c) => sum + c.ms, 0)),
            )
          : '–',
      ],
      ['definition', view.definition ? cw.el('code', {}, view.definition) : 'not started yet'],
      [
        'signals',
        view.signals.length
          ? view.signals.map((g) => cw.el('div', {}, '"' + g.name + '" from ' + g.sentBy + ' at ' + cw.time(g.sentAt)))
          : 'none',
      ],
      ['error', view.error ? cw.el('pre', {}, view.error) : '–'],
    ];
    $('wf-fields').replaceChildren(...fields.flatMap(([k, v]) => [cw.el('dt', {}, k), cw.el('dd', {}, v)]));
    const active = view.state === 'pending' || view.state === 'running' || view.state === 'retrying';
    $('wf-retry').classList.toggle('hidden', view.state !== 'failed' && view.state !== 'cancelled');
    $('wf-cancel').classList.toggle('hidden', !active);
    $('wf-signal').classList.toggle('hidden', !active);
    // Offer the signal a step waits for, without overwriting what the operator typed.
    const waiting = view.steps.find((s) => s.state === 'waiting' && s.waitsFor);
    const name = $('wf-signal-name');
    if (waiting && !name.value && document.activeElement !== name) name.value = waiting.waitsFor;
  }

  /** The opened step: what it waits for, its runs (a mapped step's items, unfinished first), then the opened run's attempts. */
  function stepDetail(view, m) {
    const entry = m.steps.find((x) => x.step.name === shown.step);
    $('wf-step').classList.toggle('hidden', !entry);
    if (!entry) return;
    const s = entry.step;
    $('wf-step-title').replaceChildren('Step ' + s.name + ' · ', cw.state(entry.drawn));
    const waits = [
      s.signal
        ? 'signal "' + s.signal.name + '" (at most ' + cw.dur(s.signal.timeoutMs) + ', then ' + s.signal.onTimeout + ')'
        : '',
      s.afterMs ? cw.dur(s.afterMs) + ' after its needs' : '',
    ]
      .filter(Boolean)
      .join('; ');
    const settled = entry.span && entry.drawn !== 'running' && s.runs.every((r) => r.finishedAt);
    const fields = [
      ['needs', s.needs.join(', ') || 'nothing: it starts the run'],
      [
        'runs',
        s.mapped ? (s.runs.length ? m.fanOut(s) : 'fan-out, not made yet') : s.runs.length ? 'one' : 'not made yet',
      ],
      ['waits for', waits || 'its needs only'],
      ...(s.state === 'waiting' && s.waitsFor
        ? [['waiting', 'for signal "' + s.waitsFor + '" until ' + cw.time(s.timeoutAt)]]
        : []),
      ['ready', cw.time(s.readyAt)],
      // Its last run's end (a retry stamps the gate's completion anew); the gate's for a step never made.
      ['ended', settled ? cw.time(new Date(entry.span.end).toISOString()) : cw.time(s.completedAt)],
      ['duration', entry.span ? cw.dur(entry.span.end - entry.span.start) : '–'],
      ['reason', s.reason ? cw.el('pre', {}, s.reason) : '–'],
    ];
    $('wf-step-fields').replaceChildren(...fields.flatMap(([k, v]) => [cw.el('dt', {}, k), cw.el('dd', {}, v)]));
    const order = (r) =>
      r.state === 'failed' || r.state === 'cancelled' ? 0 : ACTIVE.has(r.state) ? 1 : DONE.has(r.state) ? 3 : 2;
    const runs = [...s.runs].sort((a, b) => order(a) - order(b) || (a.item ?? -1) - (b.item ?? -1));
    cw.fill(
      'wf-items',
      runs.map((r) => [
        r.item ?? '–',
        cw.runLink(r.id),
        cw.state(r.state),
        r.attempts,
        cw.time(r.startedAt),
        r.startedAt && r.finishedAt ? cw.dur(at(r.finishedAt) - at(r.startedAt)) : '–',
        r.result ? cw.el('code', {}, r.result.length > 80 ? r.result.slice(0, 80) + '…' : r.result) : '–',
        r.error ? r.error.split('\n')[0] : '',
        cw.el('button', { type: 'button', class: 'wf-open-run', onclick: () => openRun(r.id) }, 'Attempts'),
      ]),
    );
    if (!s.mapped && s.runs.length === 1 && !shown.run) shown.run = s.runs[0].id;
  }

  /** The opened step run: its result preview and every attempt (GET /api/runs/:id), fetched again when it changed. */
  async function runDetail(view) {
    const r = view.steps.flatMap((s) => s.runs).find((x) => x.id === shown.run);
    $('wf-run').classList.toggle('hidden', !r);
    if (!r) return;
    const key = r.state + '/' + r.attempts + '/' + r.finishedAt;
    if (key === shown.runKey) return;
    const detail = await cw.get('api/runs/' + encodeURIComponent(r.id));
    shown.runKey = key;
    $('wf-run-title').replaceChildren(
      'Run ',
      cw.runLink(r.id),
      r.item === null ? '' : ' · item ' + r.item,
      ' · ',
      cw.state(r.state),
    );
    $('wf-result').textContent = r.result ?? 'no result stored';
    cw.fill('wf-attempts', cw.attemptRows(detail.attempts));
  }

  function openStep(name) {
    shown.step = shown.step === name ? null : name;
    shown.run = null;
    shown.runKey = '';
    shown.key = '';
    show(shown.id).catch((err) => cw.notice(true, String(err.message || err)));
  }
  function openRun(id) {
    shown.run = id;
    shown.runKey = '';
    show(shown.id).catch((err) => cw.notice(true, String(err.message || err)));
  }

  /** Draws run `id` (again): the graph whenever it changed or a step is still running (durations grow). */
  async function show(id) {
    if (shown.id !== id) shown = { id, key: '', step: null, run: null, runKey: '' };
    const view = await cw.get('api/runs/' + encodeURIComponent(id) + '/workflow');
    const now = Date.now();
    const m = cronwardenWorkflowModel(view, now, cw);
    const key = JSON.stringify(view) + '|' + shown.step + '|' + shown.run;
    const live = m.steps.some((x) => x.drawn === 'running' || x.drawn === 'ready');
    header(view, m);
    if (key !== shown.key || live) {
      if (view.steps.length) drawGraph(view, m);
      else
        $('wf-graph').replaceChildren(
          cw.el('p', { class: 'muted' }, 'The run has not started yet: its steps appear once a worker starts it.'),
        );
    }
    if (key !== shown.key) stepDetail(view, m);
    shown.key = key;
    await runDetail(view);
  }

  function act(path, body, done) {
    return cw.act('api/runs/' + encodeURIComponent(shown.id) + path, body, done);
  }
  $('wf-retry').addEventListener('click', () =>
    act(
      '/retry',
      null,
      (b) =>
        'workflow run ' +
        b.runId +
        ' retried from ' +
        b.previousState +
        ': its failed and cancelled steps run again, completed steps keep their results',
    ),
  );
  $('wf-cancel').addEventListener('click', () =>
    act('/cancel', { reason: 'from the console' }, (b) => 'workflow run ' + b.runId + ' cancelled'),
  );
  $('wf-signal-send').addEventListener('click', () => {
    const name = $('wf-signal-name').value.trim();
    const text = $('wf-signal-data').value.trim();
    let data;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      cw.notice(true, 'The signal\'s data must be JSON, e.g. {"approvedBy": "alice"}');
      return;
    }
    if (!name) {
      cw.notice(true, 'Name the signal (a step waits for it by name).');
      return;
    }
    act('/signal/' + encodeURIComponent(name), { data }, (b) =>
      b.accepted
        ? 'signal "' + name + '" sent to run ' + b.runId + '; ' + b.started + ' step run(s) started'
        : 'run ' + b.runId + ' had a signal "' + name + '" already: the first one counts',
    );
  });

  return { show };
}
