/**
 * Sharing a database and a Redis (docs/guides/sharing-a-database.md): two deployments with the same
 * job names on one PostgreSQL database and one Redis, kept apart by their namespaces (each has its
 * own schema, queue, lease and channels). Then both namespaces are dropped: their Redis keys and
 * their schemas, which is all they leave behind.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/sharing-a-database.ts
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineJob, migrateDatabase, type JobContext } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = process.env.CRONWARDEN_NAMESPACE ?? 'example';
const namespaces = [`${prefix}-billing`, `${prefix}-reports`];

// The application's own table, in public: cronwarden never touches it.
const app = new pg.Pool({ connectionString: databaseUrl });
await app.query('CREATE TABLE IF NOT EXISTS example_effects (deployment text, slot timestamptz)');

const deployments = await Promise.all(
  namespaces.map(async (namespace) => {
    // Same job name in both deployments; each writes which deployment ran it.
    const report = defineJob({
      name: 'report',
      schedule: '* * * * * *',
      handler: async (ctx: JobContext) => {
        await ctx.transaction(async (tx) => {
          // Unqualified names resolve as they would without cronwarden (here: to public).
          await tx.query('INSERT INTO example_effects (deployment, slot) VALUES ($1, $2)', [
            namespace,
            ctx.scheduledAt,
          ]);
        });
      },
    });
    const { schema } = await migrateDatabase(databaseUrl, { namespace }); // cronwarden_<namespace>
    const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
    const replica = new Replica({
      namespace,
      schema,
      backend,
      databaseUrl,
      redisUrl,
      jobs: [report],
      logger: pino({ level: 'warn' }),
    });
    await replica.start();
    return { namespace, schema, replica, backend };
  }),
);

await new Promise((resolve) => setTimeout(resolve, 4000));
for (const d of deployments) {
  await d.replica.stop();
  await d.backend.close();
}

const { rows } = await app.query<{ deployment: string; slots: number; rows: number }>(
  'SELECT deployment, count(DISTINCT slot)::int AS slots, count(*)::int AS rows FROM example_effects GROUP BY 1 ORDER BY 1',
);
for (const r of rows) console.log(`${r.deployment}: ${r.slots} slots, ${r.rows} effect rows`);
if (rows.length !== 2 || rows.some((r) => r.slots === 0 || r.rows !== r.slots))
  throw new Error('each deployment should write each of its slots once');

// Dropping a namespace: its Redis keys (BullMQ's queue, and Redis leases if that backend was used)
// and its PostgreSQL schema. Stop its replicas first.
const redis = new Redis(redisUrl);
for (const d of deployments) {
  let dropped = 0;
  for (const pattern of [`bull:cronwarden-${d.namespace}:*`, `cronwarden:lease:cronwarden/${d.namespace}/*`]) {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      if (keys.length > 0) dropped += await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  }
  await app.query(`DROP SCHEMA ${d.schema} CASCADE`);
  console.log(`dropped namespace ${d.namespace}: ${dropped} Redis keys and schema ${d.schema}`);
}
redis.disconnect();
await app.query('DROP TABLE example_effects');
await app.end();
