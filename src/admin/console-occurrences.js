/**
 * The console's job page (served as /assets/occurrences.js, loaded by console.html): every due
 * instant of the job over a range (GET /api/jobs/:job/occurrences), drawn as strips of an hour (a
 * range up to two days) or a day each, coloured by outcome (the colours live once, in
 * /assets/occurrences.css, for the strips and the legend); one line per answer; the job's policies
 * and its latest runs. Names and reasons go into the page as text, never as HTML, and the strips
 * are SVG placed by attributes (the page's CSP allows no inline style).
 */
'use strict';

/* exported cronwardenJobPage */

/** The page, given the console's helpers (`cw`: el, get, fill, time, state, runLink). */
function cronwardenJobPage(cw) {
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';
  const HOUR = 3600000;
  const DAY = 24 * HOUR;
  const OUTCOMES = ['fired', 'skipped', 'missed', 'not-yet-due', 'not-accounted', 'unanswered'];
  const WIDTH = 1000;
  /** The job's policies as GET /api/jobs lists them. */
  const POLICIES = ['misfire', 'overlap', 'catchUpWindowMs', 'maxCatchUp', 'overlapQueueMax', 'dstRepeat', 'dstGap'];

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) e.append(c);
    return e;
  }
  /** Buckets of the range: an hour each up to two days, else a day each (in this browser's zone). */
  function buckets(from, to) {
    const size = to - from <= 2 * DAY ? HOUR : DAY;
    const start = new Date(from);
    if (size === HOUR) start.setMinutes(0, 0, 0);
    else start.setHours(0, 0, 0, 0);
    const out = [];
    for (
      let t = start.getTime();
      t <= to;
      t = size === HOUR ? t + HOUR : new Date(new Date(t).setDate(new Date(t).getDate() + 1)).getTime()
    )
      out.push({
        from: t,
        to: size === HOUR ? t + HOUR : new Date(new Date(t).setDate(new Date(t).getDate() + 1)).getTime(),
        size,
      });
    return out;
  }
  function strip(bucket, entries) {
    const span = bucket.to - bucket.from;
    const x = (t) =>
      Math.round(((Math.min(Math.max(t, bucket.from), bucket.to) - bucket.from) / span) * WIDTH * 10) / 10;
    const rects = entries
      .filter((e) => Date.parse(e.last) >= bucket.from && Date.parse(e.first) < bucket.to)
      .map((e) => {
        const a = x(Date.parse(e.first));
        const w = Math.max(1.5, x(Date.parse(e.last)) - a);
        return svg(
          'rect',
          { x: a, y: 0, width: w, height: 14, class: 'oc-' + e.outcome },
          svg('title', {}, e.first + ' .. ' + e.last + ': ' + e.text),
        );
      });
    return svg(
      'svg',
      {
        class: 'oc-strip',
        viewBox: '0 0 ' + WIDTH + ' 14',
        preserveAspectRatio: 'none',
        role: 'img',
        'aria-label': 'due instants ' + new Date(bucket.from).toISOString(),
      },
      ...rects,
    );
  }
  const label = (b) => {
    const d = new Date(b.from);
    const day =
      d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0');
    return b.size === HOUR ? day + ' ' + String(d.getHours()).padStart(2, '0') + ':00' : day;
  };

  async function show(name, rangeMs) {
    const to = Date.now();
    const from = to - rangeMs;
    const q = new URLSearchParams({ from: new Date(from).toISOString(), to: new Date(to).toISOString() });
    const [body, jobs, runs] = await Promise.all([
      cw.get('api/jobs/' + encodeURIComponent(name) + '/occurrences?' + q),
      cw.get('api/jobs'),
      cw.get('api/runs?' + new URLSearchParams({ job: name, limit: '20' })),
    ]);
    const job = jobs.jobs.find((j) => j.name === name);
    $('job-title').replaceChildren('Job ' + name);
    const era = body.eras[body.eras.length - 1];
    const fields = [
      [
        'schedule',
        era ? era.schedule + ' (' + era.timezone + ')' : job ? job.schedule + ' (' + job.timezone + ')' : '–',
      ],
      ['accounted through', cw.time(body.watermark)],
      ...(job ? POLICIES.filter((k) => job[k] !== undefined).map((k) => [k, String(job[k])]) : []),
      ...(job && job.paused
        ? [['paused', (job.pausedReason || '') + (job.pausedBy ? ' (by ' + job.pausedBy + ')' : '')]]
        : []),
    ];
    $('job-fields').replaceChildren(...fields.flatMap(([k, v]) => [cw.el('dt', {}, k), cw.el('dd', {}, v)]));
    $('job-runs-link').setAttribute('href', '#runs?job=' + encodeURIComponent(name));
    const bs = buckets(from, to);
    $('job-strips').replaceChildren(
      ...bs.flatMap((b) => [cw.el('span', { class: 'oc-label' }, label(b)), strip(b, body.entries)]),
    );
    $('job-legend').replaceChildren(
      ...OUTCOMES.map((o) => cw.el('span', {}, cw.el('span', { class: 'oc-key oc-' + o }), o)),
    );
    cw.fill(
      'job-occurrences',
      body.entries.map((e) => [
        e.count === 1
          ? cw.time(e.first)
          : [cw.time(e.first), cw.el('div', { class: 'muted' }, '.. ' + cw.time(e.last))],
        cw.el('span', { class: 'oc-name' }, cw.el('span', { class: 'oc-key oc-' + e.outcome }), e.outcome),
        e.count + (e.exact ? '' : '+'),
        e.run ? [cw.runLink(e.run.runId), ' ', e.text] : e.text,
      ]),
    );
    $('job-more').textContent = body.truncatedAfter
      ? 'More than one page of instants: the list stops after ' + cw.time(body.truncatedAfter) + '.'
      : '';
    cw.fill(
      'job-runs',
      runs.runs.map((r) => [cw.runLink(r.id), cw.time(r.scheduledAt), r.trigger, cw.state(r.state)]),
    );
  }
  return { show };
}
