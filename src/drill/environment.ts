/**
 * The servers a drill runs against, each started by the drill when a fault must strike it:
 * - the lease backend: always the drill's own (etcd x3, Redis, PostgreSQL), or a Redis primary,
 *   replica and three Sentinels for redis-sentinel-failover;
 * - the ledger: a scratch database on the given server, or the drill's own PostgreSQL for
 *   ledger-restart, or its own primary + standby (reached by a multi-host URL) for
 *   ledger-failover. With a ledger of its own, the drill keeps its attempt log (the witness of
 *   what each attempt wrote) in a scratch database on the given server, outside the ledger, so a
 *   completion the ledger loses is still seen;
 * - BullMQ's Redis: the given one (a namespace of its own), or the drill's own redis-server for
 *   queue-restart and queue-flush, separate from the lease backend's.
 */
import pg from 'pg';
import { ledgerConnection } from '../db/ledger-url.js';
import { Redis } from 'ioredis';
import type { BackendConfig } from '../locks/create-backend.js';
import { DrillError } from '../errors.js';
import { ATTEMPT_LOG_DDL } from './attempt-log.js';
import type { FaultKind } from './faults.js';
import { STEP_EFFECTS_DDL } from './workflow-workload.js';
import { startEtcdCluster } from './servers/etcd-server.js';
import { startPostgresCluster } from './servers/postgres-cluster.js';
import { startPostgresPair, type PairFailover } from './servers/postgres-pair.js';
import { startRedis } from './servers/redis-server.js';
import { startSentinelGroup } from './servers/redis-sentinel.js';
import { createScratchDatabase } from './servers/scratch-database.js';

export type BackendKind = 'etcd' | 'redis' | 'postgres';

export interface LeaseServers {
  config: BackendConfig;
  restart(all: boolean): Promise<void>;
  /** redis-sentinel-failover: kill the primary, wait for Sentinel's promotion. */
  failover?(lagMs: number): Promise<{ detail: string; killedAt: number }>;
  cleanup(): Promise<void>;
}

export interface LedgerServers {
  /** What the replicas are given as CRONWARDEN_DATABASE_URL. */
  url: string;
  /** The drill's own pool on the ledger (reads of the history; survives the ledger's restarts). */
  pool: pg.Pool;
  /** Where the workload appends its attempt log (CRONWARDEN_DRILL_ATTEMPT_LOG_URL) and the checker reads it. */
  witnessUrl: string;
  witness: pg.Pool;
  restart?(): Promise<string>;
  failover?(lagMs: number): Promise<PairFailover>;
  cleanup(): Promise<void>;
}

export interface QueueServer {
  url: string;
  restart?(): Promise<void>;
  flush?(): Promise<void>;
  cleanup(): Promise<void>;
}

export interface DrillEnvironment {
  lease: LeaseServers;
  ledger: LedgerServers;
  queue: QueueServer;
  cleanup(): Promise<void>;
}

export interface EnvironmentOptions {
  backend: BackendKind;
  /** Server for the ledger's scratch database and, with a ledger of the drill's own, the witness. */
  databaseUrl: string;
  redisUrl: string;
  /** ledger-failover: the standby is asynchronous (the assumption broken on purpose). */
  ledgerAsync?: boolean;
}

export async function startEnvironment(
  o: EnvironmentOptions,
  schedule: readonly FaultKind[],
): Promise<DrillEnvironment> {
  const started: { cleanup(): Promise<void> }[] = [];
  const track = <T extends { cleanup(): Promise<void> }>(s: T): T => (started.push(s), s);
  const cleanup = async () => {
    for (const s of started.reverse()) await s.cleanup().catch(() => {});
  };
  try {
    const ledger = track(await startLedger(o, schedule));
    await ledger.pool.query(
      'CREATE TABLE cw_drill_effects (run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL, replica text NOT NULL)',
    );
    await ledger.pool.query(STEP_EFFECTS_DDL);
    await ledger.witness.query(ATTEMPT_LOG_DDL);
    const queue = track(await startQueue(o, schedule));
    const lease = track(await startLease(o.backend, schedule.includes('redis-sentinel-failover')));
    return { lease, ledger, queue, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** A pool that outlives its server's restarts: a broken idle connection is dropped, not fatal. */
function tolerantPool(url: string): pg.Pool {
  const pool = new pg.Pool({ ...ledgerConnection(url), max: 4, connectionTimeoutMillis: 2000 });
  pool.on('error', () => {});
  return pool;
}

async function startLedger(o: EnvironmentOptions, schedule: readonly FaultKind[]): Promise<LedgerServers> {
  if (!schedule.includes('ledger-restart') && !schedule.includes('ledger-failover')) {
    const scratch = await createScratchDatabase(o.databaseUrl, { prefix: 'cronwarden_drill' });
    return {
      url: scratch.url,
      pool: scratch.pool,
      witnessUrl: scratch.url,
      witness: scratch.pool,
      cleanup: () => scratch.drop(),
    };
  }
  const witness = await createScratchDatabase(o.databaseUrl, { prefix: 'cronwarden_drill_witness', migrate: false });
  try {
    const own = schedule.includes('ledger-failover')
      ? await pairedLedger(o.ledgerAsync === true)
      : await singleLedger();
    return {
      ...own,
      witnessUrl: witness.url,
      witness: witness.pool,
      async cleanup() {
        await own.cleanup();
        await witness.drop();
      },
    };
  } catch (err) {
    await witness.drop();
    throw err;
  }
}

type OwnLedger = Omit<LedgerServers, 'witnessUrl' | 'witness'>;

/**
 * ledger-restart: PostgreSQL of the drill's own. What survives a kill -9 is what was committed
 * (fsync is off, but the OS keeps the writes: a process crash, not a power cut).
 */
async function singleLedger(): Promise<OwnLedger> {
  const cluster = await startPostgresCluster();
  const pool = tolerantPool(cluster.url);
  return {
    url: cluster.url,
    pool,
    async restart() {
      await cluster.server.restart('kill');
      return "kill -9 and restart of the ledger's PostgreSQL";
    },
    async cleanup() {
      await pool.end();
      await cluster.cleanup();
    },
  };
}

/**
 * ledger-failover: a primary and a standby, which the replicas (and the drill's own pool) reach
 * through the pair's multi-host URL, `postgres://h:p1,h:p2/cronwarden?target_session_attrs=read-write`:
 * each new connection goes to whichever of the two is read-write, as libpq would.
 */
async function pairedLedger(asynchronous: boolean): Promise<OwnLedger> {
  const pair = await startPostgresPair({ synchronous: !asynchronous });
  const url = pair.multiHostUrl;
  const pool = tolerantPool(url);
  return {
    url,
    pool,
    async restart() {
      await pair.primary.server.restart('kill');
      return "kill -9 and restart of the ledger's primary (its standby reconnects)";
    },
    async failover(lagMs) {
      return pair.failover({ lagMs });
    },
    async cleanup() {
      await pool.end();
      await pair.cleanup();
    },
  };
}

async function startQueue(o: EnvironmentOptions, schedule: readonly FaultKind[]): Promise<QueueServer> {
  if (!schedule.includes('queue-restart') && !schedule.includes('queue-flush'))
    return { url: o.redisUrl, cleanup: async () => {} };
  // No persistence (no RDB, no AOF): a restart comes back empty, as a cache-configured Redis would.
  const redis = await startRedis();
  return {
    url: redis.url,
    restart: () => redis.restart('kill'),
    async flush() {
      const client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
      client.on('error', () => {});
      try {
        await client.flushall();
      } finally {
        client.disconnect();
      }
    },
    cleanup: () => redis.cleanup(),
  };
}

async function startLease(kind: BackendKind, sentinel: boolean): Promise<LeaseServers> {
  if (sentinel) {
    if (kind !== 'redis') throw new DrillError('redis-sentinel-failover needs the redis backend');
    const group = await startSentinelGroup();
    return {
      config: { kind: 'redis', url: group.url },
      restart: () => group.restartPrimary(),
      failover: (lagMs) => group.failover({ lagMs }),
      cleanup: () => group.cleanup(),
    };
  }
  switch (kind) {
    case 'redis': {
      const r = await startRedis();
      return {
        config: { kind: 'redis', url: r.url },
        restart: () => r.server.restart('kill'),
        cleanup: () => r.cleanup(),
      };
    }
    case 'postgres': {
      const p = await startPostgresCluster();
      return {
        config: { kind: 'postgres', url: p.url },
        restart: () => p.server.restart('kill'),
        cleanup: () => p.cleanup(),
      };
    }
    case 'etcd': {
      const e = await startEtcdCluster(3);
      let next = 0;
      return {
        config: { kind: 'etcd', endpoints: e.endpoints },
        restart: async (all) => {
          if (all) {
            await Promise.all(e.members.map((m) => m.kill()));
            await Promise.all(e.members.map((m) => m.start()));
          } else {
            await e.members[next++ % e.members.length]!.restart('kill');
          }
        },
        cleanup: () => e.cleanup(),
      };
    }
  }
}
