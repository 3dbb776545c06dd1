/**
 * A short failover drill per backend, every fault kind at least once, real replica processes:
 * each must end with zero violations (I1-I5 and every fault proven by fires before and after; a
 * fault that must move leadership proven by a fire of the new tenure), and the independent attempt
 * log must agree with the ledger.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runDrill } from '../../src/drill/drill.js';
import { applicableFaults, keepsLeader, movesLeader } from '../../src/drill/faults.js';
import { SHARED_POSTGRES_URL } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const adminUrl = SHARED_POSTGRES_URL.replace(/\/[^/]*$/, '/postgres');

describe('failover drill (short)', () => {
  for (const backend of ['redis', 'postgres', 'etcd'] as const) {
    it(`${backend}: every fault kind once, zero violations`, { timeout: 360_000 }, async () => {
      // CI installs libfaketime, so clock-skew is in: a machine without it fails here, loudly.
      const kinds = applicableFaults(backend, true);
      const report = await runDrill({
        backend,
        replicas: 3,
        jobs: 4,
        faults: kinds,
        faultCount: kinds.length,
        intervalSeconds: 3,
        ttlMs: 2000,
        seed: 42,
        databaseUrl: adminUrl,
        redisUrl: SHARED_REDIS_URL,
      });
      const log = report.check.attemptLog;
      console.log(
        `${backend} drill: ${report.check.expected} fires expected, ${report.check.committed} committed; ` +
          `attempt log ${JSON.stringify(log)}, stale writes refused ${report.staleWritesRefused} (ledger: ${report.staleAttemptsRefused}); ` +
          report.faults
            .map((f) => `${f.kind}: handover ${f.handoverMs ?? '-'} ms, new-tenure fire ${f.gapMs} ms (any fire ${f.anyFireMs} ms, bound ${f.boundMs ?? '-'}), ${f.leaderChanges} leader change(s)`)
            .join('; '),
      );
      assert.deepEqual(report.violations, []);
      assert.equal(report.faults.length, kinds.length);
      assert.ok(report.faults.every((f) => f.counted), 'every fault proved something');
      // Faults that take the leader away did move it; link trouble and clock skew did not.
      for (const f of report.faults) {
        if (keepsLeader.has(f.kind)) assert.equal(f.leaderChanges, 0, `${f.kind}: ${f.detail}`);
        if (['kill', 'term', 'link-cut'].includes(f.kind)) assert.ok(f.leaderChanges >= 1 && f.leaderAfter !== f.leaderBefore, `${f.kind}: leader stayed ${f.leaderBefore}`);
        // The gap ran to a fire of the new tenure, within I5's bound.
        if (movesLeader.has(f.kind)) assert.ok(f.gapMs !== null && f.boundMs !== null && f.gapMs <= f.boundMs && f.anyFireMs !== null && f.anyFireMs <= f.gapMs, `${f.kind}: ${JSON.stringify(f)}`);
      }
      // The attempt log (written outside the transactions) saw the committed writes, none of them
      // stale or doubled, and its refusals are counted.
      assert.ok(log && log.committed >= 0.9 * report.check.committed, `attempt log: ${JSON.stringify(log)}`);
      assert.deepEqual([report.check.staleWritesLanded, report.check.writesCommittedTwice, log.failed], [0, 0, 0]);
      assert.equal(report.staleWritesRefused, log.refused + log.staleSkipped);
      assert.equal(report.check.early, 0);
      // Each fault's own stretch of the window is accounted for, and clean.
      for (const f of report.faults) {
        assert.ok(f.fires && f.fires.expected > 0, `${f.kind}: no scheduled times in its stretch`);
        assert.deepEqual([f.fires.duplicated, f.fires.missed, f.fires.committed], [0, 0, f.fires.expected], f.kind);
      }
      assert.deepEqual(new Set(report.faults.map((f) => f.kind)), new Set(kinds));
      assert.ok(report.check.expected >= 4 * 15, `window too short: ${report.check.expected} fires`);
      assert.equal(report.ok, true);
    });
  }
});
