/**
 * Exactly-once effects (docs/guides/exactly-once-effects.md): a replica runs two jobs for a few
 * seconds; one writes its effect in ctx.transaction, one guards a "latest wins" row with ctx.fence.
 * Then it counts the effects: one row per scheduled second, never two.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/exactly-once.ts
 */
import { once } from 'node:events';
import pg from 'pg';
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineJob, migrateDatabase } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';

const app = new pg.Pool({ connectionString: databaseUrl });
await app.query(`CREATE TABLE IF NOT EXISTS example_invoices (slot timestamptz, run_id bigint, attempt int)`);
await app.query(`CREATE TABLE IF NOT EXISTS example_latest (id text PRIMARY KEY, slot timestamptz)`);

const invoices = defineJob({
  name: 'invoices',
  schedule: '* * * * * *', // every second
  handler: async (ctx) => {
    // The insert and the run's completion commit together: a repeated delivery of this run finds
    // it completed and skips, so the row is written once per slot whatever crashes.
    await ctx.transaction(async (tx) => {
      await tx.query('INSERT INTO example_invoices (slot, run_id, attempt) VALUES ($1, $2, $3)', [
        ctx.scheduledAt,
        ctx.runId,
        ctx.attempt,
      ]);
    });
  },
});

const latest = defineJob({
  name: 'latest',
  schedule: '* * * * * *',
  handler: async (ctx) => {
    await ctx.transaction(async (tx) => {
      // The newest slot wins: a late run of an older slot is refused (SupersededError), settles
      // 'superseded' and is not retried.
      await ctx.fence('example_latest/daily', tx);
      await tx.query(
        `INSERT INTO example_latest (id, slot) VALUES ('daily', $1) ON CONFLICT (id) DO UPDATE SET slot = EXCLUDED.slot`,
        [ctx.scheduledAt],
      );
    });
  },
});

// The ledger lives in the namespace's own schema; the PostgreSQL lease backend keeps its lease there too.
const { schema } = await migrateDatabase(databaseUrl, { namespace });
const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
const replica = new Replica({
  namespace,
  schema,
  backend,
  databaseUrl,
  redisUrl,
  jobs: [invoices, latest],
  logger: pino({ level: 'warn' }),
});
const leading = once(replica, 'lease:acquired');
await replica.start();
await leading;
console.log(`${replica.replicaId} leads ${replica.leaseName}`);
await new Promise((resolve) => setTimeout(resolve, 4000));
await replica.stop();
await backend.close();

const { rows } = await app.query<{ slot: Date; n: number }>(
  'SELECT slot, count(*)::int AS n FROM example_invoices GROUP BY slot ORDER BY slot',
);
for (const r of rows) console.log(`${r.slot.toISOString()}  ${r.n} invoice row${r.n === 1 ? '' : 's'}`);
const latestRow = await app.query<{ slot: Date }>(`SELECT slot FROM example_latest WHERE id = 'daily'`);
console.log(`latest report: ${latestRow.rows[0]?.slot.toISOString() ?? 'none'}`);
await app.query('DROP TABLE example_invoices, example_latest');
await app.end();
if (rows.length === 0 || rows.some((r) => r.n !== 1)) throw new Error('expected one row per slot');
