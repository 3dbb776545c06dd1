/**
 * Runtime schedules, one-off runs and backfill (docs/guides/runtime-schedules.md), through the
 * admin API of one replica: a schedule created at runtime for a handler defined in code, a one-off
 * run, and a backfill of a past range. Each prints what the ledger did.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/runtime-schedules.ts
 */
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineJob, migrateDatabase } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';
const token = randomBytes(24).toString('hex'); // the admin token: mutations need it

const seen: string[] = [];
// The handler lives in code; its own schedule here is once a year. Runtime schedules reuse it.
const report = defineJob({
  name: 'report',
  schedule: '0 0 1 1 *',
  handler: async (ctx) => {
    const { customer } = (ctx.payload ?? {}) as { customer?: string };
    seen.push(`${ctx.jobName} ${ctx.scheduledAt.toISOString()} customer=${customer ?? '-'}`);
  },
});

const { schema } = await migrateDatabase(databaseUrl, { namespace });
const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
const replica = new Replica({
  namespace,
  schema,
  backend,
  databaseUrl,
  redisUrl,
  jobs: [report],
  admin: { port: 0, token }, // port 0: any free port
  logger: pino({ level: 'warn' }),
});
const leading = once(replica, 'lease:acquired');
await replica.start();
await leading;

async function api(method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(`${replica.adminUrl}${path}`, {
    method,
    // No content-type without a body: the API refuses an empty JSON body.
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json: unknown = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// 1. A schedule created at runtime: every second, with a payload. Its runs are job "report/acme".
await api('POST', '/api/schedules', {
  id: 'acme',
  handler: 'report',
  schedule: '* * * * * *',
  payload: { customer: 'acme' },
});
await sleep(2500);
// Changed: only what is named changes; the next slots carry the new payload.
await api('PATCH', '/api/schedules/acme', { payload: { customer: 'acme-eu' } });
await sleep(2000);
await api('DELETE', '/api/schedules/acme');

// 2. A one-off run, once per key: asking again with the same key returns the first run.
const first = (await api('POST', '/api/jobs/report/once', { key: 'invoice-42', payload: { customer: 'once' } })) as {
  runId: string;
  created: boolean;
};
const again = (await api('POST', '/api/jobs/report/once', { key: 'invoice-42' })) as {
  runId: string;
  created: boolean;
};
console.log(
  `one-off run ${first.runId} (created: ${first.created}); same key again: run ${again.runId} (created: ${again.created})`,
);

// 3. Backfill: every slot of a past range the ledger does not hold yet. The job fires on
// 1 January at 00:00; backfill the last three years' slots, then again: the second adds nothing.
const year = new Date().getUTCFullYear();
const range = { from: `${year - 3}-01-01T00:00:00Z`, to: `${year - 1}-12-31T23:59:59Z` };
const step1 = (await api('POST', '/api/jobs/report/backfill', range)) as { inserted: number; existing: number };
const step2 = (await api('POST', '/api/jobs/report/backfill', range)) as { inserted: number; existing: number };
console.log(`backfill: ${step1.inserted} new, then ${step2.inserted} new and ${step2.existing} already in the ledger`);

await sleep(1500);
await replica.stop();
await backend.close();
for (const line of seen.sort()) console.log(line);
if (!seen.some((l) => l.includes('customer=acme-eu')) || step1.inserted !== 3 || step2.inserted !== 0)
  throw new Error('unexpected result');
