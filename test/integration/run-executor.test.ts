/**
 * RunExecutor against a real ledger (PostgreSQL), no queue: ctx.transaction is once per attempt,
 * and an attempt stopped by the replica's shutdown — cooperatively or abandoned — is recorded as
 * interrupted (not failed, even on the final attempt), with an abandoned handler's late writes
 * refused.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { AbortedError, InvalidArgumentError } from '../../src/errors.js';
import { defineJob } from '../../src/jobs/define-job.js';
import type { JobContext } from '../../src/jobs/job-context.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { commitTestRun } from '../support/effect-runs.js';

describe('RunExecutor (real PostgreSQL ledger)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  let executor: RunExecutor;
  let handler: (ctx: JobContext) => Promise<unknown> = async () => {};
  let fired = 0;

  before(async () => {
    db = await createTestDatabase();
    await db.pool.query('CREATE TABLE effects (run_id bigint NOT NULL, attempt int NOT NULL, note text)');
    ledger = new Ledger(db.pool);
    const registry = new JobRegistry([
      defineJob({ name: 'tx', schedule: '0 0 1 1 *', handler: (ctx) => handler(ctx) }),
    ]);
    executor = new RunExecutor({
      ledger: ledger.runs,
      registry,
      replicaId: 'in-process',
      logger: pino({ level: 'silent' }),
    });
  });
  after(async () => {
    await db.drop();
  });

  async function fire(): Promise<bigint> {
    return (await commitTestRun(ledger, 'tx', { scheduledAt: new Date(Date.UTC(2030, 0, 1, 0, fired++)) })).runId;
  }

  async function read(runId: bigint) {
    const run = (
      await db.pool.query<{
        state: string;
        completed_attempt: number | null;
        skipped_attempts: number;
        error: string | null;
      }>('SELECT state, completed_attempt, skipped_attempts, error FROM cw_runs WHERE id = $1', [runId.toString()])
    ).rows[0]!;
    const attempts = (
      await db.pool.query<{ attempt: number; state: string; error: string | null }>(
        'SELECT attempt, state, error FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt',
        [runId.toString()],
      )
    ).rows;
    const effects = (
      await db.pool.query<{ attempt: number; note: string }>(
        'SELECT attempt, note FROM effects WHERE run_id = $1 ORDER BY note',
        [runId.toString()],
      )
    ).rows;
    return { run, attempts, effects };
  }

  const write =
    (ctx: JobContext, note: string) => async (tx: { query: (q: string, v: unknown[]) => Promise<unknown> }) => {
      await tx.query('INSERT INTO effects (run_id, attempt, note) VALUES ($1, $2, $3)', [ctx.runId, ctx.attempt, note]);
    };

  it('a second ctx.transaction in one attempt is refused (InvalidArgumentError) before touching the ledger', async () => {
    const runId = await fire();
    let second: unknown;
    let secondFnCalled = false;
    handler = async (ctx) => {
      await ctx.transaction(write(ctx, 'first'));
      try {
        await ctx.transaction(async (tx) => {
          secondFnCalled = true;
          await write(ctx, 'second')(tx);
        });
      } catch (err) {
        second = err;
      }
    };
    const result = await executor.execute(runId, { finalAttempt: true });
    assert.ok(second instanceof InvalidArgumentError, String(second));
    assert.match((second as Error).message, /ctx\.transaction may be called once per attempt/);
    assert.equal(second.retryable, false);
    assert.equal(secondFnCalled, false);
    assert.equal(result.status, 'completed');
    const { run, attempts, effects } = await read(runId);
    assert.deepEqual(effects, [{ attempt: 1, note: 'first' }]);
    assert.equal(run.state, 'completed');
    assert.equal(run.completed_attempt, 1);
    assert.equal(run.skipped_attempts, 0, 'the completing attempt is not counted as skipped');
    assert.deepEqual(
      attempts.map(({ attempt, state }) => ({ attempt, state })),
      [{ attempt: 1, state: 'completed' }],
    );
  });

  it('a handler that lets the second-call error escape leaves the completed record as it is', async () => {
    const runId = await fire();
    handler = async (ctx) => {
      await ctx.transaction(write(ctx, 'first'));
      await ctx.transaction(write(ctx, 'second'));
    };
    const result = await executor.execute(runId, { finalAttempt: true });
    assert.equal(result.status, 'completed');
    const { run, attempts, effects } = await read(runId);
    assert.deepEqual(effects, [{ attempt: 1, note: 'first' }]);
    assert.equal(run.state, 'completed');
    assert.equal(run.completed_attempt, 1);
    assert.equal(run.skipped_attempts, 0);
    assert.deepEqual(
      attempts.map(({ attempt, state }) => ({ attempt, state })),
      [{ attempt: 1, state: 'completed' }],
    );
  });

  it('a handler stopped by the shutdown signal on its final attempt is interrupted, not failed', async () => {
    const runId = await fire();
    const shutdown = new AbortController();
    handler = async (ctx) => {
      await ctx.transaction(async (tx) => {
        await write(ctx, 'partial')(tx);
        shutdown.abort(new Error('replica shutting down'));
        ctx.signal.throwIfAborted();
      });
    };
    const result = await executor.execute(runId, { finalAttempt: true, signal: shutdown.signal });
    assert.equal(result.status, 'interrupted');
    const first = await read(runId);
    assert.equal(first.run.state, 'retrying');
    assert.match(first.run.error ?? '', /^interrupted: replica shutting down/);
    assert.deepEqual(first.effects, []);
    // The next delivery (another replica) claims it with a newer token and completes it.
    handler = async (ctx) => ctx.transaction(write(ctx, 'done'));
    assert.equal((await executor.execute(runId, { finalAttempt: true })).status, 'completed');
    const { run, attempts, effects } = await read(runId);
    assert.equal(run.state, 'completed');
    assert.equal(run.completed_attempt, 2);
    assert.deepEqual(effects, [{ attempt: 2, note: 'done' }]);
    assert.deepEqual(
      attempts.map(({ attempt, state }) => ({ attempt, state })),
      [
        { attempt: 1, state: 'retrying' },
        { attempt: 2, state: 'completed' },
      ],
    );
  });

  it('a handler that ignores its signal is abandoned: interrupted at once, its late ctx.transaction refused', async () => {
    const runId = await fire();
    const shutdown = new AbortController();
    const abandon = new AbortController();
    let wake: () => void = () => {};
    let late: Promise<unknown> | undefined;
    handler = async (ctx) => {
      await new Promise<void>((resolve) => (wake = resolve)); // ignores ctx.signal
      late = ctx.transaction(write(ctx, 'late'));
      await late;
    };
    const execution = executor.execute(runId, { finalAttempt: true, signal: shutdown.signal, abandon: abandon.signal });
    await new Promise((r) => setTimeout(r, 100));
    shutdown.abort(new Error('replica shutting down'));
    await new Promise((r) => setTimeout(r, 100));
    abandon.abort();
    const result = await execution;
    assert.equal(result.status, 'interrupted');
    const mid = await read(runId);
    assert.equal(mid.run.state, 'retrying');
    assert.match(mid.run.error ?? '', /abandoned/);
    wake();
    await new Promise((r) => setTimeout(r, 50));
    await assert.rejects(late!, AbortedError);
    const { run, effects } = await read(runId);
    assert.deepEqual(effects, []);
    assert.equal(run.state, 'retrying', 'still waiting for the next delivery');
  });

  it('a delivery that arrives while the replica is already shutting down is not even claimed', async () => {
    const runId = await fire();
    const shutdown = new AbortController();
    shutdown.abort(new Error('replica shutting down'));
    const result = await executor.execute(runId, { finalAttempt: true, signal: shutdown.signal });
    assert.equal(result.status, 'interrupted');
    const { run, attempts } = await read(runId);
    assert.equal(run.state, 'pending');
    assert.deepEqual(attempts, []);
  });
});
