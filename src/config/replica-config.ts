import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { InvalidConfigError } from '../errors.js';
import type { BackendConfig } from '../locks/create-backend.js';

/**
 * A replica's configuration: command-line flags over environment variables over an optional JSON
 * file. Every value is validated here; a wrong or missing one stops start-up with a message that
 * names the setting (as the operator would type it) and what it accepts.
 */
export interface ReplicaConfig {
  backend: BackendConfig;
  databaseUrl: string;
  redisUrl: string;
  jobsModule: string;
  replicaId?: string;
  namespace: string;
  /** PostgreSQL schema of the ledger; undefined: the namespace's default (src/db/tables.ts). */
  schema?: string;
  ttlMs: number;
  concurrency: number;
  /** BullMQ lock on a running run: how soon a dead or frozen worker's run is re-delivered. */
  workerLockMs: number;
  shutdownGraceMs: number;
  /** Finished runs older than this many days are deleted by the leader; 0 keeps everything. */
  retentionDays: number;
  logLevel: string;
  admin: AdminConfig;
}

export interface AdminConfig {
  /** Interface the admin HTTP binds to; loopback unless configured. */
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** Bearer token for mutations; never logged or shown. Without one, mutations are refused. */
  token?: string;
  /** The URL other replicas and the CLI use to reach this one (advertised in cw_members). */
  url?: string;
  /** Set to false (CRONWARDEN_ADMIN_ENABLED=false) to run without the admin HTTP. */
  enabled: boolean;
}

/** Where each setting comes from, for error messages. */
const names = {
  backend: 'CRONWARDEN_BACKEND (--backend)',
  backendUrl: 'CRONWARDEN_BACKEND_URL (--backend-url)',
  etcdEndpoints: 'CRONWARDEN_ETCD_ENDPOINTS (--etcd-endpoints)',
  databaseUrl: 'CRONWARDEN_DATABASE_URL (--database-url)',
  redisUrl: 'CRONWARDEN_REDIS_URL (--redis-url)',
  jobsModule: 'CRONWARDEN_JOBS (--jobs)',
  replicaId: 'CRONWARDEN_REPLICA_ID (--replica-id)',
  namespace: 'CRONWARDEN_NAMESPACE (--namespace)',
  schema: 'CRONWARDEN_SCHEMA (--schema)',
  ttlMs: 'CRONWARDEN_LEASE_TTL_MS (--lease-ttl-ms)',
  concurrency: 'CRONWARDEN_CONCURRENCY (--concurrency)',
  workerLockMs: 'CRONWARDEN_WORKER_LOCK_MS (--worker-lock-ms)',
  shutdownGraceMs: 'CRONWARDEN_SHUTDOWN_GRACE_MS (--shutdown-grace-ms)',
  retentionDays: 'CRONWARDEN_RETENTION_DAYS (--retention-days)',
  logLevel: 'CRONWARDEN_LOG_LEVEL (--log-level)',
  configFile: 'CRONWARDEN_CONFIG (--config)',
  adminHost: 'CRONWARDEN_ADMIN_HOST (--admin-host)',
  adminPort: 'CRONWARDEN_ADMIN_PORT (--admin-port)',
  adminToken: 'CRONWARDEN_ADMIN_TOKEN',
  adminUrl: 'CRONWARDEN_ADMIN_URL (--admin-url)',
  adminEnabled: 'CRONWARDEN_ADMIN_ENABLED',
} as const;
type Key = keyof typeof names;

const url = (schemes: string[]) =>
  z.string().refine((v) => {
    try {
      return schemes.includes(new URL(v).protocol.replace(':', ''));
    } catch {
      return false;
    }
  }, `must be a URL starting with ${schemes.map((s) => `${s}://`).join(' or ')}`);
const int = (min: number, max: number) => z.coerce.number().int('must be a whole number').min(min, `must be at least ${min}`).max(max, `must be at most ${max}`);

const schema = z.object({
  backend: z.enum(['etcd', 'redis', 'postgres', 'memory'], 'must be one of etcd, redis, postgres, memory'),
  backendUrl: z.string().optional(),
  etcdEndpoints: z.string().optional(),
  databaseUrl: url(['postgres', 'postgresql']),
  redisUrl: url(['redis', 'rediss']),
  jobsModule: z.string().min(1, 'must name a module that exports job definitions'),
  replicaId: z.string().min(1).max(200).optional(),
  namespace: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'may contain only letters, digits, _ and - (at most 64)').default('default'),
  schema: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'may contain only lower-case letters, digits and _ (at most 63), not starting with a digit').optional(),
  ttlMs: int(1000, 600_000).default(10_000),
  concurrency: int(1, 1000).default(10),
  workerLockMs: int(1000, 600_000).default(30_000),
  shutdownGraceMs: int(0, 600_000).default(10_000),
  retentionDays: int(0, 3650).default(14),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'must be one of fatal, error, warn, info, debug, trace, silent').default('info'),
  adminHost: z.string().regex(/^[A-Za-z0-9.:-]{1,253}$/, 'must be a host name or IP address, e.g. 127.0.0.1 or 0.0.0.0').default('127.0.0.1'),
  adminPort: int(0, 65535).default(8080),
  adminToken: z.string().min(16, 'must be at least 16 characters (use e.g. `openssl rand -hex 32`)').optional(),
  adminUrl: url(['http', 'https']).optional(),
  adminEnabled: z.enum(['true', 'false'], 'must be true or false').default('true'),
});

const envVars: Record<Exclude<Key, 'configFile'>, string> = {
  backend: 'CRONWARDEN_BACKEND',
  backendUrl: 'CRONWARDEN_BACKEND_URL',
  etcdEndpoints: 'CRONWARDEN_ETCD_ENDPOINTS',
  databaseUrl: 'CRONWARDEN_DATABASE_URL',
  redisUrl: 'CRONWARDEN_REDIS_URL',
  jobsModule: 'CRONWARDEN_JOBS',
  replicaId: 'CRONWARDEN_REPLICA_ID',
  namespace: 'CRONWARDEN_NAMESPACE',
  schema: 'CRONWARDEN_SCHEMA',
  ttlMs: 'CRONWARDEN_LEASE_TTL_MS',
  concurrency: 'CRONWARDEN_CONCURRENCY',
  workerLockMs: 'CRONWARDEN_WORKER_LOCK_MS',
  shutdownGraceMs: 'CRONWARDEN_SHUTDOWN_GRACE_MS',
  retentionDays: 'CRONWARDEN_RETENTION_DAYS',
  logLevel: 'CRONWARDEN_LOG_LEVEL',
  adminHost: 'CRONWARDEN_ADMIN_HOST',
  adminPort: 'CRONWARDEN_ADMIN_PORT',
  adminToken: 'CRONWARDEN_ADMIN_TOKEN',
  adminUrl: 'CRONWARDEN_ADMIN_URL',
  adminEnabled: 'CRONWARDEN_ADMIN_ENABLED',
};

export function loadReplicaConfig(flags: Partial<Record<Key, string>>, env: NodeJS.ProcessEnv = process.env): ReplicaConfig {
  const file = flags.configFile ?? env.CRONWARDEN_CONFIG;
  let fromFile: Record<string, unknown> = {};
  if (file) {
    try {
      fromFile = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    } catch (err) {
      throw new InvalidConfigError(names.configFile, `cannot read JSON config "${file}": ${(err as Error).message}`);
    }
  }
  const merged: Record<string, unknown> = {};
  for (const key of Object.keys(envVars) as (keyof typeof envVars)[]) {
    const raw = flags[key] ?? env[envVars[key]] ?? fromFile[key];
    const value = typeof raw === 'number' || typeof raw === 'boolean' ? String(raw) : raw;
    if (value !== undefined && value !== '') merged[key] = value;
  }
  const parsed = schema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0]) as Key;
    // Never echo a value: it may be a secret (the admin token, a URL with a password).
    const message = merged[key] === undefined ? `is required (${issue.message})` : issue.message;
    throw new InvalidConfigError(names[key] ?? key, message);
  }
  const c = parsed.data;
  return {
    backend: backendConfig(c.backend, c.backendUrl, c.etcdEndpoints, c.databaseUrl, c.redisUrl),
    databaseUrl: c.databaseUrl,
    redisUrl: c.redisUrl,
    jobsModule: c.jobsModule,
    replicaId: c.replicaId,
    namespace: c.namespace,
    schema: c.schema,
    ttlMs: c.ttlMs,
    concurrency: c.concurrency,
    workerLockMs: c.workerLockMs,
    shutdownGraceMs: c.shutdownGraceMs,
    retentionDays: c.retentionDays,
    logLevel: c.logLevel,
    admin: { host: c.adminHost, port: c.adminPort, token: c.adminToken, url: c.adminUrl, enabled: c.adminEnabled === 'true' },
  };
}

/** The configuration as it may be logged or shown: passwords and the admin token masked. */
export function describeConfig(c: ReplicaConfig): Record<string, unknown> {
  const backend = c.backend.kind === 'etcd' ? { kind: 'etcd', endpoints: c.backend.endpoints.map(redactUrl) } : 'url' in c.backend ? { kind: c.backend.kind, url: redactUrl(c.backend.url) } : c.backend;
  return {
    ...c,
    backend,
    databaseUrl: redactUrl(c.databaseUrl),
    redisUrl: redactUrl(c.redisUrl),
    admin: { ...c.admin, token: c.admin.token ? '*****' : undefined },
  };
}

/** The lease backend: its own URL, or by default the database (postgres) or the Redis (redis). */
function backendConfig(kind: string, backendUrl: string | undefined, etcd: string | undefined, databaseUrl: string, redisUrl: string): BackendConfig {
  switch (kind) {
    case 'etcd': {
      const endpoints = (etcd ?? backendUrl ?? '').split(',').map((s) => s.trim()).filter(Boolean);
      if (endpoints.length === 0) throw new InvalidConfigError(names.etcdEndpoints, 'is required for the etcd backend (comma-separated http:// URLs)');
      return { kind: 'etcd', endpoints };
    }
    case 'redis':
      return { kind: 'redis', url: backendUrl ?? redisUrl };
    case 'postgres':
      return { kind: 'postgres', url: backendUrl ?? databaseUrl };
    default:
      return { kind: 'memory' };
  }
}

/** A URL with its password replaced, for logs and status output. */
export function redactUrl(value: string): string {
  try {
    const u = new URL(value);
    if (u.password) u.password = '*****';
    return u.toString();
  } catch {
    return value;
  }
}
