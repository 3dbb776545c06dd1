/**
 * Rolling upgrades (docs/guides/rolling-upgrades.md): version 1.0.0 of the code defines the jobs
 * `keep` and `old`; version 1.1.0 drops `old` and adds `added`. Both run side by side for a moment,
 * as during a rolling deploy, and the members view says which versions run and which replica lacks
 * which job. Then 1.0.0 stops (it resigns; 1.1.0 leads at once) and the roll is done.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/rolling-upgrade.ts
 */
import { once } from 'node:events';
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineJob, migrateDatabase, type JobDefinition } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';

const job = (name: string) => defineJob({ name, schedule: '* * * * * *', handler: () => undefined });
const v1 = [job('keep'), job('old')];
const v2 = [job('keep'), job('added')];

// Migrate with the new version first (migrations only add), then replace the replicas one by one.
const { schema } = await migrateDatabase(databaseUrl, { namespace });

async function startReplica(replicaId: string, version: string, jobs: JobDefinition[]) {
  const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
  const replica = new Replica({
    replicaId,
    version, // advertised in the members view; default: cronwarden's own version
    namespace,
    schema,
    backend,
    databaseUrl,
    redisUrl,
    jobs,
    admin: { port: 0 },
    logger: pino({ level: 'warn' }),
  });
  const leading = once(replica, 'lease:acquired');
  await replica.start();
  return { replica, backend, leading };
}

interface Members {
  members: { replicaId: string; version: string; role: string }[];
  agreement: { versions: string[]; jobsAgree: boolean; missing: Record<string, string[]> };
}
async function members(replica: Replica): Promise<Members> {
  return (await (await fetch(`${replica.adminUrl}/api/members`)).json()) as Members;
}

const old = await startReplica('app-1.0.0', '1.0.0', v1);
await old.leading;
const next = await startReplica('app-1.1.0', '1.1.0', v2);
await new Promise((resolve) => setTimeout(resolve, 1000)); // one member heartbeat
const during = await members(next.replica);
console.log(
  `during the roll: versions ${during.agreement.versions.join(', ')}; jobs agree: ${during.agreement.jobsAgree}`,
);
for (const [replica, lacks] of Object.entries(during.agreement.missing))
  console.log(`  ${replica} lacks ${lacks.join(', ')}`);

// SIGTERM in production; stop() here: the old replica resigns and the new one leads at once.
const handover = Date.now();
await old.replica.stop();
await old.backend.close();
await next.leading;
console.log(`app-1.1.0 leads ${Date.now() - handover} ms after app-1.0.0 began to stop`);
await new Promise((resolve) => setTimeout(resolve, 1000));
const after = await members(next.replica);
console.log(
  `after the roll: versions ${after.agreement.versions.join(', ')}; jobs agree: ${after.agreement.jobsAgree}`,
);

await next.replica.stop();
await next.backend.close();
if (during.agreement.jobsAgree || !after.agreement.jobsAgree) throw new Error('unexpected members view');
