import type pg from 'pg';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { JobDefinition } from '../jobs/define-job.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import type { LeaseBackend } from '../locks/lease.js';
import type { ElectorOptions } from '../scheduler/election/elector-options.js';

export interface ReplicaOptions {
  /** Unique per process. Default: host-pid-random. */
  replicaId?: string;
  /**
   * Separates deployments sharing one Redis/Postgres/etcd: queue, lease and election names carry
   * it, and the ledger lives in its own schema. Default "default".
   */
  namespace?: string;
  /**
   * PostgreSQL schema holding this deployment's ledger (src/db/tables.ts). Default: "cronwarden"
   * for the default namespace, else "cronwarden_<namespace>". Migrate it first (`cronwarden
   * migrate` with the same namespace or schema); a schema holding another namespace is refused.
   */
  schema?: string;
  backend: LeaseBackend;
  /**
   * PostgreSQL holding the ledger (migrated: see `cronwarden migrate`): a URL, for a pool the
   * replica makes and ends, or a pg.Pool of yours, which it uses and leaves open on stop().
   */
  databaseUrl?: string;
  pool?: pg.Pool;
  /**
   * Redis for BullMQ delivery: a URL, or an ioredis client of yours (left open on stop(); the
   * worker's blocking connections are duplicates of it).
   */
  redisUrl?: string;
  redis?: Redis;
  jobs: JobDefinition[] | JobRegistry;
  /**
   * The lease's timings: `ttlMs` (default 10 s, from 1 s to 10 min, as replica-defaults.ts defines
   * it for the CLI too); renew, retry and safety margin are derived from it unless given.
   */
  election?: Partial<Omit<ElectorOptions, 'leaseName' | 'replicaId'>>;
  worker?: { enabled?: boolean; concurrency?: number; lockDurationMs?: number; stalledIntervalMs?: number };
  /**
   * The admin HTTP (console, JSON API, /metrics, /healthz) that `cronwarden start` serves, and
   * this replica's row in cw_members with the URL it advertises. Omit or `false` for neither.
   */
  admin?: ReplicaAdminOptions | false;
  /** Advertised in cw_members (the admin API's members view). Default: this package's version. */
  version?: string;
  /**
   * How long running handlers may finish on shutdown before their signal aborts. Default 10 s.
   * A run stopped this way is recorded as interrupted and handed to another replica (no retry is
   * used up); a handler that ignores its signal is abandoned about a second later, so stop()
   * returns within roughly the grace period plus a few seconds.
   */
  shutdownGraceMs?: number;
  /**
   * The most a follower waits for the leader to commit a due slot before it commits it itself (a
   * crashed leader then costs this, not a lease TTL), under the same unique key, so a slot stays
   * once (src/scheduler/stand-in/stand-in.ts). It waits less once it has seen the leader commit
   * sooner: twice the leader's worst lateness of the last minute + 20 ms, at least 50 ms
   * (stand-in-grace.ts). Default 500 ms; 0 turns stand-ins off.
   */
  standInGraceMs?: number;
  /**
   * How many followers stand in for each job, chosen per job by a rendezvous hash over the live
   * members' rows, so a large cluster reads the ledger a couple of times per slot, not once per
   * follower. Default 2; 0: every follower.
   */
  standInsPerJob?: number;
  /**
   * Sharded leadership: each job belongs to one of this many shards by a stable hash of its name;
   * each shard has its own lease and fence, and the replicas spread the shards so none leads more
   * than ceil(shards / live replicas). Default 1: one leader fires every job. Every replica of a
   * deployment must use the same count.
   */
  shards?: number;
  /**
   * The leader deletes finished runs (and their attempts) older than this. Default 14 days; 0
   * keeps everything.
   */
  retentionMs?: number;
  /**
   * The leader's re-delivery sweep: a handed-over run still active after `checkAfterMs` (default
   * 30 s) is looked up in the queue; lost ones are handed over again, ones the queue failed
   * without an outcome in the ledger are settled failed. Checked every `intervalMs` (default 5 s).
   */
  redelivery?: { checkAfterMs?: number; intervalMs?: number; batchSize?: number };
  /**
   * The leader settles `cancelled` the active runs of a job no live replica defines (removed from
   * the code), looking every `intervalMs` (default 30 s); a member seen within `liveWithinMs`
   * (default 60 s) counts as live.
   */
  removedJobs?: { intervalMs?: number; liveWithinMs?: number };
  /**
   * The live ledger check (docs/operating/ledger-check.md): every `intervalMs` (default 60 s; 0:
   * off) the leader checks the runs committed in the last `windowMs` (default 15 min), at most the
   * newest `maxRows` (default 100,000), for I1, I3, I6 and I7, and the replicas' claims the ledger lost.
   */
  ledgerCheck?: { intervalMs?: number; windowMs?: number; maxRows?: number };
  /**
   * Time for the scheduler. Default: the ledger's PostgreSQL clock (see LedgerClock), so skew or
   * a jump of this host's wall clock cannot make it fire early, late or twice.
   */
  clock?: Clock;
  logger?: Logger;
}

export interface ReplicaAdminOptions {
  /** Interface to bind; loopback unless you mean it. Default 127.0.0.1. */
  host?: string;
  /** 0 picks a free port. Default 8080. */
  port?: number;
  /** Bearer token for mutations; without one, trigger/pause/resume/resign are refused. */
  token?: string;
  /**
   * The API's reads (/api/*) need the token too: set it when the admin port is reachable beyond
   * this host, since runs carry their handlers' error text. Default false (reads are open).
   */
  readsNeedToken?: boolean;
  /** The URL other replicas and the CLI use to reach this one. Default: the bound address. */
  url?: string;
  /** More host names the server answers to (a Service name, say). */
  allowedHosts?: string[];
  /**
   * Serve it from a worker thread of its own (the default, when the ledger is given as a URL), so
   * a flood of admin connections costs that thread's event loop and not the scheduler's.
   */
  thread?: boolean;
  /**
   * Added to that thread's nice value (Linux; at most 19), so under a flood the scheduler's thread
   * wins the cores. Default 10; 0 leaves it at the process's priority.
   */
  niceness?: number;
  /**
   * A second listener with only /healthz and /readyz, answered by the scheduler's own thread, so
   * a flood of admin connections cannot delay the probes. Omit for none.
   */
  probe?: { host?: string; port: number };
}
