/**
 * Locks for your own code (docs/guides/locks.md): withLock runs a critical section while holding a
 * lease, renews it in the background, and hands the section a fencing token to pass with every
 * write it protects. Two contenders here: the second waits for the first; a third that will not
 * wait gets nothing.
 *
 *   CRONWARDEN_DATABASE_URL=postgres://… npx tsx --tsconfig examples/tsconfig.json examples/locks.ts
 */
import { createLeaseBackend, migrateDatabase, withLock } from 'cronwarden';

const databaseUrl = process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const namespace = process.env.CRONWARDEN_NAMESPACE ?? 'example';

// The PostgreSQL backend keeps its leases in cronwarden's schema (migrated); Redis and etcd need no table.
const { schema } = await migrateDatabase(databaseUrl, { namespace });
const backend = await createLeaseBackend({ kind: 'postgres', url: databaseUrl, schema });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const options = { name: 'rebuild-search-index', ttlMs: 5000 };
const tokens: bigint[] = [];
const contender = (who: string) =>
  withLock(backend, options, async ({ token, signal }) => {
    // `signal` aborts at the local deadline if the lease is lost; stop writing then.
    console.log(`${who} holds the lock with token ${token}`);
    tokens.push(token);
    await sleep(500);
    if (signal.aborted) throw new Error('lost the lock');
  });

const first = contender('A');
await sleep(100);
const second = contender('B'); // waits until A releases
await sleep(100);
const third = await withLock(backend, { ...options, wait: false }, async () => 'ran');
console.log(`C, without waiting: ${third ?? 'held by someone else, skipped'}`);
await Promise.all([first, second]);
await backend.close();
if (tokens.length !== 2 || tokens[1]! <= tokens[0]! || third !== undefined) throw new Error('unexpected lock order');
