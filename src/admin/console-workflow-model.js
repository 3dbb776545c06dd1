/**
 * What the console's workflow run page draws, computed from GET /api/runs/:id/workflow without
 * touching the page (served as /assets/workflow-model.js; test/admin/console-workflow-model.test.ts
 * runs it in node): each step's state as drawn, its duration, its fan-out counts, the lines of its
 * box, and the critical path.
 */
'use strict';

/* exported cronwardenWorkflowModel */

/**
 * The model of `view` at `now` (ms, this browser's clock: it only lengthens what still runs).
 * `fmt` writes durations and instants as the rest of the console does: { dur(ms), time(iso) }.
 */
function cronwardenWorkflowModel(view, now, fmt) {
  const ACTIVE = new Set(['running', 'retrying']);
  const DONE = new Set(['completed', 'superseded']);
  const at = (iso) => (iso ? Date.parse(iso) : null);

  /** A step's state as drawn: the gate's, and `running` for a ready step whose runs have started. */
  function stepState(s) {
    if (s.state !== 'ready') return s.state;
    return s.runs.some((r) => ACTIVE.has(r.state) || DONE.has(r.state) || r.startedAt) ? 'running' : 'ready';
  }

  /** A mapped step's fan-out: "48/50 done, 1 running, 1 failed". */
  function fanOut(s) {
    const n = { running: 0, retrying: 0, pending: 0, failed: 0, cancelled: 0 };
    let done = 0;
    for (const r of s.runs) {
      if (DONE.has(r.state)) done++;
      else if (r.state in n) n[r.state]++;
    }
    const rest = Object.entries(n).filter(([, v]) => v > 0);
    return done + '/' + (s.itemsTotal ?? s.runs.length) + ' done' + rest.map(([k, v]) => ', ' + v + ' ' + k).join('');
  }

  /**
   * From when a step was made ready to when its last run finished; now while one still runs or
   * waits for a worker. Its runs' own times, not the gate's completion, which a retry stamps anew.
   * A step made with no runs (a fan-out over nothing) ends at its gate's completion. Null: never made.
   */
  function span(s) {
    const start = at(s.readyAt);
    if (start === null) return null;
    const open = s.state === 'ready' || s.runs.some((r) => !r.finishedAt);
    if (open) return { start, end: Math.max(start, now) };
    const ends = s.runs.map((r) => at(r.finishedAt));
    return { start, end: ends.length ? Math.max(...ends) : (at(s.completedAt) ?? start) };
  }

  const spans = new Map(view.steps.map((s) => [s.name, span(s)]));
  const starts = [...spans.values()].filter(Boolean).map((x) => x.start);
  const runStart = starts.length ? Math.min(...starts) : at(view.createdAt);
  const runEnd = at(view.finishedAt) ?? now;
  const needsEnd = (s) => Math.max(runStart, ...s.needs.map((n) => spans.get(n)?.end ?? runStart));

  /**
   * The critical path: from the step that ended last, back through the need that ended last, to a
   * step with no needs. Each step's share runs from that need's end (the run's start for the first)
   * to its own end (at most the run's end: a straggler finishing after the run failed is not the
   * run's length), so the shares add up to the run's length: the chain that made it as long as it was.
   */
  function criticalPath() {
    const byName = new Map(view.steps.map((s) => [s.name, s]));
    const end = (n) => Math.min(spans.get(n).end, runEnd);
    const latest = (names) =>
      names.filter((n) => spans.get(n)).reduce((best, n) => (best === null || end(n) > end(best) ? n : best), null);
    const path = [];
    for (let step = latest([...byName.keys()]); step !== null; step = latest(byName.get(step).needs))
      path.unshift(step);
    return path.map((name, i) => ({ name, ms: end(name) - (i ? end(path[i - 1]) : runStart) }));
  }

  /** A box's lines: name, state and duration, fan-out or attempts, what it waits for; a failure's reason last. */
  function lines(s, drawn, sp) {
    const out = [
      { text: (s.mapped ? '⋔ ' : '') + s.name, cls: 'wf-name' },
      { text: drawn + (sp ? ' · ' + fmt.dur(sp.end - sp.start) : ''), cls: 'wf-state' },
    ];
    const info = (text) => out.push({ text, cls: 'wf-info' });
    if (s.mapped) info(s.runs.length ? fanOut(s) : 'fan-out');
    else if (s.runs[0] && s.runs[0].attempts > 1) info('attempt ' + s.runs[0].attempts);
    const signalCame = s.signal && view.signals.some((g) => g.name === s.signal.name);
    if (s.state === 'waiting' && s.waitsFor) {
      info('waits for signal "' + s.waitsFor + '"');
      info('until ' + fmt.time(s.timeoutAt));
    } else if (s.state === 'waiting' && s.signal && !signalCame) info('will wait for signal "' + s.signal.name + '"');
    else if (s.state === 'waiting' && s.afterMs) info('starts ' + fmt.dur(s.afterMs) + ' after its needs');
    else if (sp && s.signal && sp.start > needsEnd(s))
      info('waited ' + fmt.dur(sp.start - needsEnd(s)) + ' for "' + s.signal.name + '"');
    if (s.reason && (s.state === 'failed' || s.state === 'cancelled'))
      out.push({ text: s.reason.split('\n')[0], cls: 'wf-reason' });
    return out;
  }

  const steps = view.steps.map((s) => {
    const drawn = stepState(s);
    const sp = spans.get(s.name);
    return { step: s, drawn, span: sp, lines: lines(s, drawn, sp) };
  });
  return { steps, critical: criticalPath(), runStart, lengthMs: runEnd - runStart, fanOut };
}
