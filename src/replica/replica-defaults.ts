/**
 * Every default and valid range of a replica's settings, defined once, and the one step that fills
 * and checks a Replica's options (River's Config.WithDefaults + validate, client-go's checks in
 * NewLeaderElector). `cronwarden start` shows these defaults and refuses values outside these
 * ranges as it parses its flags (config/settings.ts), then hands what it read to the same step.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { DEFAULT_NICENESS } from '../admin/admin-thread.js';
import { DEFAULT_NAMESPACE, resolveSchema } from '../db/tables.js';
import { InvalidArgumentError, InvalidConfigError } from '../errors.js';
import { DEFAULT_LEASE_TTL_MS } from '../ledger/commit-stamps.js';
import { MAX_SHARDS, validShardCount } from '../scheduler/shards/shard-map.js';
import type { ReplicaAdminOptions, ReplicaOptions } from './replica-options.js';

/** A whole-number setting: its default and the range both the library and the CLI accept. */
export interface BoundedSetting {
  readonly default: number;
  readonly min: number;
  readonly max: number;
}

/** The CLI takes the retention in days, the library in ms. */
export const DAY_MS = 24 * 3600 * 1000;

/** Keyed by the library's option names; the CLI's names are in config/settings.ts. */
export const replicaSettings = {
  /** election.ttlMs (the CLI's leaseTtlMs). */
  ttlMs: { default: DEFAULT_LEASE_TTL_MS, min: 1000, max: 600_000 },
  /** worker.concurrency. */
  concurrency: { default: 10, min: 1, max: 1000 },
  /** worker.lockDurationMs (the CLI's workerLockMs); BullMQ's own default. */
  lockDurationMs: { default: 30_000, min: 1000, max: 600_000 },
  shutdownGraceMs: { default: 10_000, min: 0, max: 600_000 },
  /** The most a follower waits; it learns a shorter grace from the leader (stand-in-grace.ts). */
  standInGraceMs: { default: 500, min: 0, max: 60_000 },
  /** Two, so one dead follower leaves another. */
  standInsPerJob: { default: 2, min: 0, max: 1000 },
  shards: { default: 1, min: 1, max: MAX_SHARDS },
  /** In days as the CLI takes it; the library's retentionMs is this times a day. */
  retentionDays: { default: 14, min: 0, max: 3650 },
  /** admin.port; 0 picks a free port. */
  adminPort: { default: 8080, min: 0, max: 65535 },
  /** admin.niceness (the admin thread's own). */
  adminNiceness: { default: DEFAULT_NICENESS, min: 0, max: 19 },
  /** ledgerCheck.intervalMs; 0 turns the live ledger check off. */
  ledgerCheckIntervalMs: { default: 60_000, min: 0, max: 3_600_000 },
  /** ledgerCheck.windowMs. */
  ledgerCheckWindowMs: { default: 900_000, min: 10_000, max: 86_400_000 },
  /** ledgerCheck.maxRows. */
  ledgerCheckMaxRows: { default: 100_000, min: 1000, max: 10_000_000 },
} as const satisfies Record<string, BoundedSetting>;

/** The library takes the retention in ms. */
const retentionMs: BoundedSetting = {
  default: replicaSettings.retentionDays.default * DAY_MS,
  min: replicaSettings.retentionDays.min * DAY_MS,
  max: replicaSettings.retentionDays.max * DAY_MS,
};

/** The settings that are not numbers. */
export const replicaDefaults = {
  namespace: DEFAULT_NAMESPACE,
  /** admin.host: loopback unless configured. */
  adminHost: '127.0.0.1',
  /** admin.readsNeedToken: reads are open unless configured. */
  adminReadsNeedToken: false,
} as const;

/** This package's version, advertised in cw_members. */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

export type ResolvedAdminOptions = ReplicaAdminOptions &
  Required<Pick<ReplicaAdminOptions, 'host' | 'port' | 'niceness' | 'readsNeedToken'>>;

/** A Replica's options with every default filled and every value checked. */
export interface ResolvedReplicaOptions extends Omit<
  ReplicaOptions,
  'election' | 'worker' | 'admin' | 'logger' | 'redelivery' | 'removedJobs' | 'ledgerCheck'
> {
  replicaId: string;
  namespace: string;
  schema: string;
  election: NonNullable<ReplicaOptions['election']> & { ttlMs: number };
  worker: NonNullable<ReplicaOptions['worker']> & { enabled: boolean; concurrency: number; lockDurationMs: number };
  /** Undefined: no admin HTTP. */
  admin: ResolvedAdminOptions | undefined;
  version: string;
  shutdownGraceMs: number;
  standInGraceMs: number;
  standInsPerJob: number;
  shards: number;
  retentionMs: number;
  redelivery: NonNullable<ReplicaOptions['redelivery']>;
  removedJobs: NonNullable<ReplicaOptions['removedJobs']>;
  ledgerCheck: { intervalMs: number; windowMs: number; maxRows: number };
  logger: NonNullable<ReplicaOptions['logger']>;
}

/** A replica id when none is given: the host, the process and a few random characters. */
export function defaultReplicaId(): string {
  return `${hostname()}-${process.pid}-${randomUUID().slice(0, 6)}`;
}

/** Fill every default and check every value; an InvalidConfigError names the option. */
export function resolveReplicaOptions(o: ReplicaOptions): ResolvedReplicaOptions {
  requireConnections(o);
  const s = replicaSettings;
  const namespace = o.namespace ?? replicaDefaults.namespace;
  return {
    ...o,
    replicaId: o.replicaId ?? defaultReplicaId(),
    namespace,
    schema: resolveSchema({ schema: o.schema, namespace }),
    election: { ...o.election, ttlMs: bounded('election.ttlMs', o.election?.ttlMs, s.ttlMs) },
    worker: {
      ...o.worker,
      enabled: o.worker?.enabled ?? true,
      concurrency: bounded('worker.concurrency', o.worker?.concurrency, s.concurrency),
      lockDurationMs: bounded('worker.lockDurationMs', o.worker?.lockDurationMs, s.lockDurationMs),
    },
    admin: o.admin ? resolveAdmin(o.admin) : undefined,
    version: o.version ?? PACKAGE_VERSION,
    shutdownGraceMs: bounded('shutdownGraceMs', o.shutdownGraceMs, s.shutdownGraceMs),
    standInGraceMs: bounded('standInGraceMs', o.standInGraceMs, s.standInGraceMs),
    standInsPerJob: bounded('standInsPerJob', o.standInsPerJob, s.standInsPerJob),
    shards: validShardCount(o.shards ?? s.shards.default),
    retentionMs: bounded('retentionMs', o.retentionMs, retentionMs),
    redelivery: o.redelivery ?? {},
    removedJobs: o.removedJobs ?? {},
    ledgerCheck: {
      intervalMs: bounded('ledgerCheck.intervalMs', o.ledgerCheck?.intervalMs, s.ledgerCheckIntervalMs),
      windowMs: bounded('ledgerCheck.windowMs', o.ledgerCheck?.windowMs, s.ledgerCheckWindowMs),
      maxRows: bounded('ledgerCheck.maxRows', o.ledgerCheck?.maxRows, s.ledgerCheckMaxRows),
    },
    logger: o.logger ?? pino({ name: 'cronwarden' }),
  };
}

function resolveAdmin(a: ReplicaAdminOptions): ResolvedAdminOptions {
  if (a.readsNeedToken && !a.token)
    throw new InvalidConfigError('admin.readsNeedToken', 'needs admin.token: without a token no one could read');
  return {
    ...a,
    host: a.host ?? replicaDefaults.adminHost,
    readsNeedToken: a.readsNeedToken ?? replicaDefaults.adminReadsNeedToken,
    port: bounded('admin.port', a.port, replicaSettings.adminPort),
    niceness: bounded('admin.niceness', a.niceness, replicaSettings.adminNiceness),
  };
}

/** `value`, or the default when it is undefined; refused outside the setting's range. */
function bounded(name: string, value: number | undefined, setting: BoundedSetting): number {
  if (value === undefined) return setting.default;
  if (!Number.isInteger(value) || value < setting.min || value > setting.max)
    throw new InvalidConfigError(name, `must be a whole number from ${setting.min} to ${setting.max}, got ${value}`);
  return value;
}

/** A replica needs a lease backend, the ledger's PostgreSQL and Redis (given as URLs or clients). */
function requireConnections(o: ReplicaOptions): void {
  if (!o.backend) throw new InvalidArgumentError('a lease backend is required');
  if (!o.databaseUrl && !o.pool)
    throw new InvalidArgumentError('databaseUrl or pool is required (the ledger lives in PostgreSQL)');
  if (!o.redisUrl && !o.redis)
    throw new InvalidArgumentError('redisUrl or redis is required (runs are delivered through BullMQ)');
}
