/**
 * Sharded leadership (docs/guides/sharding.md): three replicas, six shards. Each shard has its own
 * lease and fence; the replicas spread the shards evenly, and a stopped replica's shards move to the
 * others while nobody else's change hands. Prints who leads which shard before and after.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… CRONWARDEN_REDIS_URL=redis://… npx tsx --tsconfig examples/tsconfig.json examples/sharding.ts
 */
import { pino } from 'pino';
import { Replica, createLeaseBackend, defineJob, migrateDatabase } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';
const SHARDS = 6; // a multiple of the replica count spreads exactly evenly (2 / 2 / 2)

// Eight jobs: each belongs to one shard by a stable hash of its name, and is fired by that shard's leader.
const jobs = Array.from({ length: 8 }, (_, i) =>
  defineJob({ name: `tick-${i}`, schedule: '* * * * * *', handler: () => undefined }),
);

const { schema } = await migrateDatabase(databaseUrl, { namespace });
const logger = pino({ level: 'warn' });

async function startReplica(replicaId: string) {
  const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
  const replica = new Replica({
    replicaId,
    namespace,
    schema,
    backend,
    databaseUrl,
    redisUrl,
    jobs,
    shards: SHARDS, // the same count on every replica of the deployment
    election: { ttlMs: 3000 },
    admin: { port: 0 },
    logger,
  });
  await replica.start();
  return { replica, backend };
}

interface ShardStatus {
  shard: number;
  holder: string | null;
}
/** Who leads each shard, from any replica's admin API (GET /api/lease has a `shards` list). */
async function holders(replica: Replica): Promise<(string | null)[]> {
  const lease = (await (await fetch(`${replica.adminUrl}/api/lease`)).json()) as { shards: ShardStatus[] };
  return lease.shards.map((s) => s.holder);
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Wait until every shard is led by one of `ids` and none leads more than its share. */
async function balanced(replica: Replica, ids: string[]): Promise<(string | null)[]> {
  for (let i = 0; i < 60; i++) {
    const h = await holders(replica);
    const counts = ids.map((id) => h.filter((x) => x === id).length);
    if (h.every((x) => x !== null && ids.includes(x)) && Math.max(...counts) <= Math.ceil(SHARDS / ids.length))
      return h;
    await sleep(250);
  }
  throw new Error(`shards not balanced over ${ids.join(', ')}: ${JSON.stringify(await holders(replica))}`);
}

const nodes = [await startReplica('r1'), await startReplica('r2'), await startReplica('r3')];
const before = await balanced(nodes[0]!.replica, ['r1', 'r2', 'r3']);
before.forEach((h, shard) => console.log(`shard ${shard}: ${h}`));

// A graceful stop resigns r3's shards; r1 and r2 take them, and keep their own.
const stopped = nodes.pop()!;
await stopped.replica.stop();
await stopped.backend.close();
const after = await balanced(nodes[0]!.replica, ['r1', 'r2']);
console.log('after r3 stopped:');
after.forEach((h, shard) => console.log(`shard ${shard}: ${h}${h === before[shard] ? '' : ` (was ${before[shard]})`}`));

for (const n of nodes) {
  await n.replica.stop();
  await n.backend.close();
}
if (before.some((h, shard) => h !== 'r3' && after[shard] !== h)) throw new Error('a shard moved that did not need to');
