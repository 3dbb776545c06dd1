import { InvalidConfigError } from '../errors.js';
import { redactUrl } from '../redact.js';
import type { BackendConfig } from '../locks/create-backend.js';
import { readConfigFile } from './config-file.js';
import {
  endpointsMessage,
  envName,
  ETCD_SCHEMES,
  isUrl,
  type LogFormat,
  POSTGRES_SCHEMES,
  REDIS_SCHEMES,
  settingName,
  settings,
  splitEndpoints,
  urlMessage,
  type SettingDefinition,
  type SettingKey,
  type SettingValues,
} from './settings.js';

/**
 * A replica's configuration: command-line flags over environment variables over an optional JSON
 * file, each setting as defined once in settings.ts. Every value is validated here; a wrong or
 * missing one stops start-up with a message that names the setting (as the operator would type
 * it, or its key in the file) and what it accepts, never the value.
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
  /** A follower commits a slot the leader left uncommitted this long past due; 0: never. */
  standInGraceMs: number;
  /** How many followers stand in for each job; 0: every follower. */
  standInsPerJob: number;
  /** Sharded leadership: how many shards (1: one leader for every job). */
  shards: number;
  /** Finished runs older than this many days are deleted by the leader; 0 keeps everything. */
  retentionDays: number;
  /** The live ledger check: how often (0: off), over how long a window, at most how many runs. */
  ledgerCheck: { intervalMs: number; windowMs: number; maxRows: number };
  /** Start-up checks give up on a server after this. */
  connectTimeoutMs: number;
  logLevel: string;
  logFormat: LogFormat;
  admin: AdminConfig;
}

export interface AdminConfig {
  /** Interface the admin HTTP binds to; loopback unless configured. */
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** Bearer token for mutations; never logged or shown. Without one, mutations are refused. */
  token?: string;
  /** The API's reads need the token too (CRONWARDEN_ADMIN_READS_NEED_TOKEN). */
  readsNeedToken: boolean;
  /** The URL other replicas and the CLI use to reach this one (advertised in cw_members). */
  url?: string;
  /** Set to false (CRONWARDEN_ADMIN_ENABLED=false) to run without the admin HTTP. */
  enabled: boolean;
  /** Added to the admin thread's nice value (Linux); 0 leaves it at the process's priority. */
  niceness: number;
  /** /healthz and /readyz on a listener of the scheduler's thread; undefined: none. */
  probePort?: number;
  /** Its interface; undefined: the admin host. */
  probeHost?: string;
}

/** Flags as commander parses them: keyed like the settings (`--lease-ttl-ms` → leaseTtlMs). */
export type SettingFlags = Partial<Record<SettingKey, string>>;

/**
 * Read `keys` from flags, then the environment, then the config file (`--config` /
 * CRONWARDEN_CONFIG). An empty environment variable counts as unset, so it does not hide the
 * file's value. Defaults fill the rest; a required setting left unset is refused.
 */
export function loadSettings<K extends SettingKey>(
  keys: readonly K[],
  flags: SettingFlags,
  env: NodeJS.ProcessEnv = process.env,
): SettingValues<K> {
  const fromEnv = (key: SettingKey) => (env[envName(key)] === '' ? undefined : env[envName(key)]);
  const configPath = flags.config ?? fromEnv('config');
  const file = configPath === undefined ? {} : readConfigFile(configPath);
  const out: Record<string, unknown> = {};
  for (const key of keys) {
    const def: SettingDefinition = settings[key];
    const fromFlag = def.arg ? flags[key] : undefined;
    const raw = fromFlag ?? fromEnv(key) ?? file[key];
    const name =
      fromFlag === undefined && fromEnv(key) === undefined && key in file
        ? `${key} in ${configPath}`
        : settingName(key);
    if (raw === undefined) {
      if (def.required) throw new InvalidConfigError(name, `is required${requiredHint(key)}`);
      out[key] = def.default;
      continue;
    }
    const parsed = def.schema.safeParse(raw);
    // Never echo the value: it may be a secret (the admin token, a URL with a password).
    if (!parsed.success) throw new InvalidConfigError(name, parsed.error.issues[0]?.message ?? 'is not valid');
    out[key] = parsed.data;
  }
  return out as SettingValues<K>;
}

/** What a required setting accepts, for "is required (…)". */
function requiredHint(key: SettingKey): string {
  const probe = settings[key].schema.safeParse('');
  const message = probe.error?.issues[0]?.message;
  return message ? ` (${message})` : '';
}

const replicaKeys = [
  'backend',
  'backendUrl',
  'etcdEndpoints',
  'databaseUrl',
  'redisUrl',
  'jobs',
  'replicaId',
  'namespace',
  'schema',
  'leaseTtlMs',
  'concurrency',
  'workerLockMs',
  'shutdownGraceMs',
  'standInGraceMs',
  'standInsPerJob',
  'shards',
  'retentionDays',
  'ledgerCheckIntervalMs',
  'ledgerCheckWindowMs',
  'ledgerCheckMaxRows',
  'connectTimeoutMs',
  'logLevel',
  'logFormat',
  'adminHost',
  'adminPort',
  'adminUrl',
  'adminToken',
  'adminReadsNeedToken',
  'adminEnabled',
  'adminNiceness',
  'probePort',
  'probeHost',
] as const satisfies readonly SettingKey[];

export function loadReplicaConfig(flags: SettingFlags, env: NodeJS.ProcessEnv = process.env): ReplicaConfig {
  const c = loadSettings(replicaKeys, flags, env);
  return {
    backend: backendConfig(c),
    databaseUrl: c.databaseUrl,
    redisUrl: c.redisUrl,
    jobsModule: c.jobs,
    replicaId: c.replicaId,
    namespace: c.namespace,
    schema: c.schema,
    ttlMs: c.leaseTtlMs,
    concurrency: c.concurrency,
    workerLockMs: c.workerLockMs,
    shutdownGraceMs: c.shutdownGraceMs,
    standInGraceMs: c.standInGraceMs,
    standInsPerJob: c.standInsPerJob,
    shards: c.shards,
    retentionDays: c.retentionDays,
    ledgerCheck: {
      intervalMs: c.ledgerCheckIntervalMs,
      windowMs: c.ledgerCheckWindowMs,
      maxRows: c.ledgerCheckMaxRows,
    },
    connectTimeoutMs: c.connectTimeoutMs,
    logLevel: c.logLevel,
    logFormat: c.logFormat,
    admin: adminConfig(c),
  };
}

/** The admin settings; a probe listener needs the admin HTTP and a port of its own. */
function adminConfig(
  c: SettingValues<
    | 'adminHost'
    | 'adminPort'
    | 'adminToken'
    | 'adminReadsNeedToken'
    | 'adminUrl'
    | 'adminEnabled'
    | 'adminNiceness'
    | 'probePort'
    | 'probeHost'
  >,
): AdminConfig {
  if (c.probePort !== undefined && !c.adminEnabled)
    throw new InvalidConfigError(
      settingName('probePort'),
      `is served with the admin HTTP, which ${envName('adminEnabled')}=false turns off`,
    );
  if (c.probePort !== undefined && c.probePort !== 0 && c.probePort === c.adminPort)
    throw new InvalidConfigError(settingName('probePort'), `must differ from ${settingName('adminPort')}`);
  if (c.probePort === undefined && c.probeHost !== undefined)
    throw new InvalidConfigError(settingName('probeHost'), `is used only with ${settingName('probePort')}`);
  if (c.adminReadsNeedToken && c.adminToken === undefined)
    throw new InvalidConfigError(
      settingName('adminReadsNeedToken'),
      `needs ${settingName('adminToken')}: without a token no one could read`,
    );
  return {
    host: c.adminHost,
    port: c.adminPort,
    token: c.adminToken,
    readsNeedToken: c.adminReadsNeedToken,
    url: c.adminUrl,
    enabled: c.adminEnabled,
    niceness: c.adminNiceness,
    probePort: c.probePort,
    probeHost: c.probeHost,
  };
}

/** The configuration as it may be logged or shown: passwords and the admin token masked. */
export function describeConfig(c: ReplicaConfig): Record<string, unknown> {
  const backend =
    c.backend.kind === 'etcd'
      ? { kind: 'etcd', endpoints: c.backend.endpoints.map(redactUrl) }
      : 'url' in c.backend
        ? { kind: c.backend.kind, url: redactUrl(c.backend.url) }
        : c.backend;
  return {
    ...c,
    backend,
    databaseUrl: redactUrl(c.databaseUrl),
    redisUrl: redactUrl(c.redisUrl),
    admin: { ...c.admin, token: c.admin.token ? '*****' : undefined },
  };
}

/**
 * The lease backend: its own URL, or by default the database (postgres) or the Redis (redis).
 * The URL's scheme must fit the backend: an http:// URL for redis would never connect.
 */
function backendConfig(
  c: SettingValues<'backend' | 'backendUrl' | 'etcdEndpoints' | 'databaseUrl' | 'redisUrl'>,
): BackendConfig {
  const backendUrl = (schemes: readonly string[]) => {
    if (c.backendUrl !== undefined && !isUrl(c.backendUrl, schemes))
      throw new InvalidConfigError(settingName('backendUrl'), `${urlMessage(schemes)} for the ${c.backend} backend`);
    return c.backendUrl;
  };
  switch (c.backend) {
    case 'etcd': {
      if (c.etcdEndpoints === undefined && c.backendUrl !== undefined) {
        const endpoints = splitEndpoints(c.backendUrl);
        if (endpoints.length === 0 || !endpoints.every((e) => isUrl(e, ETCD_SCHEMES)))
          throw new InvalidConfigError(settingName('backendUrl'), `${endpointsMessage} for the etcd backend`);
        return { kind: 'etcd', endpoints };
      }
      if (c.etcdEndpoints === undefined)
        throw new InvalidConfigError(
          settingName('etcdEndpoints'),
          'is required for the etcd backend (comma-separated http:// URLs)',
        );
      return { kind: 'etcd', endpoints: splitEndpoints(c.etcdEndpoints) };
    }
    case 'redis':
      // Through Sentinel: redis-sentinel://host:port,host:port/name (parsed by create-backend.ts).
      if (c.backendUrl?.startsWith('redis-sentinel://')) return { kind: 'redis', url: c.backendUrl };
      return { kind: 'redis', url: backendUrl(REDIS_SCHEMES) ?? c.redisUrl };
    case 'postgres':
      return { kind: 'postgres', url: backendUrl(POSTGRES_SCHEMES) ?? c.databaseUrl };
    case 'memory':
      if (c.backendUrl !== undefined)
        throw new InvalidConfigError(settingName('backendUrl'), 'is not used by the memory backend (it has no server)');
      return { kind: 'memory' };
  }
}
