import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { WorkerLiveness, type LivenessLedger } from '../../src/jobs/worker-liveness.js';
import { ManualClock } from '../support/manual-clock.js';

/**
 * The orphan poll against a ledger that always has dead workers' runs: `fullPages` times a full
 * page of them, then fewer. `claims` says whether each delivered run is claimed here.
 */
function poller(o: { fullPages: number; claims: boolean }) {
  const clock = new ManualClock();
  const asked: number[] = [];
  let next = 1n;
  const ledger: LivenessLedger = {
    claimerLiveWithinMs: 2000, // polls every second
    beat: () => Promise.resolve(),
    forget: () => Promise.resolve(),
    claimedBy: () => Promise.resolve([]),
    orphans: (_worker, limit) => {
      asked.push(clock.monotonic());
      const n = asked.length <= o.fullPages ? limit : limit - 1;
      return Promise.resolve(Array.from({ length: n }, () => next++));
    },
  };
  const liveness = new WorkerLiveness({
    ledger,
    worker: 'w',
    clock,
    logger: pino({ level: 'silent' }),
    freePlaces: () => 4,
    deliver: () => Promise.resolve(o.claims),
  });
  return { clock, asked, liveness };
}

describe('WorkerLiveness: asking for orphans', () => {
  it('asks again at once while full pages come back and are claimed here, then waits for the next poll', async () => {
    const { clock, asked, liveness } = poller({ fullPages: 3, claims: true });
    await liveness.start();
    await clock.advance(1000);
    assert.equal(asked.length, 4, 'three full pages, each followed at once, then a short one');
    assert.ok(asked.every((at) => at === asked[0]));
    await clock.advance(999);
    assert.equal(asked.length, 4, 'after a short page, the next poll');
    await clock.advance(1);
    assert.equal(asked.length, 5);
    await liveness.stop();
  });

  it('a full page none of whose runs was claimed here waits for the next poll, so it cannot spin', async () => {
    const { clock, asked, liveness } = poller({ fullPages: Infinity, claims: false });
    await liveness.start();
    await clock.advance(1000);
    assert.equal(asked.length, 1);
    await clock.advance(999);
    assert.equal(asked.length, 1);
    await clock.advance(1);
    assert.equal(asked.length, 2);
    await liveness.stop();
  });
});
