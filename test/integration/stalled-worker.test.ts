/**
 * A worker paused (SIGSTOP) past its liveness window: another worker takes the run over with a
 * new execution token; when the paused worker resumes, its fenced write is refused, the second
 * attempt's write lands, and the ledger shows one completed run.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { BullmqWorker } from '../../src/jobs/bullmq-worker.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { stallJob } from '../fixtures/stall-job.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

type Event = Record<string, unknown>;

it(
  'a stalled worker is fenced out: first attempt refused, second lands, one completed run',
  { timeout: 60_000 },
  async () => {
    const db = await createTestDatabase();
    await db.pool.query('CREATE TABLE stall_writes (run_id bigint, attempt int, token bigint)');
    const namespace = `stall${randomUUID().slice(0, 8)}`;
    const events: Event[] = [];
    let notify: () => void = () => {};
    const waitFor = async (match: (e: Event) => boolean, ms = 20_000) => {
      const deadline = Date.now() + ms;
      while (!events.some(match)) {
        if (Date.now() > deadline) throw new Error(`timed out; events: ${JSON.stringify(events)}`);
        await new Promise<void>((r) => {
          notify = r;
          setTimeout(r, 200);
        });
      }
    };
    const say = (e: Event) => {
      events.push(e);
      notify();
    };

    const fixture = fileURLToPath(new URL('../fixtures/worker-process.ts', import.meta.url));
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        fixture,
        JSON.stringify({
          databaseUrl: db.url,
          redisUrl: SHARED_REDIS_URL,
          namespace,
          lockDurationMs: 1000,
          job: 'stall',
        }),
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const exited = new Promise((r) => child.once('exit', r));
    createInterface({ input: child.stdout }).on('line', (line) => say(JSON.parse(line) as Event));
    const redis = new Redis(SHARED_REDIS_URL);
    const logger = pino({ level: 'silent' });
    const ledger = new Ledger(db.pool);
    const registry = new JobRegistry([stallJob(db.pool, (e) => say({ worker: 'parent', ...e }))]);
    const delivery = new BullmqDelivery({ connection: redis, namespace, registry, ledger });
    let parentWorker: BullmqWorker | undefined;
    try {
      await waitFor((e) => e.event === 'ready');
      const { committed } = await ledger.fires.commitFires(
        [{ job: 'stall', scheduledAt: new Date(), trigger: 'manual' }],
        {
          fenceResource: 'scheduler/test',
          token: 1n,
          replicaId: 'test',
          stillLeading: () => true,
        },
      );
      await delivery.enqueue(committed);
      await waitFor((e) => e.worker === 'child' && e.event === 'attempt' && e.attempt === 1);
      child.kill('SIGSTOP');

      // As the child's: a worker silent for a second is taken for dead (the window is the child's lock).
      ledger.runs.claimerLiveWithinMs = 1000;
      const executor = new RunExecutor({ ledger: ledger.runs, registry, replicaId: 'parent', logger });
      parentWorker = new BullmqWorker({
        redisUrl: SHARED_REDIS_URL,
        namespace,
        executor,
        logger,
        lockDurationMs: 1000,
        stalledIntervalMs: 500,
        liveness: ledger.runs,
      });
      executor.setPublisher(parentWorker.publisherFor());
      await parentWorker.start();
      await waitFor((e) => e.worker === 'parent' && e.event === 'wrote' && e.attempt === 2);
      child.kill('SIGCONT');
      await waitFor((e) => e.worker === 'child' && e.event === 'refused' && e.attempt === 1);

      const writes = await db.pool.query('SELECT attempt FROM stall_writes');
      assert.deepEqual(writes.rows, [{ attempt: 2 }], 'only the second attempt wrote');
      const run = await db.pool.query('SELECT state, attempts, completed_attempt FROM cw_runs WHERE id = $1', [
        committed[0]!.runId.toString(),
      ]);
      assert.deepEqual(run.rows[0], { state: 'completed', attempts: 2, completed_attempt: 2 });
      // The refused attempt's outcome is recorded as stale, never over the newer attempt's record.
      const deadline = Date.now() + 5000;
      let attempts: { attempt: number; state: string }[] = [];
      while (Date.now() < deadline) {
        attempts = (await db.pool.query('SELECT attempt, state FROM cw_run_attempts ORDER BY attempt')).rows;
        if (attempts[0]?.state !== 'running') break;
        await new Promise((r) => setTimeout(r, 100));
      }
      // The child may be stopped before Redis heard that its delivery was done (every run of it
      // claimed): the delivery is then made again (BullMQ's stalled check, or the sweep of dead
      // workers' deliveries), and a claim that finds the run completed is recorded as a skipped
      // attempt, which ran nothing. Seen once in a full suite with both cores busy.
      const ran = attempts.filter((a) => a.state !== 'skipped');
      assert.deepEqual(ran, [
        { attempt: 1, state: 'stale' },
        { attempt: 2, state: 'completed' },
      ]);
      assert.ok(
        attempts.every((a) => a.state !== 'skipped' || a.attempt > 2),
        `a skipped attempt only after the run completed: ${JSON.stringify(attempts)}`,
      );
    } finally {
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      await exited;
      await parentWorker?.close(1000);
      await delivery.queue.obliterate({ force: true }).catch(() => {});
      await delivery.close();
      await redis.quit();
      await db.drop();
    }
  },
);
