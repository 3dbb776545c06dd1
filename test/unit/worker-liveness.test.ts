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
    releaseEarlierSlots: () => Promise.resolve(0),
    orphans: (_worker, limit) => {
      asked.push(clock.monotonic());
      const n = asked.length <= o.fullPages ? limit : limit - 1;
      return Promise.resolve(Array.from({ length: n }, () => next++));
    },
  };
  return { clock, asked, liveness: livenessOver(ledger, clock, o.claims) };
}

/**
 * A worker's liveness over `ledger` with 4 places free; `claims`: whether its deliveries claim;
 * `delivered` (if given) gets each run it delivers to itself.
 */
function livenessOver(
  ledger: LivenessLedger,
  clock: ManualClock,
  claims: boolean,
  delivered?: bigint[],
): WorkerLiveness {
  return new WorkerLiveness({
    ledger,
    worker: 'w',
    clock,
    logger: pino({ level: 'silent' }),
    freePlaces: () => 4,
    deliver: (runId) => {
      delivered?.push(runId);
      return Promise.resolve(claims);
    },
  });
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

describe('WorkerLiveness: a slow question for orphans', () => {
  /** A ledger whose orphan questions are answered (with none) only when the test says so. */
  function slowLedger(clock: ManualClock) {
    const asked: number[] = [];
    const pending: (() => void)[] = [];
    const ledger: LivenessLedger = {
      claimerLiveWithinMs: 2000, // polls every second; a window of 2 s
      beat: () => Promise.resolve(),
      forget: () => Promise.resolve(),
      claimedBy: () => Promise.resolve([]),
      releaseEarlierSlots: () => Promise.resolve(0),
      orphans: () => {
        asked.push(clock.monotonic());
        return new Promise((resolve) => pending.push(() => resolve([])));
      },
    };
    const answer = async (afterMs: number) => {
      await clock.advance(afterMs);
      pending.shift()!();
      await clock.advance(0);
    };
    return { ledger, asked, answer };
  }

  it('waits ten times as long as its last answer took, never less than a poll nor more than a window', async () => {
    const clock = new ManualClock();
    const { ledger, asked, answer } = slowLedger(clock);
    const liveness = livenessOver(ledger, clock, true);
    await liveness.start();
    await clock.advance(1000);
    assert.deepEqual(asked, [1000]);
    await answer(50); // 50 ms: ten times that is less than a poll, so a poll from the answer
    await clock.advance(999);
    assert.equal(asked.length, 1);
    await clock.advance(1);
    assert.deepEqual(asked, [1000, 2050]);
    await answer(150); // 150 ms: the next question 1.5 s after the answer, not 1 s
    await clock.advance(1499);
    assert.equal(asked.length, 2, 'not a poll after a slow answer');
    await clock.advance(1);
    assert.deepEqual(asked, [1000, 2050, 3700]);
    await answer(900); // ten times 900 ms is more than the 2 s window: a window
    await clock.advance(1999);
    assert.equal(asked.length, 3);
    await clock.advance(1);
    assert.deepEqual(asked, [1000, 2050, 3700, 6600]);
    await answer(10);
    await liveness.stop();
  });
});

describe('WorkerLiveness: what an earlier start under its name left', () => {
  it('frees its slots before start() returns, and asks for its runs beside the first deliveries, once', async () => {
    const clock = new ManualClock();
    const calls: string[] = [];
    let answerRuns!: (runs: bigint[]) => void;
    const ledger: LivenessLedger = {
      claimerLiveWithinMs: 2000, // polls every second
      beat: () => Promise.resolve(),
      forget: () => Promise.resolve(),
      releaseEarlierSlots: () => {
        calls.push('slots');
        return Promise.resolve(1);
      },
      claimedBy: () => {
        calls.push('runs');
        return new Promise((resolve) => (answerRuns = resolve));
      },
      orphans: () => {
        calls.push('orphans');
        return Promise.resolve([]);
      },
    };
    const delivered: bigint[] = [];
    const liveness = livenessOver(ledger, clock, true, delivered);
    await liveness.start(); // returns while the question for its runs is unanswered
    assert.deepEqual(calls, ['slots', 'runs'], 'slots freed first, then the runs asked for');
    await clock.advance(1000); // a poll while that question is out: not asked again
    assert.deepEqual(calls, ['slots', 'runs']);
    assert.deepEqual(delivered, []);
    answerRuns([7n, 8n]);
    await clock.advance(0);
    assert.deepEqual(delivered, [7n, 8n], 'the runs it left running, claimed again here');
    assert.deepEqual(calls, ['slots', 'runs', 'orphans'], 'the poll that waited for the answer goes on');
    await clock.advance(1000); // the next poll asks for orphans, not for its runs again
    assert.deepEqual(calls, ['slots', 'runs', 'orphans', 'orphans']);
    await liveness.stop();
  });
});
