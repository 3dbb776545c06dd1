/**
 * The drill's workflow checker catches what it is there for: a step's effect twice, a completed
 * step without its effect, an effect of a step run that did not complete, a step started before a
 * need completed (I7), a missing item of a fan-out, a workflow slot that never fired, a run left
 * unsettled; and passes a clean history.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { checkWorkflows, type WorkflowHistory, type WorkflowRunRecord } from '../../src/drill/workflow-checker.js';

const T = Date.UTC(2026, 0, 1);
const steps = [
  { name: 'list', needs: [], mapped: false },
  { name: 'each', needs: ['list'], mapped: true },
  { name: 'sum', needs: ['each'], mapped: false },
];

function clean(): { history: WorkflowHistory; run: WorkflowRunRecord } {
  const run: WorkflowRunRecord = {
    id: 1n,
    workflow: 'wf',
    scheduledAt: T,
    state: 'completed',
    steps,
    itemsTotal: new Map([
      ['list', 1],
      ['each', 2],
      ['sum', 1],
    ]),
    stepRuns: [
      { id: 10n, step: 'list', item: null, state: 'completed', startedAt: T + 10, finishedAt: T + 20 },
      { id: 11n, step: 'each', item: 0, state: 'completed', startedAt: T + 30, finishedAt: T + 40 },
      { id: 12n, step: 'each', item: 1, state: 'completed', startedAt: T + 31, finishedAt: T + 45 },
      { id: 13n, step: 'sum', item: null, state: 'completed', startedAt: T + 50, finishedAt: T + 60 },
    ],
  };
  const effects = new Map(run.stepRuns.map((s) => [s.id, 1]));
  return { history: { runs: [run], effects }, run };
}

describe('the workflow checker', () => {
  it('passes a clean history', () => {
    const r = checkWorkflows(clean().history, new Map([['wf', [T]]]));
    assert.equal(r.ok, true, JSON.stringify(r.violations));
    assert.deepEqual([r.workflowRuns, r.stepRuns, r.missed], [1, 4, 0]);
  });

  it('a step effect twice, or missing, or of a step run that did not complete', () => {
    const { history, run } = clean();
    history.effects.set(11n, 2);
    history.effects.delete(13n);
    run.stepRuns[1 + 1]!.state = 'cancelled'; // item 1 of each: its effect landed anyway
    const r = checkWorkflows(history);
    assert.deepEqual([r.effectsDuplicated, r.effectsMissing, r.strayEffects], [1, 1, 1]);
    assert.equal(r.ok, false);
  });

  it('I7: a step started before every run of a step it needs had finished', () => {
    const { history, run } = clean();
    run.stepRuns[3]!.startedAt = T + 44; // sum started before each[1] finished (T + 45)
    const r = checkWorkflows(history);
    assert.equal(r.startedEarly, 1);
    assert.match(r.violations[0]!.message, /step sum started before its need each completed/);
  });

  it('a completed run missing an item of a fan-out, a slot that never fired, a run left unsettled', () => {
    const { history, run } = clean();
    run.stepRuns.splice(2, 1); // each[1] gone
    history.runs.push({ ...clean().run, id: 2n, scheduledAt: T + 1000, state: 'running', stepRuns: [] });
    const r = checkWorkflows(history, new Map([['wf', [T, T + 1000, T + 2000]]]));
    assert.equal(r.missed, 1);
    assert.equal(r.unsettled, 1);
    assert.ok(
      r.violations.some((v) => v.invariant === 'structure' && /1 run\(s\) of step each \(expected 2\)/.test(v.message)),
    );
    assert.equal(r.ok, false);
  });
});
