/**
 * A ledger with a standby (docs/guides/ledger-standby.md): the replica is given every server of the
 * primary/standby pair in one libpq-style URL with target_session_attrs=read-write, and each new
 * connection keeps the first server that accepts writes. Here the first host is down (nothing
 * listens on 127.0.0.1:1), as a dead primary would be, and the runs reach the second.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/ledger-standby.ts
 */
import { once } from 'node:events';
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineJob, migrateDatabase } from 'cronwarden';

const single = new URL(process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';

// postgres://user@127.0.0.1:1,db-host:5432/db?target_session_attrs=read-write&connect_timeout=2
const credentials = single.username ? `${single.username}${single.password ? `:${single.password}` : ''}@` : '';
const databaseUrl =
  `postgres://${credentials}127.0.0.1:1,${single.hostname}:${single.port || 5432}${single.pathname}` +
  '?target_session_attrs=read-write&connect_timeout=2';
console.log(`ledger URL: ${databaseUrl.replace(/:[^:@/]*@/, ':***@')}`);

const served: string[] = [];
const where = defineJob({
  name: 'where',
  schedule: '* * * * * *',
  handler: async (ctx) => {
    await ctx.transaction(async (tx) => {
      const { rows } = await tx.query<{ port: number; readOnly: string }>(
        'SELECT inet_server_port() AS port, current_setting(\'transaction_read_only\') AS "readOnly"',
      );
      served.push(`${ctx.scheduledAt.toISOString()} ran on port ${rows[0]!.port} (read only: ${rows[0]!.readOnly})`);
    });
  },
});

// The same URL for migrate, the ledger and the PostgreSQL lease backend.
const { schema } = await migrateDatabase(databaseUrl, { namespace });
const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
const replica = new Replica({
  namespace,
  schema,
  backend,
  databaseUrl,
  redisUrl,
  jobs: [where],
  logger: pino({ level: 'warn' }),
});
const leading = once(replica, 'lease:acquired');
await replica.start();
await leading;
await new Promise((resolve) => setTimeout(resolve, 3000));
await replica.stop();
await backend.close();
for (const line of served) console.log(line);
if (served.length === 0) throw new Error('no run reached the ledger');
