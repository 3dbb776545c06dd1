import { it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { ManualClock } from '../support/manual-clock.js';
import { ChoreRunner } from '../../src/scheduler/chores/chore.js';
import { RunRetention } from '../../src/scheduler/chores/run-retention.js';

/** A ledger with `backlog` prunable runs; records each call. */
function fakeLedger(backlog: number, failFirst = false) {
  const calls: { olderThanMs: number; batch: number }[] = [];
  let left = backlog;
  let fail = failFirst;
  return {
    calls,
    add: (n: number) => (left += n),
    async pruneFinishedRuns(olderThanMs: number, batch: number) {
      calls.push({ olderThanMs, batch });
      if (fail) {
        fail = false;
        throw new Error('Connection terminated unexpectedly');
      }
      const n = Math.min(left, batch);
      left -= n;
      return n;
    },
  };
}

it('prunes at the start of the tenure in batches until one comes back short, then every interval, and stops with the tenure', async () => {
  const clock = new ManualClock();
  const ledger = fakeLedger(12);
  const logger = pino({ level: 'silent' });
  const retention = new RunRetention({
    ledger,
    logger,
    retentionMs: 86_400_000,
    intervalMs: 60_000,
    batchSize: 5,
  });
  const tenure = new AbortController();
  const running = new ChoreRunner([retention], { clock, logger }).run(tenure.signal);
  await clock.advance(0);
  assert.deepEqual(
    ledger.calls.map((c) => c.batch),
    [5, 5, 5],
    '12 runs: 5 + 5 + 2, then stop',
  );
  assert.ok(ledger.calls.every((c) => c.olderThanMs === 86_400_000));
  ledger.add(3);
  await clock.advance(59_000);
  assert.equal(ledger.calls.length, 3, 'nothing before the interval');
  await clock.advance(1_000);
  assert.equal(ledger.calls.length, 4, 'one short batch after the interval');
  tenure.abort();
  await running;
  await clock.advance(600_000);
  assert.equal(ledger.calls.length, 4, 'nothing after the tenure ended');
});

it('a failed round is logged and tried again at the next interval, never thrown', async () => {
  const ledger = fakeLedger(4, true);
  const retention = new RunRetention({
    ledger,
    logger: pino({ level: 'silent' }),
    retentionMs: 1000,
    intervalMs: 10_000,
    batchSize: 5,
  });
  assert.equal(await retention.pruneOnce(), 0);
  assert.equal(await retention.pruneOnce(), 4);
});
