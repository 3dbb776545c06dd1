/**
 * node-cron users (docs/guides/node-cron.md): keep your node-cron code and let cronwarden decide
 * which process runs each slot. Run this same file in several processes: only the lease holder
 * runs a slot, and each slot is committed to the ledger once, across processes and failovers.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… npx tsx --tsconfig examples/tsconfig.json examples/node-cron.ts
 */
import cron from 'node-cron';
import pg from 'pg';
import { NodeCronCoordinator, createLeaseBackend, migrateDatabase } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';

// The coordinator needs a migrated ledger (`cronwarden migrate` does the same) and a lease backend.
const { schema } = await migrateDatabase(databaseUrl, { namespace });
const pool = new pg.Pool({ connectionString: databaseUrl });
const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
const coordinator = new NodeCronCoordinator({ backend, pool, schema });
cron.setRunCoordinator(coordinator);

const ran: string[] = [];
const task = cron.schedule(
  '* * * * * *',
  (ctx) => {
    ran.push(ctx.date.toISOString());
  },
  { name: 'sync-accounts', distributed: true }, // a name is required: it keys the slot in the ledger
);

await new Promise((resolve) => setTimeout(resolve, 3500));
await task.stop();
await coordinator.release(); // hand the lease over at once instead of letting it expire
await backend.close();
await pool.end();
for (const slot of ran) console.log(`sync-accounts ran for ${slot}`);
if (ran.length === 0 || new Set(ran).size !== ran.length) throw new Error('each slot should run once');
