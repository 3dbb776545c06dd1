import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  checkHistory,
  countWindow,
  type AttemptLogRecord,
  type History,
  type RunRecord,
} from '../../src/drill/checker.js';
import { drillJobNames } from '../../src/drill/job-names.js';
import { shardOf } from '../../src/scheduler/shards/shard-map.js';

const T = Date.UTC(2026, 0, 1);
function clean(): { history: History; expected: Map<string, number[]> } {
  const runs: RunRecord[] = [];
  const effects = [];
  let id = 1n;
  for (let s = 0; s < 10; s++) {
    for (const job of ['a', 'b']) {
      const token = BigInt(100 + s);
      runs.push({
        id,
        job,
        scheduledAt: T + s * 1000,
        leaderToken: s < 5 ? 1n : 2n,
        state: 'completed',
        completedToken: token,
        committedAt: T + s * 1000 + 40,
      });
      effects.push({ runId: id, token });
      id++;
    }
  }
  const times = Array.from({ length: 10 }, (_, s) => T + s * 1000);
  return {
    history: { runs, effects },
    expected: new Map([
      ['a', times],
      ['b', times],
    ]),
  };
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
    assert.match(
      report.violations.find((v) => v.invariant === 'early')!.message,
      /a@2026-01-01T00:00:03.000Z committed 300000 ms before it was due/,
    );
  });

  it('catches a leader token that goes back in commit order (I3)', () => {
    const { history, expected } = clean();
    history.runs[12] = { ...history.runs[12]!, leaderToken: 1n };
    const report = checkHistory(history, { expected });
    assert.equal(report.tokenRegressions, 1);
    assert.equal(report.ok, false);
  });

  it("checks I3 per shard: each shard's own lease tokens, in commit order", () => {
    const [a, b] = drillJobNames(2, 2) as [string, string];
    assert.deepEqual([shardOf(a, 2), shardOf(b, 2)], [0, 1]);
    // Two shards' leases hand out tokens of their own: shard 1's are lower than shard 0's, and
    // its fires interleave with shard 0's in commit order.
    const runs: RunRecord[] = [];
    for (let s = 0; s < 6; s++)
      for (const [job, token] of [
        [a, 100n + BigInt(s >= 3 ? 1 : 0)],
        [b, 7n],
      ] as const)
        runs.push({
          id: BigInt(runs.length + 1),
          job,
          scheduledAt: T + s * 1000,
          leaderToken: token,
          state: 'completed',
          completedToken: null,
        });
    const times = Array.from({ length: 6 }, (_, s) => T + s * 1000);
    const expected = new Map([
      [a, times],
      [b, times],
    ]);
    assert.equal(checkHistory({ runs }, { expected, shards: 2 }).tokenRegressions, 0);
    // One order for every fire (unsharded) would see shard 1's 7 after shard 0's 100 as going back.
    assert.equal(checkHistory({ runs }, { expected }).tokenRegressions, 6);
    // A regression inside one shard is still caught, and named with its shard.
    runs[8] = { ...runs[8]!, leaderToken: 100n }; // a@T+4s, after token 101
    const report = checkHistory({ runs }, { expected, shards: 2 });
    assert.equal(report.tokenRegressions, 1);
    assert.match(
      report.violations.find((v) => v.invariant === 'I3')!.message,
      /shard 0\) committed with leader token 100 after token 101/,
    );
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
    const attemptLog: AttemptLogRecord[] = history.runs.map((r) => ({
      runId: r.id,
      token: r.completedToken!,
      outcome: 'committed',
    }));
    return { history: { ...history, attemptLog }, expected };
  }

  it('passes a clean attempt log and reports its outcomes', () => {
    const { history, expected } = withLog();
    // A re-delivery after completion (newer token) skipped: benign, not a stale write.
    history.attemptLog.push({ runId: 3n, token: 500n, outcome: 'skipped' });
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(report.ok, true, JSON.stringify(report.violations));
    assert.deepEqual(report.attemptLog, {
      attempts: 21,
      committed: 20,
      refused: 0,
      skipped: 1,
      staleSkipped: 0,
      failed: 0,
    });
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
    assert.match(
      report.violations.find((v) => v.invariant === 'I4')!.message,
      new RegExp(`run 7: .*token 50, but token ${run7.completedToken} completed the run`),
    );
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
    assert.match(
      report.violations.find((v) => v.invariant === 'I4')!.message,
      new RegExp(`run ${run.id}: the attempt log has 2 committed writes`),
    );
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
    assert.deepEqual(report.attemptLog, {
      attempts: 24,
      committed: 20,
      refused: 2,
      skipped: 1,
      staleSkipped: 1,
      failed: 1,
    });
    assert.equal(report.staleWritesRefused, 3);
    assert.equal(report.violations.length, 0);
  });

  it('without an attempt log, reports none and counts nothing', () => {
    const { history, expected } = clean();
    const report = checkHistory(history, { expected });
    assert.equal(report.attemptLog, null);
    assert.equal(report.staleWritesRefused, 0);
  });

  it('I6: every run settled; superseded, skipped, failed and cancelled count as settled, each counted apart', () => {
    const { history, expected } = clean();
    history.runs[0] = { ...history.runs[0]!, state: 'superseded', completedToken: null };
    history.effects = history.effects!.filter((e) => e.runId !== history.runs[0]!.id);
    history.runs[1] = { ...history.runs[1]!, state: 'skipped' };
    history.runs[2] = { ...history.runs[2]!, state: 'failed' };
    history.runs[3] = { ...history.runs[3]!, state: 'cancelled' };
    const report = checkHistory(history, { expected });
    assert.equal(report.ok, true, JSON.stringify(report.violations));
    assert.deepEqual(report.settlement, {
      completed: 16,
      superseded: 1,
      skipped: 1,
      failed: 1,
      cancelled: 1,
      unsettled: 0,
      unsettledByState: {},
    });
    // A superseded run is done for the completion check too: it completed without its effect, by rule.
    const strict = checkHistory(history, { expected, requireCompleted: true });
    assert.equal(strict.incomplete, 3, 'skipped, failed and cancelled are not completions');
    assert.equal(strict.effectsMissing, 0);
  });

  it('I6: catches runs left pending, running or retrying (a queue that lost them), and does not hide them', () => {
    const { history, expected } = clean();
    history.runs[4] = { ...history.runs[4]!, state: 'pending', completedToken: null };
    history.runs[5] = { ...history.runs[5]!, state: 'pending', completedToken: null };
    history.runs[6] = { ...history.runs[6]!, state: 'retrying', completedToken: null };
    history.effects = history.effects!.filter((e) => e.runId < 5n || e.runId > 7n);
    const report = checkHistory(history, { expected });
    assert.equal(report.ok, false);
    assert.equal(report.settlement.unsettled, 3);
    assert.deepEqual(report.settlement.unsettledByState, { pending: 2, retrying: 1 });
    const i6 = report.violations.filter((v) => v.invariant === 'I6');
    assert.equal(i6.length, 3);
    assert.match(i6[0]!.message, /^run 5 \(a@2026-01-01T00:00:02.000Z\) is still pending at the end$/);
  });

  it('catches, from a log kept outside the ledger, a completion the ledger lost and the slot written again (I4)', () => {
    const { history, expected } = withLog();
    for (const row of history.attemptLog) {
      const run = history.runs.find((r) => r.id === row.runId)!;
      Object.assign(row, { job: run.job, scheduledAt: run.scheduledAt });
    }
    assert.equal(checkHistory(history, { expected }).ok, true, 'slots in the log agree with the ledger');
    // The ledger lost run 3 (a@1s) after its write committed; the slot fired again as run 77, whose
    // write committed too: the effect happened twice in the world, though the ledger looks clean.
    const lost = history.runs.find((r) => r.id === 3n)!;
    history.runs = history.runs.map((r) => (r.id === 3n ? { ...r, id: 77n } : r));
    history.effects = history.effects!.map((e) => (e.runId === 3n ? { ...e, runId: 77n } : e));
    history.attemptLog.push({
      runId: 77n,
      token: lost.completedToken!,
      outcome: 'committed',
      job: lost.job,
      scheduledAt: lost.scheduledAt,
    });
    const report = checkHistory(history, { expected });
    assert.equal(report.ok, false);
    assert.equal(report.writesLostByLedger, 1);
    assert.equal(report.writesCommittedTwice, 1);
    assert.equal(report.duplicated, 0, 'the ledger alone does not see it');
    assert.match(
      report.violations.find((v) => /forgot/.test(v.message))!.message,
      /^run 3 \(a@2026-01-01T00:00:01.000Z\).*the ledger forgot it: it has no such run/,
    );
    assert.ok(
      report.violations.some((v) =>
        /a@2026-01-01T00:00:01.000Z: the attempt log has committed writes of 2 different runs \(3, 77\)/.test(
          v.message,
        ),
      ),
    );
  });

  it('counts one stretch of the window: expected, committed, duplicated, missed, superseded and unsettled', () => {
    const { history, expected } = clean();
    history.runs.push({ ...history.runs[4]!, id: 98n }); // a@2s twice
    history.runs = history.runs.filter((r) => !(r.job === 'b' && r.scheduledAt === T + 3000));
    const at5 = (job: string) => history.runs.find((r) => r.job === job && r.scheduledAt === T + 5000)!;
    at5('a').state = 'pending';
    at5('b').state = 'superseded';
    history.runs.find((r) => r.job === 'b' && r.scheduledAt === T + 2000)!.trigger = 'standin';
    const a2 = history.runs.find((r) => r.job === 'a' && r.scheduledAt === T + 2000)!;
    const logged = (loggedAt: number) => ({
      runId: a2.id,
      token: 102n,
      outcome: 'committed' as const,
      job: 'a',
      scheduledAt: T + 2000,
      loggedAt,
    });
    history.attemptLog = [logged(T + 2500), logged(T + 2300)];
    assert.deepEqual(countWindow(history, { expected }, T + 2000, T + 4000), {
      expected: 4,
      committed: 4,
      duplicated: 1,
      missed: 1,
      superseded: 0,
      unsettled: 0,
      writtenOnce: 3,
      standIn: 1,
      commitLateMs: { p50: 40, p99: 40, max: 40 },
      firstEffectLateMs: { p50: 300, p99: 300, max: 300 },
    });
    assert.deepEqual(countWindow(history, { expected }, T + 5000, T + 6000), {
      expected: 2,
      committed: 2,
      duplicated: 0,
      missed: 0,
      superseded: 1,
      unsettled: 1,
      writtenOnce: 0,
      standIn: 0,
      commitLateMs: { p50: 40, p99: 40, max: 40 },
      firstEffectLateMs: null,
    });
  });
});
