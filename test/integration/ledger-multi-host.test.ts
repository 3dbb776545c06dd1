/**
 * The ledger's own failover, reached by libpq's multi-host URL (issue 11): a primary with a
 * synchronous standby made by pg_basebackup (src/drill/servers/postgres-pair.ts), a replica given
 * `postgres://…:p1,…:p2/cronwarden?target_session_attrs=read-write`. kill -9 of the primary, the
 * standby promoted: the replica's new connections find the promoted one by themselves (no proxy,
 * no new URL), and it keeps firing, every slot once. What this rests on is synchronous replication:
 * every fire the replica saw commit is on the standby when it is promoted.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { ledgerConnection, parseLedgerUrl } from '../../src/db/ledger-url.js';
import { isPostgresUnavailable } from '../../src/db/postgres-unavailable.js';
import { DEFAULT_SCHEMA } from '../../src/db/tables.js';
import { startPostgresPair, type PostgresPair } from '../../src/drill/servers/postgres-pair.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

describe('a ledger reached by a multi-host URL (primary + synchronous standby)', () => {
  let pair: PostgresPair;

  before(async () => {
    pair = await startPostgresPair({ synchronous: true });
  });
  after(async () => {
    await pair?.cleanup();
  });

  it('connects to the read-write host whichever order the URL names them in', async () => {
    const [first, second] = parseLedgerUrl(pair.multiHostUrl).hosts;
    // The standby first: it answers, but is read-only, so the primary is chosen.
    const standbyFirst = `postgres://postgres@127.0.0.1:${pair.standby.port},127.0.0.1:${pair.primary.port}/cronwarden?target_session_attrs=read-write`;
    for (const url of [pair.multiHostUrl, standbyFirst]) {
      const pool = new pg.Pool({ ...ledgerConnection(url), max: 1, connectionTimeoutMillis: 2000 });
      try {
        const r = await pool.query<{ ro: string; port: number }>(
          "SELECT current_setting('transaction_read_only') AS ro, inet_server_port() AS port",
        );
        assert.deepEqual(r.rows[0], { ro: 'off', port: pair.primary.port });
      } finally {
        await pool.end();
      }
    }
    assert.deepEqual(
      [first, second].map((h) => h!.port),
      [pair.primary.port, pair.standby.port],
    );
    // Without target_session_attrs the first host that answers is kept, standby or not (libpq's rule).
    const anyFirst = `postgres://postgres@127.0.0.1:${pair.standby.port},127.0.0.1:${pair.primary.port}/cronwarden`;
    const client = new (ledgerConnection(anyFirst).Client ?? pg.Client)({ ...ledgerConnection(anyFirst) });
    await client.connect();
    try {
      assert.equal((await client.query<{ p: number }>('SELECT inet_server_port() AS p')).rows[0]!.p, pair.standby.port);
    } finally {
      await client.end();
    }
  });

  it('no read-write host: a clear, retryable error naming every host', async () => {
    const url = `postgres://postgres@127.0.0.1:${pair.standby.port}/cronwarden?target_session_attrs=read-write`;
    const pool = new pg.Pool({ ...ledgerConnection(url), max: 1, connectionTimeoutMillis: 2000 });
    try {
      await assert.rejects(pool.query('SELECT 1'), (err: Error) => {
        assert.match(
          err.message,
          new RegExp(`no read-write server among 127\\.0\\.0\\.1:${pair.standby.port}/cronwarden`),
        );
        assert.ok(isPostgresUnavailable(err), 'a failover under way: retry, not crash');
        return true;
      });
    } finally {
      await pool.end();
    }
  });

  it(
    'kill -9 of the primary, standby promoted: the replica keeps firing on the same URL, every slot once',
    { timeout: 120_000 },
    async () => {
      const namespace = `mh${randomUUID().slice(0, 8)}`;
      const replica = new Replica({
        replicaId: 'mh-1',
        namespace,
        schema: DEFAULT_SCHEMA,
        backend: new MemoryLeaseBackend(),
        databaseUrl: pair.multiHostUrl,
        redisUrl: SHARED_REDIS_URL,
        jobs: [defineJob({ name: 'every-second', schedule: '* * * * * *', handler: async () => {} })],
        election: { ttlMs: 2000 },
        shutdownGraceMs: 1000,
        admin: false,
        logger: pino({ level: 'silent' }),
      });
      const reader = new pg.Pool({ ...ledgerConnection(pair.multiHostUrl), max: 2, connectionTimeoutMillis: 2000 });
      reader.on('error', () => {});
      // Every trigger but a manual one: slots fired past the misfire grace (a slow promotion) are
      // committed as 'catchup', and they are the slot's one fire all the same.
      const runs = async () =>
        (
          await reader.query<{ at: Date; n: number }>(
            `SELECT scheduled_at AS at, count(*)::int AS n FROM ${DEFAULT_SCHEMA}.cw_runs
             WHERE job = 'every-second' AND trigger <> 'manual' GROUP BY scheduled_at ORDER BY scheduled_at`,
          )
        ).rows;
      try {
        await replica.start();
        await until('five fires before the failover', async () => (await runs()).length >= 5, 30_000);
        const oldPrimary = pair.primary.port;
        const { detail } = await pair.failover();
        const failedOverAt = Date.now();
        assert.notEqual(pair.primary.port, oldPrimary, detail);
        await until(
          'five fires committed on the promoted standby',
          async () => (await runs()).filter((r) => r.at.getTime() > failedOverAt).length >= 5,
          60_000,
        );
        await replica.stop();
        // Read on the promoted primary itself: it holds every fire, each slot once, none missing.
        const rows = await runs();
        assert.ok(
          rows.every((r) => r.n === 1),
          `doubled: ${JSON.stringify(rows.filter((r) => r.n > 1))}`,
        );
        const seconds = rows.map((r) => r.at.getTime() / 1000);
        const missing: number[] = [];
        for (let s = seconds[0]!; s <= seconds.at(-1)!; s++) if (!seconds.includes(s)) missing.push(s);
        assert.deepEqual(missing, [], `slots missing across the failover (${detail})`);
        const direct = new pg.Client({ connectionString: pair.url });
        await direct.connect();
        try {
          const onPrimary = await direct.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM ${DEFAULT_SCHEMA}.cw_runs WHERE job = 'every-second'`,
          );
          assert.equal(onPrimary.rows[0]!.n, rows.length);
        } finally {
          await direct.end();
        }
      } finally {
        await replica.stop();
        await reader.end();
        const redis = new Redis(SHARED_REDIS_URL);
        await new Queue(`cronwarden-${namespace}`, { connection: redis }).obliterate({ force: true }).catch(() => {});
        await redis.quit();
      }
    },
  );
});
