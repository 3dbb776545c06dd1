/**
 * Lease backend benchmarks: acquire / renew / release latency (p50, p99) and ops/s per backend,
 * each beside a raw client doing the same primitive in the same run:
 *   redis    — SET NX PX / PEXPIRE / DEL with ioredis
 *   postgres — one UPDATE … RETURNING per operation with pg
 *   etcd     — lease grant + put with the lease / keepAliveOnce / revoke with etcd3
 * Target: each backend's ops/s at least 0.8x of its raw primitive.
 */
import { randomUUID } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { LeaseBackend } from '../src/locks/lease.js';
import { EtcdLeaseBackend } from '../src/locks/etcd.js';
import { PostgresLeaseBackend } from '../src/locks/postgres.js';
import { RedisLeaseBackend } from '../src/locks/redis.js';
import { startEtcd } from '../test/support/etcd-server.js';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { fmt, summarize, table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const ITERATIONS = Number(process.env.BENCH_LOCK_ITERATIONS ?? 1000);
const TTL_MS = 10_000;
/** `BENCH_LOCK_BACKENDS=redis,etcd` runs a subset. */
const BACKENDS = new Set((process.env.BENCH_LOCK_BACKENDS ?? 'redis,postgres,etcd').split(','));

type Op = 'acquire' | 'renew' | 'release';
interface Primitive {
  acquire(i: number): Promise<unknown>;
  renew(i: number): Promise<unknown>;
  release(i: number): Promise<unknown>;
}

type Samples = Record<Op, number[]>;

/**
 * Run ours and the raw primitive in alternating chunks of rounds, so that load from elsewhere on
 * a noisy machine falls on both sides alike.
 */
async function measurePair(mine: Primitive, raw: Primitive): Promise<{ mine: Samples; raw: Samples }> {
  const empty = (): Samples => ({ acquire: [], renew: [], release: [] });
  const out = { mine: empty(), raw: empty() };
  const round = async (p: Primitive, i: number, into?: Samples) => {
    for (const op of ['acquire', 'renew', 'release'] as const) {
      const t = performance.now();
      await p[op](i);
      into?.[op].push(performance.now() - t);
    }
  };
  for (let i = 0; i < 100; i++) {
    await round(mine, -1 - i);
    await round(raw, -1 - i);
  }
  const chunk = 50;
  for (let start = 0; start < ITERATIONS; start += chunk) {
    for (let i = start; i < start + chunk; i++) await round(mine, i, out.mine);
    for (let i = start; i < start + chunk; i++) await round(raw, i, out.raw);
  }
  return out;
}

function ours(backend: LeaseBackend): Primitive {
  const held = new Map<number, Awaited<ReturnType<LeaseBackend['tryAcquire']>>>();
  return {
    acquire: async (i) => {
      const lease = await backend.tryAcquire({ name: 'bench-lease', holder: `h${i}`, ttlMs: TTL_MS });
      if (!lease) throw new Error('benchmark lease unexpectedly held');
      held.set(i, lease);
    },
    renew: async (i) => held.set(i, await backend.renew(held.get(i)!)),
    release: async (i) => {
      await backend.release(held.get(i)!);
      held.delete(i);
    },
  };
}

export async function benchLocks(): Promise<Record<string, unknown>> {
  const rows: Record<string, string | number>[] = [];
  const results: Record<string, unknown> = {};
  const report = (backend: string, mine: Record<Op, number[]>, raw: Record<Op, number[]>, rawLabel: string) => {
    results[backend] = {};
    for (const op of ['acquire', 'renew', 'release'] as const) {
      const a = summarize(mine[op]);
      const b = summarize(raw[op]);
      const opsOurs = 1000 / (mine[op].reduce((x, y) => x + y, 0) / mine[op].length);
      const opsRaw = 1000 / (raw[op].reduce((x, y) => x + y, 0) / raw[op].length);
      (results[backend] as Record<string, unknown>)[op] = {
        p50: a.p50,
        p99: a.p99,
        opsPerSecond: opsOurs,
        raw: { p50: b.p50, p99: b.p99, opsPerSecond: opsRaw },
        ratio: opsOurs / opsRaw,
      };
      rows.push({
        backend,
        op,
        'p50 ms': fmt(a.p50, 3),
        'p99 ms': fmt(a.p99, 3),
        'ops/s': fmt(opsOurs, 0),
        [`raw`]: rawLabel,
        'raw p50 ms': fmt(b.p50, 3),
        'raw ops/s': fmt(opsRaw, 0),
        ratio: fmt(opsOurs / opsRaw),
      });
    }
  };

  if (BACKENDS.has('redis')) {
    const backend = new RedisLeaseBackend({ url: REDIS_URL, keyPrefix: `bench:${randomUUID().slice(0, 6)}:` });
    const raw = new Redis(REDIS_URL);
    const key = `bench-raw:${randomUUID()}`;
    const { mine, raw: base } = await measurePair(ours(backend), {
      acquire: (i) => raw.set(key, `h${i}`, 'PX', TTL_MS, 'NX'),
      renew: () => raw.pexpire(key, TTL_MS),
      release: () => raw.del(key),
    });
    report('redis', mine, base, 'SET NX PX / PEXPIRE / DEL');
    await backend.close();
    await raw.quit();
  }
  if (BACKENDS.has('postgres')) {
    const db = await createTestDatabase();
    const backend = new PostgresLeaseBackend({ connectionString: db.url });
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query(
      `CREATE TABLE raw_lease (name text PRIMARY KEY, holder text, token bigint, expires_at timestamptz)`,
    );
    await client.query(`INSERT INTO raw_lease VALUES ('x', NULL, 0, NULL)`);
    const update = (holder: string | null) =>
      client.query(
        `UPDATE raw_lease SET holder = $1, token = token + 1, expires_at = now() + interval '10 seconds' WHERE name = 'x' RETURNING token`,
        [holder],
      );
    const { mine, raw: base } = await measurePair(ours(backend), {
      acquire: (i) => update(`h${i}`),
      renew: (i) => update(`h${i}`),
      release: () => update(null),
    });
    report('postgres', mine, base, 'one UPDATE … RETURNING');
    await backend.close();
    await client.end();
    await db.drop();
  }
  // etcd: a throwaway single-member server
  if (BACKENDS.has('etcd')) {
    const etcd = await startEtcd();
    const backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
    const client = new Etcd3({ hosts: etcd.endpoints });
    const leases = new Map<number, ReturnType<Etcd3['lease']>>();
    const { mine, raw: base } = await measurePair(ours(backend), {
      acquire: async (i) => {
        const lease = client.lease(Math.ceil(TTL_MS / 1000), { autoKeepAlive: false });
        leases.set(i, lease);
        await lease.put(`bench-raw/${i}`).value(`h${i}`);
      },
      renew: (i) => leases.get(i)!.keepaliveOnce(),
      release: async (i) => {
        await leases.get(i)!.revoke();
        leases.delete(i);
      },
    });
    report('etcd', mine, base, 'lease grant + put / keepAliveOnce / revoke');
    await backend.close();
    client.close();
    await etcd.cleanup();
  }
  table(`Lease operations, ${ITERATIONS} sequential rounds each (ratio = ops/s vs raw; target >= 0.80)`, rows);
  return results;
}
