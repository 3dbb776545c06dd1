import { it } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { pino } from 'pino';
import { Attempt, type AttemptLedger } from '../../src/jobs/attempt.js';
import { defineJob } from '../../src/jobs/define-job.js';
import type { Claim } from '../../src/ledger/run-claims.js';

setFlagsFromString('--expose-gc'); // the memory test below collects garbage itself

const claim: Claim = {
  runId: 1n,
  job: 'j',
  scheduledAt: new Date(0),
  attempt: 1,
  token: 1n,
  trigger: 'schedule',
  claimedAt: new Date(0),
  failures: 0,
};
const ledger = {} as AttemptLedger; // the signal never reaches the ledger
const log = pino({ level: 'silent' });
const job = (timeoutMs = 0) => defineJob({ name: 'j', schedule: '* * * * *', handler: () => {}, timeoutMs });

it("ctx.signal follows the run's abort, the replica's shutdown and the job's timeout, each told apart", async () => {
  const cancelled = new Attempt(claim, job(), ledger, () => log, new AbortController().signal);
  cancelled.abortBy(new Error('newer claim'));
  assert.equal((cancelled.signal.reason as Error).message, 'newer claim');
  assert.equal(cancelled.stoppedByShutdown(), false);

  const shutdown = new AbortController();
  const stopped = new Attempt(claim, job(), ledger, () => log, shutdown.signal);
  const released = new Attempt(claim, job(), ledger, () => log, shutdown.signal);
  released.release();
  shutdown.abort(new Error('shutting down'));
  assert.equal(stopped.signal.aborted, true);
  assert.equal(stopped.stoppedByShutdown(), true);
  assert.equal(released.signal.aborted, false, 'a released attempt no longer follows the shutdown');
  assert.equal(
    new Attempt(claim, job(), ledger, () => log, shutdown.signal).signal.aborted,
    true,
    'made after the shutdown',
  );

  const timed = new Attempt(claim, job(20), ledger, () => log, new AbortController().signal);
  const alive = setTimeout(() => {}, 5000); // the attempt's timer does not keep the process alive
  await new Promise((r) => timed.signal.addEventListener('abort', r, { once: true }));
  assert.equal((timed.signal.reason as DOMException).name, 'TimeoutError');
  assert.equal(timed.stoppedByShutdown(), false);
  const cleared = new Attempt(claim, job(20), ledger, () => log, undefined);
  cleared.release();
  await new Promise((r) => setTimeout(r, 40));
  assert.equal(cleared.signal.aborted, false, 'a released attempt has no timeout left');
  clearTimeout(alive);
});

it('ctx.signal read only after the stop is aborted with its reason; read before, it aborts then, once', () => {
  const late = new Attempt(claim, job(), ledger, () => log, undefined);
  const lateCtx = late.context();
  late.abortBy(new Error('newer claim'));
  late.abortBy(new Error('a cancel after it'));
  assert.equal(lateCtx.signal.aborted, true);
  assert.equal((lateCtx.signal.reason as Error).message, 'newer claim', 'the first reason stays');
  assert.equal(lateCtx.signal, late.context().signal, 'one signal an attempt');

  const shutdown = new AbortController();
  const early = new Attempt(claim, job(), ledger, () => log, shutdown.signal);
  const { signal } = early.context(); // read before the stop, as a handler that passes it on does
  let heard = 0;
  signal.addEventListener('abort', () => heard++);
  assert.equal(signal.aborted, false);
  shutdown.abort(new Error('shutting down'));
  early.abortBy(new Error('newer claim'));
  assert.equal(heard, 1);
  assert.equal((signal.reason as Error).message, 'shutting down');
  assert.equal(early.stoppedByShutdown(), false, 'a newer claim came too');
});

it('attempts that share the long-lived shutdown signal leave nothing behind once released', async () => {
  const gc = runInNewContext('gc') as () => void;
  const shutdown = new AbortController();
  const j = job(60_000);
  const make = (n: number) => {
    for (let i = 0; i < n; i++) new Attempt(claim, j, ledger, () => log, shutdown.signal).release();
  };
  make(1000); // warm up
  gc();
  const before = process.memoryUsage().heapUsed;
  const n = 50_000;
  make(n);
  await new Promise((r) => setTimeout(r, 10)); // the cleared timers' async bookkeeping ends a tick later
  gc();
  const perAttempt = (process.memoryUsage().heapUsed - before) / n;
  // AbortSignal.any left about 60 B per attempt in the shutdown signal on Node 20 (3 MB here).
  assert.ok(perAttempt < 10, `${perAttempt.toFixed(1)} B per released attempt still held`);
});
