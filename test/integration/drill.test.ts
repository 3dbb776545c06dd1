/**
 * A short failover drill per backend, every fault kind at least once, real replica processes:
 * each must end with zero violations (I1-I6 and every fault proven by fires before and after; a
 * fault that must move leadership proven by a fire of the new tenure), and the independent attempt
 * log must agree with the ledger. The lease faults run on each backend; the faults on the other
 * servers (BullMQ's Redis, the ledger's PostgreSQL, its standby, a Sentinel group) and the starved
 * host do not depend on the lease backend, so one extra drill on Redis strikes each of them once.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runDrill, type DrillReport } from '../../src/drill/drill.js';
import { applicableFaults, keepsLeader, movesLeader, type FaultKind } from '../../src/drill/faults.js';
import { SHARED_POSTGRES_URL } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const adminUrl = SHARED_POSTGRES_URL.replace(/\/[^/]*$/, '/postgres');

/** Faults on what is not the lease: struck once, in the extra drill. */
const otherServerFaults: FaultKind[] = [
  'queue-restart',
  'queue-flush',
  'ledger-restart',
  'ledger-failover',
  'redis-sentinel-failover',
  'cpu-starve',
];

function summary(backend: string, report: DrillReport): string {
  const log = report.check.attemptLog;
  return (
    `${backend} drill: ${report.check.expected} fires expected, ${report.check.committed} committed; settled ${JSON.stringify(report.check.settlement)}; ` +
    `attempt log ${JSON.stringify(log)}, stale writes refused ${report.staleWritesRefused} (ledger: ${report.staleAttemptsRefused}); ` +
    `${report.explain.line}; ` +
    report.faults
      .map(
        (f) =>
          `${f.kind}: handover ${f.handoverMs ?? '-'} ms, next/new-tenure fire ${f.gapMs} ms (any fire ${f.anyFireMs} ms, bound ${f.boundMs ?? '-'}), ${f.leaderChanges} leader change(s)${f.lockWaits ? ` [${f.lockWaits}]` : ''}`,
      )
      .join('; ')
  );
}

/** What every drill must show, whatever it struck. */
function assertClean(report: DrillReport, kinds: FaultKind[], violations: string[]): void {
  assert.deepEqual(violations, []);
  // cronwarden explain answers every instant of the window, as the checker sees it.
  assert.match(report.explain.line, /^explain: \d+ instants, all answered, agree with the checker$/);
  assert.equal(report.explain.instants, report.check.expected);
  assert.equal(report.faults.length, kinds.length);
  assert.ok(
    report.faults.every((f) => f.counted),
    'every fault proved something',
  );
  // Faults that take the leader away did move it; link trouble and clock skew did not.
  for (const f of report.faults) {
    if (keepsLeader.has(f.kind)) assert.equal(f.leaderChanges, 0, `${f.kind}: ${f.detail}`);
    if (['kill', 'term', 'link-cut'].includes(f.kind))
      assert.ok(f.leaderChanges >= 1 && f.leaderAfter !== f.leaderBefore, `${f.kind}: leader stayed ${f.leaderBefore}`);
    // The gap ran to a fire of the new tenure, within I5's bound.
    if (movesLeader.has(f.kind))
      assert.ok(
        f.gapMs !== null &&
          f.boundMs !== null &&
          f.gapMs <= f.boundMs &&
          f.anyFireMs !== null &&
          f.anyFireMs <= f.gapMs,
        `${f.kind}: ${JSON.stringify(f)}`,
      );
  }
  // The attempt log (written outside the transactions) saw the committed writes, none of them
  // stale, doubled or forgotten by the ledger, and its refusals are counted.
  // (Workflow runs are fires too, but only the jobs' attempts are logged there.)
  const log = report.check.attemptLog;
  const jobFires = report.check.committed - (report.workflows?.workflowRuns ?? 0);
  assert.ok(log && log.committed >= 0.9 * jobFires, `attempt log: ${JSON.stringify(log)}`);
  assert.deepEqual(
    [report.check.staleWritesLanded, report.check.writesCommittedTwice, report.check.writesLostByLedger],
    [0, 0, 0],
  );
  // An attempt fails only when the ledger itself goes away under it.
  if (!kinds.some((k) => k.startsWith('ledger-'))) assert.equal(log.failed, 0);
  assert.equal(report.staleWritesRefused, log.refused + log.staleSkipped);
  assert.equal(report.check.early, 0);
  // The live ledger check, run over the same window before the replicas stop, found nothing either.
  assert.deepEqual(report.liveCheck.counts, {
    'duplicate-slots': 0,
    'token-order': 0,
    unsettled: 0,
    'workflow-order': 0,
    'lost-writes': 0,
    'unanswered-instants': 0,
  });
  // Each fault's own stretch of the window is accounted for, and clean.
  for (const f of report.faults) {
    assert.ok(f.fires && f.fires.expected > 0, `${f.kind}: no scheduled times in its stretch`);
    assert.deepEqual([f.fires.duplicated, f.fires.missed, f.fires.committed], [0, 0, f.fires.expected], f.kind);
  }
  assert.deepEqual(new Set(report.faults.map((f) => f.kind)), new Set(kinds));
  assert.ok(report.check.expected >= 4 * 15, `window too short: ${report.check.expected} fires`);
}

describe('failover drill (short)', () => {
  for (const backend of ['redis', 'postgres', 'etcd'] as const) {
    it(`${backend}: every lease fault kind once, zero violations`, { timeout: 360_000 }, async () => {
      // CI installs libfaketime, so clock-skew is in: a machine without it fails here, loudly.
      const kinds = applicableFaults(backend, true).filter((k) => !otherServerFaults.includes(k));
      const report = await runDrill({
        backend,
        replicas: 3,
        jobs: 4,
        // The workflow workload too: I7 and each step's effect once through every fault kind.
        workflows: true,
        faults: kinds,
        faultCount: kinds.length,
        intervalSeconds: 3,
        ttlMs: 2000,
        seed: 42,
        databaseUrl: adminUrl,
        redisUrl: SHARED_REDIS_URL,
      });
      console.log(summary(backend, report));
      assertClean(report, kinds, report.violations);
      const w = report.workflows!;
      assert.ok(w.workflowRuns > 0 && w.stepRuns > w.workflowRuns, JSON.stringify(w));
      assert.equal(w.ok, true, JSON.stringify(w.violations));
      assert.equal(report.check.settlement.unsettled, 0);
      assert.equal(report.ok, true);
    });
  }

  it(
    'redis: the queue, the ledger, its standby, Sentinel and a starved host, each once',
    { timeout: 300_000 },
    async () => {
      const kinds = otherServerFaults;
      const report = await runDrill({
        backend: 'redis',
        replicas: 3,
        jobs: 4,
        workflows: true,
        faults: kinds,
        faultCount: kinds.length,
        intervalSeconds: 2,
        ttlMs: 2000,
        seed: 42,
        databaseUrl: adminUrl,
        redisUrl: SHARED_REDIS_URL,
      });
      console.log(summary('redis (other servers)', report));
      // What each rests on held: synchronous replication (no write the ledger forgot), the fence
      // through Sentinel (tokens in order), durability across the ledger's restart.
      assert.equal(report.check.tokenRegressions, 0);
      assert.match(report.faults.find((f) => f.kind === 'ledger-failover')!.detail, /standby promoted \(sync/);
      assert.match(
        report.faults.find((f) => f.kind === 'redis-sentinel-failover')!.detail,
        /Sentinel promoted the replica after \d+ ms/,
      );
      // No run stranded by the lost queue (the ledger's re-delivery sweep), no replica crashed
      // when the ledger went away (a checked-out client listens for 'error').
      assertClean(report, kinds, report.violations);
      assert.equal(report.check.settlement.unsettled, 0);
    },
  );
});
