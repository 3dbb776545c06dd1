import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { checkHistory, countWindow, type AttemptLogRecord, type History, type RunRecord } from '../../src/drill/checker.js';

const T = Date.UTC(2026, 0, 1);
function clean(): { history: History; expected: Map<string, number[]> } {
  const runs: RunRecord[] = [];
  const effects = [];
  let id = 1n;
  for (let s = 0; s < 10; s++) {
    for (const job of ['a', 'b']) {
      const token = BigInt(100 + s);
      runs.push({ id, job, scheduledAt: T + s * 1000, leaderToken: s < 5 ? 1n : 2n, state: 'completed', completedToken: token, committedAt: T + s * 1000 + 40 });
      effects.push({ runId: id, token });
      id++;
    }
  }
  const times = Array.from({ length: 10 }, (_, s) => T + s * 1000);
  return { history: { runs, effects }, expected: new Map([['a', times], ['b', times]]) };
}

describe('exactly-once checker', () => {
  it('passes a clean history', () => {
    const { history, expected } = clean();
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.ok, true, JSON.stringify(report.violations));
    assert.equal(report.expected, 20);
    assert.equal(report.committed, 20);
  });

  it('catches a planted duplicate fire (I1)', () => {
    const { history, expected } = clean();
    history.runs.push({ ...history.runs[3]!, id: 99n, leaderToken: 2n });
    const report = checkHistory(history, { expected });
    assert.equal(report.ok, false);
    assert.equal(report.duplicated, 1);
    assert.ok(report.violations.some((v) => v.invariant === 'I1'));
  });

  it('catches a planted gap (I2)', () => {
    const { history, expected } = clean();
    history.runs = history.runs.filter((r) => !(r.job === 'b' && r.scheduledAt === T + 7000));
    const report = checkHistory(history, { expected });
    assert.equal(report.missed, 1);
    assert.match(report.violations.find((v) => v.invariant === 'I2')!.message, /b@2026-01-01T00:00:07/);
  });

  it('catches a fire committed before it was due (a leader trusting a fast wall clock)', () => {
    const { history, expected } = clean();
    history.runs[4]!.committedAt = history.runs[4]!.scheduledAt - 300; // within tolerance
    assert.equal(checkHistory(history, { expected }).ok, true);
    history.runs[6]!.committedAt = history.runs[6]!.scheduledAt - 5 * 60_000;
    const report = checkHistory(history, { expected });
    assert.equal(report.ok, false);
    assert.equal(report.early, 1);
    assert.match(report.violations.find((v) => v.invariant === 'early')!.message, /a@2026-01-01T00:00:03.000Z committed 300000 ms before it was due/);
  });

  it('catches a leader token that goes back in commit order (I3)', () => {
    const { history, expected } = clean();
    history.runs[12] = { ...history.runs[12]!, leaderToken: 1n };
    const report = checkHistory(history, { expected });
    assert.equal(report.tokenRegressions, 1);
    assert.equal(report.ok, false);
  });

  it('catches a planted stale write and a doubled effect (I4)', () => {
    const { history, expected } = clean();
    history.effects!.push({ runId: 5n, token: 1n }); // an older attempt's write landed too
    const report = checkHistory(history, { expected });
    assert.equal(report.effectsDuplicated, 1);
    assert.equal(report.staleEffects, 1);
    assert.equal(report.ok, false);
  });

  it('catches a completed run without its effect, and an unfinished run when completion is required', () => {
    const { history, expected } = clean();
    history.effects = history.effects!.filter((e) => e.runId !== 4n);
    history.runs[10] = { ...history.runs[10]!, state: 'running', completedToken: null };
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.effectsMissing, 1);
    assert.equal(report.incomplete, 1);
  });

  /** The clean history plus its attempt log: one committed row per run, by the completing attempt. */
  function withLog(): { history: History & { attemptLog: AttemptLogRecord[] }; expected: Map<string, number[]> } {
    const { history, expected } = clean();
    const attemptLog: AttemptLogRecord[] = history.runs.map((r) => ({ runId: r.id, token: r.completedToken!, outcome: 'committed' }));
    return { history: { ...history, attemptLog }, expected };
  }

  it('passes a clean attempt log and reports its outcomes', () => {
    const { history, expected } = withLog();
    // A re-delivery after completion (newer token) skipped: benign, not a stale write.
    history.attemptLog.push({ runId: 3n, token: 500n, outcome: 'skipped' });
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.ok, true, JSON.stringify(report.violations));
    assert.deepEqual(report.attemptLog, { attempts: 21, committed: 20, refused: 0, skipped: 1, staleSkipped: 0, failed: 0 });
    assert.equal(report.staleWritesRefused, 0);
    assert.equal(report.staleWritesLanded, 0);
    assert.equal(report.writesCommittedTwice, 0);
  });

  it('catches a stale write that landed: a committed log row whose token did not complete the run (I4)', () => {
    const { history, expected } = withLog();
    // Run 7 was completed by token 103; an older attempt (token 50) logs that its write committed.
    // The effect table (written in the transaction) looks clean: only the independent log shows it.
    const run7 = history.runs.find((r) => r.id === 7n)!;
    history.attemptLog = history.attemptLog.filter((l) => l.runId !== 7n);
    history.attemptLog.push({ runId: 7n, token: 50n, outcome: 'committed' });
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.ok, false);
    assert.equal(report.staleWritesLanded, 1);
    assert.equal(report.writesCommittedTwice, 0);
    assert.equal(report.staleEffects, 0, 'the effect table alone does not see it');
    assert.match(report.violations.find((v) => v.invariant === 'I4')!.message, new RegExp(`run 7: .*token 50, but token ${run7.completedToken} completed the run`));
  });

  it('catches a committed log row for a run no attempt completed (I4)', () => {
    const { history, expected } = withLog();
    history.runs[2] = { ...history.runs[2]!, state: 'running', completedToken: null };
    const report = checkHistory(history, { expected });
    assert.equal(report.staleWritesLanded, 1);
    assert.match(report.violations.find((v) => v.invariant === 'I4')!.message, /run 3: .*no attempt completed the run/);
  });

  it('catches two committed writes of one run in the attempt log (I4)', () => {
    const { history, expected } = withLog();
    const run = history.runs[5]!;
    history.attemptLog.push({ runId: run.id, token: run.completedToken!, outcome: 'committed' });
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.ok, false);
    assert.equal(report.writesCommittedTwice, 1);
    assert.equal(report.staleWritesLanded, 0);
    assert.match(report.violations.find((v) => v.invariant === 'I4')!.message, new RegExp(`run ${run.id}: the attempt log has 2 committed writes`));
  });

  it('counts refused and stale-skipped attempts as stale writes refused, not as violations', () => {
    const { history, expected } = withLog();
    const run = history.runs[8]!; // completed by token 104
    history.attemptLog.push({ runId: run.id, token: run.completedToken! - 1n, outcome: 'refused' }); // woke while the newer attempt ran
    history.attemptLog.push({ runId: history.runs[9]!.id, token: 1n, outcome: 'refused' });
    history.attemptLog.push({ runId: history.runs[10]!.id, token: 2n, outcome: 'skipped' }); // woke after the newer attempt completed
    history.attemptLog.push({ runId: history.runs[11]!.id, token: 3n, outcome: 'failed' });
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.ok, true, JSON.stringify(report.violations));
    assert.deepEqual(report.attemptLog, { attempts: 24, committed: 20, refused: 2, skipped: 1, staleSkipped: 1, failed: 1 });
    assert.equal(report.staleWritesRefused, 3);
    assert.equal(report.violations.length, 0);
  });

  it('without an attempt log, reports none and counts nothing', () => {
    const { history, expected } = clean();
    const report = checkHistory(history, { expected });
    assert.equal(report.attemptLog, null);
    assert.equal(report.staleWritesRefused, 0);
  });

  it('counts one stretch of the window: expected, committed, duplicated and missed', () => {
    const { history, expected } = clean();
    history.runs.push({ ...history.runs[4]!, id: 98n }); // a@2s twice
    history.runs = history.runs.filter((r) => !(r.job === 'b' && r.scheduledAt === T + 3000));
    assert.deepEqual(countWindow(history, { expected }, T + 2000, T + 4000), { expected: 4, committed: 4, duplicated: 1, missed: 1 });
    assert.deepEqual(countWindow(history, { expected }, T + 5000, T + 6000), { expected: 2, committed: 2, duplicated: 0, missed: 0 });
  });
});
