/**
 * RunExecutor on the in-memory run ledger (no database): how each way an attempt can end is
 * recorded. The fake is held to the real ledger by test/support/ledger-contract.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino, type Logger } from 'pino';
import {
  AbortedError,
  BackendUnavailableError,
  InvalidArgumentError,
  StaleTokenError,
  SupersededError,
} from '../../src/errors.js';
import { defineJob } from '../../src/jobs/define-job.js';
import type { JobContext } from '../../src/jobs/job-context.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { INTERRUPTED, RunExecutor, type ControlMessage, type ExecutorLedger } from '../../src/jobs/run-executor.js';
import { slotToken } from '../../src/ledger/slot-token.js';
import { MAX_ERROR_MESSAGE, MAX_ERROR_STACK } from '../../src/ledger/stored-text.js';
import { MemoryLedger } from '../support/memory-ledger.js';
import { MemoryRunLedger } from '../support/memory-run-ledger.js';
import { AttemptMetrics } from '../../src/jobs/attempt-metrics.js';

const at = (s: number) => new Date(Date.UTC(2030, 0, 1, 0, 0, s));

/** A promise and its resolve, to hold a handler at a point the test chooses. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

function setup(
  options: { ledger?: (runs: MemoryRunLedger) => ExecutorLedger; metrics?: AttemptMetrics; logger?: Logger } = {},
) {
  const fires = new MemoryLedger();
  const runs = new MemoryRunLedger(fires);
  let handler: (ctx: JobContext) => Promise<unknown> = async () => {};
  let calls = 0;
  const published: ControlMessage[] = [];
  const registry = new JobRegistry([
    defineJob({
      name: 'job',
      schedule: '0 0 1 1 *',
      handler: (ctx) => {
        calls++;
        return handler(ctx);
      },
    }),
  ]);
  const executor = new RunExecutor({
    ledger: options.ledger?.(runs) ?? runs,
    registry,
    replicaId: 'r1',
    logger: options.logger ?? pino({ level: 'silent' }),
    publish: async (m) => {
      published.push(m);
    },
    metrics: options.metrics,
  });
  let nextSecond = 0;
  return {
    fires,
    runs,
    executor,
    published,
    calls: () => calls,
    handle(fn: (ctx: JobContext) => Promise<unknown>) {
      handler = fn;
    },
    /** Commit one run as a leader would; its id. */
    async fire(job = 'job', scheduledAt = at(nextSecond++), replace = false): Promise<bigint> {
      const { committed } = await fires.commitFires([{ job, scheduledAt, trigger: 'schedule', replace }], {
        fenceResource: 'scheduler/test',
        token: 1n,
        replicaId: 'leader',
        stillLeading: () => true,
      });
      assert.equal(committed.length, 1);
      return committed[0]!.runId;
    },
    run(runId: bigint) {
      const run = fires.runs.find((r) => r.id === runId);
      const book = runs.bookOf(runId);
      assert.ok(run && book);
      return { state: run.state, error: run.error, ...book };
    },
  };
}

const write =
  (ctx: JobContext, note: string) => async (tx: { query: (text: string, values: unknown[]) => Promise<unknown> }) => {
    await tx.query('INSERT INTO contract_effects (run_id, note) VALUES ($1, $2)', [ctx.runId, note]);
    return note;
  };

describe('RunExecutor (in-memory ledger)', () => {
  it('a handler that returns completes the run; a first claim is not announced (no older attempt to stop)', async () => {
    const t = setup();
    const runId = await t.fire();
    const result = await t.executor.execute(runId, { finalAttempt: true });
    const run = t.run(runId);
    assert.deepEqual(result, {
      status: 'completed',
      runId: runId.toString(),
      attempt: 1,
      token: run.claimToken?.toString(),
    });
    assert.equal(run.state, 'completed');
    assert.equal(run.completedAttempt, 1);
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state]),
      [[1, 'completed']],
    );
    assert.deepEqual(t.published, []);
  });

  it("a run's own logger (ctx.logger) carries its id, job, attempt and token, and is made only when used", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    let children = 0;
    const child = logger.child.bind(logger);
    logger.child = ((...args: Parameters<typeof child>) => {
      children++;
      return child(...args);
    }) as typeof logger.child;
    const t = setup({ logger });
    const quiet = await t.fire();
    assert.equal((await t.executor.execute(quiet, { finalAttempt: true })).status, 'completed');
    assert.equal(children, 0, 'a run that logs nothing of its own makes no child logger');
    t.handle(async (ctx) => {
      ctx.logger.info('from the handler');
      ctx.logger.info('and again');
    });
    const loud = await t.fire();
    await t.executor.execute(loud, { finalAttempt: true });
    assert.equal(children, 1, 'one child for the run that logged, however often');
    const own = lines.filter((l) => l.msg === 'from the handler' || l.msg === 'and again');
    assert.equal(own.length, 2);
    for (const l of own)
      assert.deepEqual(
        [l.runId, l.job, l.attempt, l.token],
        [loud.toString(), 'job', 1, t.run(loud).claimToken?.toString()],
      );
  });

  it('a claim that takes a run over from a stopped worker is announced with its token', async () => {
    const t = setup();
    const runId = await t.fire();
    const first = await t.runs.claim(runId, 'gone'); // a worker that died holding the run
    assert.equal(first.status, 'claimed');
    const result = await t.executor.execute(runId, { finalAttempt: true });
    assert.equal(result.status, 'completed');
    const run = t.run(runId);
    assert.deepEqual(t.published, [{ type: 'claimed', runId: runId.toString(), token: run.claimToken?.toString() }]);
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state, a.error]),
      [
        [1, 'stale', 'worker gone stopped beating; the run was handed to r1'],
        [2, 'completed', null],
      ],
    );
  });

  it('a re-delivery of a completed run is skipped without running the handler', async () => {
    const t = setup();
    const runId = await t.fire();
    await t.executor.execute(runId, { finalAttempt: true });
    assert.equal((await t.executor.execute(runId, { finalAttempt: true })).status, 'skipped');
    assert.equal(t.calls(), 1);
    assert.equal(t.run(runId).skippedAttempts, 1);
  });

  it('ctx.transaction commits the effect with the completion, once per attempt', async () => {
    const t = setup();
    const runId = await t.fire();
    let value: unknown;
    let second: unknown;
    let secondCalled = false;
    t.handle(async (ctx) => {
      value = await ctx.transaction(write(ctx, 'first'));
      second = await ctx
        .transaction(async (tx) => {
          secondCalled = true;
          return write(ctx, 'second')(tx);
        })
        .catch((err: unknown) => err);
    });
    const result = await t.executor.execute(runId, { finalAttempt: true });
    assert.equal(result.status, 'completed');
    assert.equal(value, 'first');
    assert.ok(second instanceof InvalidArgumentError, String(second));
    assert.match(second.message, /ctx\.transaction may be called once per attempt/);
    assert.equal(secondCalled, false);
    assert.deepEqual(
      t.runs.effects.map((e) => e.values),
      [[runId.toString(), 'first']],
    );
    assert.equal(t.run(runId).state, 'completed');
  });

  it('ctx.transaction refuses options it does not know, before calling fn, and keeps the call for a good one', async () => {
    const t = setup();
    const runId = await t.fire();
    const refusals: unknown[] = [];
    let called = 0;
    t.handle(async (ctx) => {
      const fn = async (tx: Parameters<Parameters<JobContext['transaction']>[0]>[0]) => {
        called++;
        return write(ctx, 'once')(tx);
      };
      for (const bad of [{ pipelined: 'yes' }, { pipeline: true }, 'pipelined', null, [true]])
        refusals.push(await ctx.transaction(fn, bad as never).catch((err: unknown) => err));
      await ctx.transaction(fn, { pipelined: true });
    });
    const result = await t.executor.execute(runId, { finalAttempt: true });
    assert.equal(result.status, 'completed');
    assert.equal(called, 1);
    assert.deepEqual(
      refusals.map((e) => (e instanceof InvalidArgumentError ? e.message : String(e))),
      [
        'ctx.transaction option pipelined must be true or false, got "yes"',
        'ctx.transaction has no option "pipeline" (it takes: pipelined)',
        'ctx.transaction options must be an object, got "pipelined"',
        'ctx.transaction options must be an object, got null',
        'ctx.transaction options must be an object, got [true]',
      ],
    );
    assert.deepEqual(
      t.runs.effects.map((e) => e.values),
      [[runId.toString(), 'once']],
    );
  });

  it('a handler that throws: retrying while attempts remain, failed on the final attempt; the error is rethrown', async () => {
    const t = setup();
    const runId = await t.fire();
    t.handle(async () => {
      throw new Error('boom');
    });
    await assert.rejects(t.executor.execute(runId, { finalAttempt: false }), /boom/);
    assert.deepEqual([t.run(runId).state, t.run(runId).error], ['retrying', 'boom']);
    await assert.rejects(t.executor.execute(runId, { finalAttempt: true }), /boom/);
    const run = t.run(runId);
    assert.deepEqual([run.state, run.error, run.attempts], ['failed', 'boom', 2]);
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state]),
      [
        [1, 'retrying'],
        [2, 'failed'],
      ],
    );
  });

  it('ctx.fence after a later slot wrote: the SupersededError settles the run superseded, not rethrown, not retried', async () => {
    const t = setup();
    const early = await t.fire('job', at(4));
    const late = await t.fire('job', at(5));
    const seen: unknown[] = [];
    t.handle(async (ctx) => {
      await ctx.fence('account/1').catch((err: unknown) => {
        seen.push(err);
        throw err;
      });
    });
    assert.equal((await t.executor.execute(late, { finalAttempt: true })).status, 'completed');
    const result = await t.executor.execute(early, { finalAttempt: false });
    assert.equal(result.status, 'superseded');
    assert.ok(seen[0] instanceof SupersededError, String(seen[0]));
    const run = t.run(early);
    assert.equal(run.state, 'superseded');
    assert.match(run.error ?? '', /already written by the run of a later slot/);
    assert.equal(t.fires.fences.get('account/1'), slotToken(at(5), 1), 'the later slot keeps the fence');
  });

  it('a newer claim announced on the control channel aborts the attempt: stale, the newer claim untouched', async () => {
    const t = setup();
    const runId = await t.fire();
    const entered = gate();
    let reason: unknown;
    t.handle(async (ctx) => {
      entered.open();
      await new Promise((_, reject) =>
        ctx.signal.addEventListener('abort', () => {
          reason = ctx.signal.reason;
          reject(ctx.signal.reason as Error);
        }),
      );
    });
    const running = t.executor.execute(runId, { finalAttempt: true });
    await entered.promise;
    const mine = t.run(runId).claimToken!;
    t.executor.onControl({ type: 'claimed', runId: runId.toString(), token: mine.toString() }); // its own claim: no abort
    const newer = await t.runs.claim(runId, 'r2');
    assert.equal(newer.status, 'claimed');
    const newerToken = newer.status === 'claimed' ? newer.claim.token : 0n;
    t.executor.onControl({ type: 'claimed', runId: runId.toString(), token: newerToken.toString() });
    const result = await running;
    assert.equal(result.status, 'stale');
    assert.ok(reason instanceof StaleTokenError && reason.highest === newerToken, String(reason));
    const run = t.run(runId);
    assert.deepEqual([run.state, run.claimToken], ['running', newerToken]);
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state]),
      [
        [1, 'stale'],
        [2, 'running'],
      ],
    );
  });

  it('a handler that returns after a newer claim (no control message): stale, its completion refused', async () => {
    const t = setup();
    const runId = await t.fire();
    t.handle(async (ctx) => {
      await t.runs.claim(BigInt(ctx.runId), 'r2');
    });
    assert.equal((await t.executor.execute(runId, { finalAttempt: true })).status, 'stale');
    assert.equal(t.run(runId).state, 'running');
    assert.equal(t.run(runId).completedAttempt, null);
  });

  it('a cancel (overlap replace) aborts the attempt: cancelled, not failed, not rethrown', async () => {
    const t = setup();
    const runId = await t.fire();
    const entered = gate();
    t.handle(async (ctx) => {
      entered.open();
      await new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error)));
    });
    const running = t.executor.execute(runId, { finalAttempt: true });
    await entered.promise;
    await t.fire('job', at(59), true);
    t.executor.onControl({ type: 'cancel', runIds: [runId.toString()] });
    assert.equal((await running).status, 'cancelled');
    assert.equal(t.run(runId).state, 'cancelled');
  });

  it('stopped by the shutdown: interrupted, the run handed back (retrying) even on the final attempt', async () => {
    const t = setup();
    const runId = await t.fire();
    const shutdown = new AbortController();
    t.handle(async (ctx) => {
      shutdown.abort();
      ctx.signal.throwIfAborted();
    });
    const result = await t.executor.execute(runId, { finalAttempt: true, signal: shutdown.signal });
    assert.equal(result.status, 'interrupted');
    const run = t.run(runId);
    assert.equal(run.state, 'retrying');
    assert.ok(run.error?.startsWith(INTERRUPTED), run.error);
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state]),
      [[1, 'retrying']],
    );
  });

  it('delivered during the shutdown: interrupted without a claim', async () => {
    const t = setup();
    const runId = await t.fire();
    const result = await t.executor.execute(runId, { finalAttempt: true, signal: AbortSignal.abort() });
    assert.equal(result.status, 'interrupted');
    assert.equal(t.calls(), 0);
    assert.deepEqual([t.run(runId).state, t.run(runId).attempts], ['pending', 0]);
  });

  it('a handler that ignores the shutdown is abandoned: interrupted, and its late ctx calls are refused', async () => {
    const t = setup();
    const runId = await t.fire();
    const shutdown = new AbortController();
    const abandon = new AbortController();
    const entered = gate();
    const release = gate();
    const late: unknown[] = [];
    const done = gate();
    t.handle(async (ctx) => {
      entered.open();
      await release.promise; // ignores ctx.signal
      late.push(await ctx.transaction(write(ctx, 'late')).catch((err: unknown) => err));
      late.push(await ctx.fence('account/1').catch((err: unknown) => err));
      done.open();
    });
    const running = t.executor.execute(runId, { finalAttempt: true, signal: shutdown.signal, abandon: abandon.signal });
    await entered.promise;
    shutdown.abort();
    abandon.abort();
    const result = await running;
    assert.equal(result.status, 'interrupted');
    const run = t.run(runId);
    assert.equal(run.state, 'retrying');
    assert.match(run.error ?? '', /abandoned/);
    release.open();
    await done.promise;
    assert.ok(
      late.every((err) => err instanceof AbortedError),
      late.map(String).join('; '),
    );
    assert.equal(late.length, 2);
    assert.deepEqual(t.runs.effects, []);
    assert.equal(t.fires.fences.has('account/1'), false);
  });

  it("the abandoned handler's transaction commits before the interrupt is recorded: completed, by that attempt", async () => {
    const committed = gate();
    const t = setup({
      // The interrupt's record reaches the ledger only after the handler's commit landed.
      ledger: (runs) => ({
        claim: (runId, worker) => runs.claim(runId, worker),
        fenceRun: (resource, claim, db) => runs.fenceRun(resource, claim, db),
        completeInTransaction: (claim, fn) => runs.completeInTransaction(claim, fn),
        runState: (runId) => runs.runState(runId),
        finish: async (claim, outcome, error) => {
          if (outcome === 'retrying') await committed.promise;
          return runs.finish(claim, outcome, error);
        },
      }),
    });
    const runId = await t.fire();
    const shutdown = new AbortController();
    const abandon = new AbortController();
    const inside = gate();
    const release = gate();
    t.handle(async (ctx) => {
      await ctx.transaction(async (tx) => {
        inside.open();
        await release.promise;
        return write(ctx, 'in flight')(tx);
      });
      committed.open();
      await new Promise(() => {}); // and then hangs
    });
    const running = t.executor.execute(runId, { finalAttempt: true, signal: shutdown.signal, abandon: abandon.signal });
    await inside.promise;
    shutdown.abort();
    abandon.abort();
    release.open();
    const result = await running;
    assert.equal(result.status, 'completed');
    const run = t.run(runId);
    assert.deepEqual([run.state, run.completedAttempt], ['completed', 1]);
    assert.deepEqual(
      t.runs.effects.map((e) => e.values[1]),
      ['in flight'],
    );
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state]),
      [[1, 'completed']],
      'the refused interrupt record leaves the completed attempt as it was',
    );
  });

  it('a run of a job this replica does not define is handed back (retrying) with the reason', async () => {
    const t = setup();
    const runId = await t.fire('ghost');
    const result = await t.executor.execute(runId, { finalAttempt: true });
    assert.equal(result.status, 'unknown-job');
    const run = t.run(runId);
    assert.equal(run.state, 'retrying');
    assert.equal(run.error, 'job "ghost" is not defined on replica r1; handed back for a replica that defines it');
    assert.deepEqual(
      run.attemptRows.map((a) => [a.attempt, a.state]),
      [[1, 'retrying']],
    );
    assert.equal(t.calls(), 0);
    assert.deepEqual(t.published, [], 'nothing announced for a run it does not run');
  });

  it('the ledger unavailable inside the handler: rethrown, the run left to be delivered again', async () => {
    const t = setup();
    const runId = await t.fire();
    const unavailable = new BackendUnavailableError('postgres', 'connection refused');
    t.handle(async () => {
      throw unavailable;
    });
    await assert.rejects(t.executor.execute(runId, { finalAttempt: true }), (err) => err === unavailable);
    const run = t.run(runId);
    assert.equal(run.state, 'retrying');
    assert.match(run.error ?? '', /^ledger unavailable: postgres unavailable: connection refused/);
  });

  it('an error with U+0000 and 5 MB of text is recorded bounded and sanitised; no run is left running', async () => {
    const t = setup();
    const first = await t.fire();
    const second = await t.fire();
    const huge = new Error('x\u0000' + 'y'.repeat(5_000_000));
    t.handle(async () => {
      throw huge;
    });
    await assert.rejects(t.executor.execute(first, { finalAttempt: true }), (err) => err === huge);
    t.handle(async () => {
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- handlers can throw anything
      throw 'plain \u0000 string';
    });
    await assert.rejects(t.executor.execute(second, { finalAttempt: false }), (err) => err === 'plain \u0000 string');
    const a = t.run(first);
    assert.equal(a.state, 'failed');
    assert.ok(a.error?.startsWith('x\\0yyy') && a.error.length <= MAX_ERROR_MESSAGE, `${a.error?.length} characters`);
    const stack = a.attemptRows[0]?.errorStack ?? '';
    assert.ok(
      stack.length > 0 && stack.length <= MAX_ERROR_STACK && !stack.includes('\u0000'),
      `stack of ${stack.length}`,
    );
    assert.deepEqual([t.run(second).state, t.run(second).error], ['retrying', 'plain \\0 string']);
    assert.deepEqual(
      t.fires.runs.filter((r) => r.state === 'running').map((r) => r.id),
      [],
    );
  });
});

describe('RunExecutor: each ended attempt counted in the run-attempt metrics as the ledger records it', () => {
  /** cronwarden_run_attempts_total by outcome, and the duration histogram's count by outcome. */
  async function counted(metrics: AttemptMetrics): Promise<{ attempts: object; durations: object }> {
    const json = await metrics.registry.getMetricsAsJSON();
    const by = (name: string, suffix = '') =>
      Object.fromEntries(
        (json.find((m) => m.name === name)?.values ?? [])
          .filter((v) => [undefined, name + suffix].includes((v as { metricName?: string }).metricName))
          .map((v) => [`${v.labels.job}/${v.labels.outcome}`, v.value]),
      );
    return {
      attempts: by('cronwarden_run_attempts_total'),
      durations: by('cronwarden_run_duration_seconds', '_count'),
    };
  }

  it('completed, retrying, failed, skipped (a re-delivery, under its job), superseded; a busy delivery is not an attempt', async () => {
    const metrics = new AttemptMetrics({ replica: 'r1', namespace: 'test' });
    const t = setup({ metrics });
    const ok = await t.fire();
    await t.executor.execute(ok, { finalAttempt: true });
    assert.equal((await t.executor.execute(ok, { finalAttempt: true })).status, 'skipped');

    const failing = await t.fire();
    t.handle(async () => {
      throw new Error('boom');
    });
    await assert.rejects(t.executor.execute(failing, { finalAttempt: false }), /boom/);
    await assert.rejects(t.executor.execute(failing, { finalAttempt: true }), /boom/);

    const early = await t.fire('job', at(40));
    const late = await t.fire('job', at(41));
    t.handle(async (ctx) => {
      await ctx.fence('account/1');
    });
    await t.executor.execute(late, { finalAttempt: true });
    assert.equal((await t.executor.execute(early, { finalAttempt: true })).status, 'superseded');

    // A second delivery of a run in hand here: nothing claimed, nothing ended.
    const held = await t.fire();
    const hold = gate();
    t.handle(() => hold.promise);
    const first = t.executor.execute(held, { finalAttempt: true });
    assert.equal((await t.executor.execute(held, { finalAttempt: true })).status, 'busy');
    hold.open();
    await first;
    const { attempts, durations } = await counted(metrics);
    const expected = { 'job/completed': 3, 'job/skipped': 1, 'job/retrying': 1, 'job/failed': 1, 'job/superseded': 1 };
    assert.deepEqual(attempts, expected);
    assert.deepEqual(durations, expected, 'each counted attempt has its duration');
  });

  it('an attempt made stale by a newer claim counts stale; one the shutdown stopped counts retrying (its hand-back)', async () => {
    const metrics = new AttemptMetrics({ replica: 'r1', namespace: 'test' });
    const t = setup({ metrics });
    const runId = await t.fire();
    t.handle(async () => {
      await t.runs.claim(runId, 'r2'); // a newer attempt elsewhere, while this one runs
    });
    assert.equal((await t.executor.execute(runId, { finalAttempt: true })).status, 'stale');
    const stopped = await t.fire();
    const shutdown = new AbortController();
    t.handle(async (ctx) => {
      shutdown.abort();
      ctx.signal.throwIfAborted();
    });
    const result = await t.executor.execute(stopped, { finalAttempt: true, signal: shutdown.signal });
    assert.equal(result.status, 'interrupted');
    assert.equal(t.run(stopped).state, 'retrying');
    assert.deepEqual((await counted(metrics)).attempts, { 'job/stale': 1, 'job/retrying': 1 });
  });
});
