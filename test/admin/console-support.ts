/**
 * The console tests' jobs and user tables: `flaky` fails while console_switch says so (a real
 * handler error with a stack) and otherwise writes one effect row in its ctx.transaction; `beat`
 * fires every 2 s so the overview and history have something to show; `gated` holds its one
 * concurrency slot for 15 s.
 */
import { defineJob, type JobDefinition } from '../../src/jobs/define-job.js';
import type { TestDatabase } from '../support/postgres-database.js';

export async function createUserTables(db: TestDatabase): Promise<void> {
  await db.pool.query(`CREATE TABLE public.console_switch (fail boolean NOT NULL);
    INSERT INTO public.console_switch VALUES (true);
    CREATE TABLE public.console_effects (run_id bigint NOT NULL, idempotency_key text NOT NULL, token bigint NOT NULL)`);
}

export async function setFailing(db: TestDatabase, fail: boolean): Promise<void> {
  await db.pool.query('UPDATE public.console_switch SET fail = $1', [fail]);
}

export async function effectRows(db: TestDatabase, runId: string): Promise<number> {
  const r = await db.pool.query('SELECT 1 FROM public.console_effects WHERE run_id = $1', [runId]);
  return r.rowCount ?? 0;
}

/** Thrown by `flaky` while the switch is on; its name is what the tests look for in the stack. */
function reportServiceRefused(): never {
  throw new Error('the report service refused the upload (HTTP 503)');
}

export function consoleJobs(): JobDefinition[] {
  return [
    defineJob({
      name: 'flaky',
      schedule: '0 0 1 1 *', // fired by hand in the tests
      timezone: 'Europe/Berlin',
      retries: 0,
      handler: async (ctx) => {
        await ctx.transaction(async (tx) => {
          const sw = await tx.query<{ fail: boolean }>('SELECT fail FROM public.console_switch');
          if (sw.rows[0]?.fail) reportServiceRefused();
          await tx.query('INSERT INTO public.console_effects (run_id, idempotency_key, token) VALUES ($1, $2, $3)', [
            ctx.runId,
            ctx.idempotencyKey,
            ctx.fencingToken.toString(),
          ]);
        });
      },
    }),
    defineJob({ name: 'beat', schedule: '*/2 * * * * *', handler: async () => {} }),
    // One run at a time: a second waits in the ledger for the slot, and says so.
    defineJob({
      name: 'gated',
      schedule: '0 0 1 1 *',
      concurrency: { key: 'console-gate', limit: 1 },
      handler: (ctx) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 15_000);
          ctx.signal.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve();
          });
        }),
    }),
  ];
}

/** Polls `check` until it is true (every 50 ms, up to timeoutMs). */
export async function until(check: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

/** Inserts `n` finished runs of `job` straight into the ledger (a long history), scheduled a minute apart back from `newest`. */
export async function insertHistory(db: TestDatabase, job: string, n: number, newest: Date, state = 'completed') {
  await db.pool.query(
    `INSERT INTO ${'"' + db.schema + '"'}.cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, finished_at, created_at)
     SELECT $1, $2::timestamptz - g * interval '1 minute', 'schedule', 1, 'history', $4, $2::timestamptz - g * interval '1 minute',
            $2::timestamptz - g * interval '1 minute'
     FROM generate_series(0, $3 - 1) g`,
    [job, newest, n, state],
  );
}
