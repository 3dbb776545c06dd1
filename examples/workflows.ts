/**
 * Workflows (docs/guides/workflows.md): a scheduled graph of steps. One replica starts a billing
 * run by hand: extract the customers, invoice each one in a step run of its own (a fan-out), then
 * report on all the invoices (a fan-in). Each invoice is written once, in ctx.transaction, with the
 * step's result and completion; then the example checks the effects and the run's steps.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/workflows.ts
 */
import { once } from 'node:events';
import pg from 'pg';
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineWorkflow, migrateDatabase } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example-workflows';

const app = new pg.Pool({ connectionString: databaseUrl });
await app.query('CREATE TABLE IF NOT EXISTS example_wf_invoices (customer text, total int, step_run bigint)');

export const nightlyBilling = defineWorkflow({
  name: 'nightly-billing',
  schedule: '0 2 * * *',
  timezone: 'Europe/Berlin',
})
  .step('extract', async () => ({ customers: ['ann', 'bob', 'cy'] }))
  .step('invoice', {
    needs: ['extract'],
    map: (input) => input.extract.customers, // one step run per customer
    retries: 3,
    run: (ctx, customer) =>
      // The insert, this step's result (what the callback returns) and its completion commit together.
      ctx.transaction(async (tx) => {
        const total = customer.length * 10;
        await tx.query('INSERT INTO example_wf_invoices VALUES ($1, $2, $3)', [customer, total, ctx.runId]);
        return { customer, total };
      }),
  })
  .step('report', {
    needs: ['invoice'], // every invoice's result, in item order
    run: (_ctx, input) => input.invoice.reduce((sum, invoice) => sum + invoice.total, 0),
  });

const { schema } = await migrateDatabase(databaseUrl, { namespace });
const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
const replica = new Replica({
  namespace,
  schema,
  backend,
  databaseUrl,
  redisUrl,
  jobs: [nightlyBilling],
  logger: pino({ level: 'warn' }),
});
const leading = once(replica, 'lease:acquired');
await replica.start();
await leading;

// Fire it now instead of waiting for 02:00 (`cronwarden trigger nightly-billing` does the same).
let fired;
for (let i = 0; !fired && i < 100; i++) {
  fired = await replica.trigger('nightly-billing').catch(() => undefined); // until the leader's first plan is done
  if (!fired) await new Promise((resolve) => setTimeout(resolve, 100));
}
if (!fired) throw new Error('the replica did not lead');
const runs = `"${schema}".cw_runs`;
let state = 'pending';
for (let i = 0; i < 200 && (state === 'pending' || state === 'running'); i++) {
  await new Promise((resolve) => setTimeout(resolve, 100));
  state = (await app.query<{ state: string }>(`SELECT state FROM ${runs} WHERE id = $1`, [fired.runId])).rows[0]!.state;
}
const steps = await app.query<{ step: string; item: number | null; state: string; result: unknown }>(
  `SELECT step, item, state, result FROM ${runs} WHERE workflow_run_id = $1 ORDER BY step, item`,
  [fired.runId],
);
for (const s of steps.rows)
  console.log(`${s.step}${s.item === null ? '' : `[${s.item}]`}  ${s.state}  ${JSON.stringify(s.result)}`);
const invoices = await app.query<{ customer: string }>(
  'SELECT customer FROM example_wf_invoices WHERE step_run IN (SELECT id FROM ' + runs + ' WHERE workflow_run_id = $1)',
  [fired.runId],
);
console.log(`workflow run ${fired.runId}: ${state}; ${invoices.rowCount} invoices written`);
await replica.stop();
await backend.close();
await app.query('DROP TABLE example_wf_invoices');
await app.end();
if (state !== 'completed' || invoices.rowCount !== 3)
  throw new Error('expected a completed run and one invoice per customer');
