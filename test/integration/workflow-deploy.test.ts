/**
 * A workflow's code changes while a run of it is in flight (a rolling deploy). The rule: a run goes
 * on only with the definition it was started with (its fingerprint). A replica with another
 * definition makes no progress on it and says why; once no live replica has the run's definition,
 * the run fails with the reason; a replica with that definition resumes it (retry) on that graph.
 * Real PostgreSQL and Redis, in-process replicas, an in-memory lease.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { defineWorkflow } from '../../src/jobs/define-workflow.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const v1 = defineWorkflow({ name: 'deploy', schedule: '0 0 1 1 *' })
  .step('a', () => 'a1')
  .step('b', { needs: ['a'], waitFor: { signal: 'go', timeoutMs: 600_000 }, run: (_ctx, i) => `${i.a}+b1` });
const v2 = defineWorkflow({ name: 'deploy', schedule: '0 0 1 1 *' })
  .step('a', () => 'a2')
  .step('c', { needs: ['a'], run: () => 'c2' });

describe('a workflow run across a change of its definition', { timeout: 90_000 }, () => {
  let db: TestDatabase;
  const store = new MemoryLeaseStore();
  const namespace = `wfd${randomUUID().slice(0, 8)}`;
  const running: Replica[] = [];

  const start = async (id: string, workflow: typeof v1 | typeof v2) => {
    const r = new Replica({
      replicaId: id,
      namespace,
      schema: db.schema,
      backend: new MemoryLeaseBackend({ store }),
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: [workflow],
      admin: false,
      logger: pino({ level: 'silent' }),
      election: { ttlMs: 2000 },
      removedJobs: { intervalMs: 300, liveWithinMs: 2000 },
    });
    await r.start();
    running.push(r);
    return r;
  };
  const stop = async (r: Replica) => {
    await r.stop();
    running.splice(running.indexOf(r), 1);
  };
  const runState = async (id: bigint) =>
    (
      await db.pool.query<{ state: string; error: string | null }>(
        `SELECT state, error FROM ${db.schema}.cw_runs WHERE id = $1`,
        [id.toString()],
      )
    ).rows[0]!;
  const until = async (what: string, ok: () => Promise<boolean>) => {
    const deadline = Date.now() + 30_000;
    while (!(await ok())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(100);
    }
  };

  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => {
    for (const r of [...running]) await r.stop();
    await db?.drop();
  });

  it('goes on only with the definition it started with; fails once no replica has it; resumes where it does', async () => {
    assert.notEqual(v1.graph.fingerprint, v2.graph.fingerprint);
    const old = await start('old', v1);
    let fired: bigint | undefined;
    await until('a leader that fires', async () => {
      fired = (await old.trigger('deploy').catch(() => undefined))?.runId;
      return fired !== undefined;
    });
    const id = fired!;
    await until('step b waiting for its signal', async () => {
      const g = await db.pool.query(
        `SELECT 1 FROM ${db.schema}.cw_workflow_steps WHERE workflow_run_id = $1 AND step = 'b' AND state = 'waiting'`,
        [id.toString()],
      );
      return g.rowCount === 1;
    });
    await stop(old);

    const next = await start('new', v2);
    await assert.rejects(
      next.workflows.signal(id, 'go', null, 'test'),
      /was started with definition .* which this replica does not have/,
      'a replica with another definition makes no progress on the run, and says why',
    );
    await until('the run failed: its definition is gone', async () => (await runState(id)).state === 'failed');
    assert.match(
      (await runState(id)).error ?? '',
      new RegExp(`definition deploy@${v1.graph.fingerprint} is defined by no live replica`),
    );

    // The deploy rolled back: a replica with the run's definition resumes it.
    await stop(next);
    const back = await start('old-again', v1);
    await back.retry(id);
    await back.workflows.signal(id, 'go', null, 'test');
    await until('the run completed on the old definition', async () => (await runState(id)).state === 'completed');
    const steps = await db.pool.query<{ step: string; result: unknown }>(
      `SELECT step, result FROM ${db.schema}.cw_runs WHERE workflow_run_id = $1 ORDER BY step`,
      [id.toString()],
    );
    assert.deepEqual(
      steps.rows.map((s) => [s.step, s.result]),
      [
        ['a', 'a1'],
        ['b', 'a1+b1'],
      ],
      'never a step of the new definition',
    );
  });
});
