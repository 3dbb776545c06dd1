import { z } from 'zod';
import { parseLedgerUrl } from '../db/ledger-url.js';
import { DEFAULT_CONNECT_TIMEOUT_MS } from '../db/migrate.js';
import { replicaDefaults, replicaSettings, type BoundedSetting } from '../replica/replica-defaults.js';

/**
 * Every setting of `cronwarden start` and `cronwarden migrate`, defined once. The key is the config
 * file key; the flag is its kebab-case (`leaseTtlMs` → `--lease-ttl-ms`), the environment variable
 * `CRONWARDEN_` + its SNAKE_CASE (`CRONWARDEN_LEASE_TTL_MS`). Commander options, environment and
 * file parsing, defaults, the names in error messages and the README table are all derived from
 * this table (see replica-config.ts and settingsTable()). A setting the library has too takes its
 * default and range from the library's definition (replica/replica-defaults.ts), never its own.
 */
export interface SettingDefinition {
  /** Validates a value from a flag, the environment (always text) or the config file (JSON). */
  schema: z.ZodType;
  /** The flag's argument name (`--lease-ttl-ms <ms>`); none for secrets, which flags would show in `ps`. */
  arg?: string;
  required?: true;
  default?: string | number | boolean;
  /** One line for --help and the README. */
  description: string;
  /** More for the README only. */
  details?: string;
  /** Never taken from a flag; masked wherever the configuration is shown. */
  secret?: true;
  /** Not a config file key (the file's own path). */
  notInFile?: true;
  /** A file key this setting had before; named in the message that refuses it. */
  formerFileKey?: string;
}

const MESSAGE = {
  text: 'must be a string (in the config file: in double quotes)',
  int: 'must be a whole number',
  bool: 'must be true or false',
};

const text = () => z.string({ error: MESSAGE.text });

/** A URL whose scheme is one of `schemes`. */
export function isUrl(value: string, schemes: readonly string[]): boolean {
  try {
    const u = new URL(value);
    return schemes.includes(u.protocol.slice(0, -1)) && u.hostname !== '';
  } catch {
    return false;
  }
}

const schemeList = (schemes: readonly string[]) => schemes.map((s) => `${s}://`).join(' or ');
export const urlMessage = (schemes: readonly string[]) => `must be a URL starting with ${schemeList(schemes)}`;
const url = (schemes: readonly string[]) => text().refine((v) => isUrl(v, schemes), urlMessage(schemes));

export const POSTGRES_SCHEMES = ['postgres', 'postgresql'] as const;

/**
 * The ledger's URL: one host, or libpq's several (`postgres://h1:5432,h2:5433/db?target_session_attrs=read-write`,
 * see db/ledger-url.ts). A URL of the wrong shape gets the usual message; a multi-host one, what is wrong with it.
 */
const ledgerUrl = () =>
  text().superRefine((v, ctx) => {
    const multiHost = /^[a-z]+:\/\/(?:[^@/?#]*@)?[^/?#]*,/i.test(v.trim());
    if (!multiHost && !isUrl(v, POSTGRES_SCHEMES))
      return void ctx.addIssue({ code: 'custom', message: urlMessage(POSTGRES_SCHEMES) });
    try {
      parseLedgerUrl(v);
    } catch (err) {
      const message = (err as Error).message.replace(/^invalid ledger URL: /, '');
      ctx.addIssue({
        code: 'custom',
        message: multiHost && message.startsWith('expected') ? urlMessage(POSTGRES_SCHEMES) : message,
      });
    }
  });
export const REDIS_SCHEMES = ['redis', 'rediss'] as const;
export const ETCD_SCHEMES = ['http', 'https'] as const;

/** Comma-separated etcd client URLs; empty entries are dropped. */
export function splitEndpoints(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}
export const endpointsMessage = `must be comma-separated URLs starting with ${schemeList(ETCD_SCHEMES)}`;

/**
 * A whole number from text ("8080") or a JSON number. Anything else (null, [], " ", true, "8e3")
 * is refused rather than coerced: Number(null), Number([]) and Number(" ") are all 0, which for
 * the admin port means "any free port".
 */
const int = (min: number, max: number) =>
  z.preprocess(
    (v) => (typeof v === 'string' && /^\s*-?\d+\s*$/.test(v) ? Number(v) : v),
    z
      .number({ error: MESSAGE.int })
      .int(MESSAGE.int)
      .min(min, `must be at least ${min}`)
      .max(max, `must be at most ${max}`),
  );

/** A whole-number setting the library has too: its range and default, as the library defines them. */
const bounded = (setting: BoundedSetting) => ({ schema: int(setting.min, setting.max), default: setting.default });

/** A TCP port; 0 picks a free one. */
const port = () => int(replicaSettings.adminPort.min, replicaSettings.adminPort.max);

const hostName = () =>
  text().regex(/^[A-Za-z0-9.:-]{1,253}$/, 'must be a host name or IP address, e.g. 127.0.0.1 or 0.0.0.0');

const bool = () =>
  z.preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean({ error: MESSAGE.bool }));

const oneOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be one of ${values.join(', ')}` });

export const backendKindValues = ['etcd', 'redis', 'postgres', 'memory'] as const;
export const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export const logFormats = ['json', 'pretty'] as const;
export type LogFormat = (typeof logFormats)[number];

/** What the admin HTTP compares tokens against (see admin/auth.ts): a header value, trimmed. */
const TOKEN_MIN = 16;

export const settings = {
  config: {
    schema: text().min(1, 'must name a JSON file'),
    arg: 'file',
    notInFile: true,
    description: 'JSON file of settings, keyed like the flags in camelCase (leaseTtlMs, adminToken, …)',
    details: 'Unknown keys are refused; tokens and URLs must be JSON strings',
  },
  backend: {
    schema: oneOf(backendKindValues),
    arg: 'kind',
    required: true,
    description: 'lease backend: `etcd`, `redis`, `postgres` or `memory` (one process only)',
  },
  backendUrl: {
    schema: text(),
    arg: 'url',
    description:
      'lease backend URL (redis://, redis-sentinel://host:port,…/name or postgres://); default: the Redis URL (redis) or the database URL (postgres)',
  },
  etcdEndpoints: {
    schema: text().refine(
      (v) => splitEndpoints(v).length > 0 && splitEndpoints(v).every((e) => isUrl(e, ETCD_SCHEMES)),
      endpointsMessage,
    ),
    arg: 'urls',
    description: 'required for etcd: comma-separated client URLs (http:// or https://)',
  },
  databaseUrl: {
    schema: ledgerUrl(),
    arg: 'url',
    required: true,
    description:
      'PostgreSQL holding the ledger (migrated by `cronwarden migrate`); several hosts as libpq takes them: `postgres://h1:5432,h2:5432/db?target_session_attrs=read-write`',
  },
  redisUrl: {
    schema: url(REDIS_SCHEMES),
    arg: 'url',
    required: true,
    description: 'Redis for BullMQ delivery',
  },
  jobs: {
    schema: text().min(1, 'must name a module that exports job definitions'),
    arg: 'module',
    required: true,
    description: 'module exporting `defineJob(...)` results',
    formerFileKey: 'jobsModule',
  },
  replicaId: {
    schema: text().regex(/^[\x21-\x7e]{1,200}$/, 'must be 1-200 printable ASCII characters without spaces'),
    arg: 'id',
    description: 'unique id of this replica; default `host-pid-random`',
  },
  namespace: {
    schema: text().regex(/^[A-Za-z0-9_-]{1,64}$/, 'may contain only letters, digits, _ and - (at most 64)'),
    arg: 'name',
    default: replicaDefaults.namespace,
    description: 'separates deployments sharing servers',
  },
  schema: {
    schema: text().regex(
      /^[a-z_][a-z0-9_]{0,62}$/,
      'may contain only lower-case letters, digits and _ (at most 63), not starting with a digit',
    ),
    arg: 'name',
    description:
      'PostgreSQL schema of the ledger; default `cronwarden`, or `cronwarden_<namespace>` for another namespace',
  },
  leaseTtlMs: {
    ...bounded(replicaSettings.ttlMs),
    arg: 'ms',
    description: 'leader lease TTL; renew every TTL/3, step down at TTL − TTL/10',
    formerFileKey: 'ttlMs',
  },
  concurrency: {
    ...bounded(replicaSettings.concurrency),
    arg: 'n',
    description: 'handlers this replica runs at once (a run waiting on its group commit lends its slot)',
  },
  workerLockMs: {
    ...bounded(replicaSettings.lockDurationMs),
    arg: 'ms',
    description:
      "BullMQ's lock on a delivery while its runs wait for this replica's handler slots: what frees a dead worker's delivery when nothing else does",
    details:
      "A claimed run does not depend on it: a run whose worker stopped beating for a lease TTL is taken over by a live worker within about a second more, and a frozen one that wakes is fenced out. A dead worker's deliveries with runs it had not claimed go back to the queue after the same TTL (its key in Redis ran out), or at once when it starts again under the same replica id; only a replica of an earlier version, or a Redis that lost the key, leaves them to this lock",
  },
  shutdownGraceMs: {
    ...bounded(replicaSettings.shutdownGraceMs),
    arg: 'ms',
    description: 'how long running handlers may finish on SIGTERM',
  },
  standInGraceMs: {
    ...bounded(replicaSettings.standInGraceMs),
    arg: 'ms',
    description:
      'the most a follower waits for the leader to commit a due slot before it commits the slot itself (a crashed leader costs this, not a TTL); it waits less, down to 50 ms, once it has seen the leader commit sooner, and 10 ms for the slots after one a crashed leader missed; `0` = off',
    details:
      'Under the same unique (job, scheduled_at) key as the leader, so a slot is still committed once; ' +
      'a healthy cluster commits none this way (runs with trigger `standin`)',
  },
  standInsPerJob: {
    ...bounded(replicaSettings.standInsPerJob),
    arg: 'n',
    description:
      'how many followers stand in for each job, chosen per job by a rendezvous hash over the live members (so a large cluster does not read the ledger once per follower per slot); `0` = every follower',
  },
  shards: {
    ...bounded(replicaSettings.shards),
    arg: 'n',
    description:
      'sharded leadership: each job belongs to one of n shards by a stable hash of its name, each shard has its own lease and fence, and the replicas spread the shards evenly; `1` = one leader for every job',
    details:
      'Every replica of a deployment must use the same count; changing it is a full restart (the unique ' +
      '(job, scheduled_at) key still keeps each slot once while old and new counts overlap)',
  },
  retentionDays: {
    ...bounded(replicaSettings.retentionDays),
    arg: 'days',
    description: 'the leader deletes finished runs (and their attempts) older than this; `0` keeps everything',
    details:
      'In batches of 5,000 every 10 minutes. A job due every second adds 86,400 runs a day. ' +
      'Safe for the schedule: catch-up after an election starts from `cw_job_state`, never from old runs',
  },
  ledgerCheckIntervalMs: {
    ...bounded(replicaSettings.ledgerCheckIntervalMs),
    arg: 'ms',
    description:
      'the live ledger check: how often the leader checks the last window of the ledger for duplicate slots, tokens out of order, runs no one is on, workflow steps started early and writes the ledger lost; `0` = off',
    details:
      'See docs/operating/ledger-check.md. Each round is one report (`GET /api/ledger-check`, the metric `cronwarden_ledger_check_violations`, one warning line when it finds something)',
  },
  ledgerCheckWindowMs: {
    ...bounded(replicaSettings.ledgerCheckWindowMs),
    arg: 'ms',
    description: 'the live ledger check reads the runs committed in this last stretch',
  },
  ledgerCheckMaxRows: {
    ...bounded(replicaSettings.ledgerCheckMaxRows),
    arg: 'n',
    description: 'the live ledger check reads at most this many of the newest runs of its window',
    details: 'A busier ledger gets a shorter window than ledgerCheckWindowMs; the report says so (`window.capped`)',
  },
  connectTimeoutMs: {
    schema: int(100, 600_000),
    arg: 'ms',
    default: DEFAULT_CONNECT_TIMEOUT_MS,
    description:
      'start-up and `migrate` give up on PostgreSQL, Redis and the lease backend after this, with one line and exit 1',
  },
  logLevel: {
    schema: oneOf(logLevels),
    arg: 'level',
    default: 'info',
    description: 'pino JSON, with replica id, token and run id',
  },
  logFormat: {
    schema: oneOf(logFormats),
    arg: 'format',
    default: 'json',
    description: 'json: one JSON object a line, for log shippers; pretty: coloured lines for a terminal',
    details: 'pretty needs the optional pino-pretty package (`npm i -D pino-pretty`); meant for development',
  },
  adminHost: {
    schema: hostName(),
    arg: 'host',
    default: replicaDefaults.adminHost,
    description: 'interface the admin HTTP binds to',
  },
  adminPort: {
    ...bounded(replicaSettings.adminPort),
    arg: 'port',
    description: 'admin HTTP port; `0` = any free port',
  },
  adminUrl: {
    schema: url(['http', 'https']),
    arg: 'url',
    description: 'the URL other replicas and the CLI use to reach this one; default: the bound address',
  },
  adminToken: {
    schema: text()
      .min(TOKEN_MIN, `must be at least ${TOKEN_MIN} characters (use e.g. \`openssl rand -hex 32\`)`)
      .max(1024, 'must be at most 1024 characters')
      .regex(
        /^[\x21-\x7e]+$/,
        'may contain only printable ASCII characters, no spaces (use e.g. `openssl rand -hex 32`)',
      ),
    secret: true,
    description: `bearer token for trigger/pause/resume/resign; none: they are refused. At least ${TOKEN_MIN} printable ASCII characters, no spaces`,
  },
  adminReadsNeedToken: {
    schema: bool(),
    default: replicaDefaults.adminReadsNeedToken,
    description:
      "the admin API's reads (runs with their errors, jobs, members, schedules) need the admin token too; needs `adminToken`",
    details:
      'Set it when the admin port is reachable beyond this host: handler errors are served to whoever reads. The console asks for the token; `/`, `/healthz`, `/readyz` and `/metrics` stay open',
  },
  adminEnabled: {
    schema: bool(),
    default: true,
    description: '`false` runs without the admin HTTP (and without the probe listener)',
  },
  adminNiceness: {
    ...bounded(replicaSettings.adminNiceness),
    arg: 'n',
    description:
      "added to the admin HTTP thread's nice value (Linux), so under a flood of admin readers the scheduler's thread (fires, lease renewals) wins the cores; `0` = off",
    details:
      'Only that thread is reniced (at most to 19); where threads cannot be reniced (not Linux) one info line says so and it runs at the process priority',
  },
  probePort: {
    schema: port(),
    arg: 'port',
    description:
      "a second, small listener with only `/healthz` and `/readyz`, answered by the scheduler's own thread, for Kubernetes or load balancer probes; unset: none (probe the admin port)",
    details:
      'A flood of admin connections lands on the admin thread and its port, not here. Same checks as on the admin port; must differ from it',
  },
  probeHost: {
    schema: hostName(),
    arg: 'host',
    description: 'interface the probe listener binds to; default: the admin host',
  },
} as const satisfies Record<string, SettingDefinition>;

export type SettingKey = keyof typeof settings;
type Def<K extends SettingKey> = (typeof settings)[K];
/** A setting's value after parsing; optional unless it is required or has a default. */
export type SettingValue<K extends SettingKey> =
  z.output<Def<K>['schema']> | (Def<K> extends { required: true } | { default: unknown } ? never : undefined);
export type SettingValues<K extends SettingKey = SettingKey> = { [P in K]: SettingValue<P> };

export const settingKeys = Object.keys(settings) as SettingKey[];

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase();
const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

export const envName = (key: SettingKey) => `CRONWARDEN_${snake(key)}`;
export const flagName = (key: SettingKey): string | undefined => {
  const def: SettingDefinition = settings[key];
  return def.arg ? `--${kebab(key)}` : undefined;
};
/** How an error message names a setting: as the operator would set it. */
export const settingName = (key: SettingKey) => {
  const flag = flagName(key);
  return flag ? `${envName(key)} (${flag})` : envName(key);
};
export const fileKeys: readonly string[] = settingKeys.filter((k) => !(settings[k] as SettingDefinition).notInFile);

/** Commander option arguments for `keys`: flags, help text with env name and default. */
export function optionSpecs(keys: readonly SettingKey[]): { flags: string; description: string }[] {
  return keys.flatMap((key) => {
    const def: SettingDefinition = settings[key];
    if (!def.arg) return [];
    const extra = [`env ${envName(key)}`, ...(def.default === undefined ? [] : [`default ${String(def.default)}`])];
    return [
      {
        flags: `${flagName(key)} <${def.arg}>`,
        description: `${def.description.replace(/`/g, '')} (${extra.join(', ')})`,
      },
    ];
  });
}

/** The README's configuration table, one row per setting. */
export function settingsTable(): string {
  const rows = settingKeys.map((key) => {
    const def: SettingDefinition = settings[key];
    const file = def.notInFile ? '—' : `\`${key}\``;
    const flag = flagName(key) ? `\`${flagName(key)}\`` : def.secret ? '— (secret: never a flag)' : '—';
    const dflt = def.required ? 'required' : def.default === undefined ? '—' : `\`${String(def.default)}\``;
    return `| ${file} | ${flag} | \`${envName(key)}\` | ${dflt} | ${def.description}${def.details ? `. ${def.details}` : ''} |`;
  });
  return ['| file key | flag | env | default | what |', '| --- | --- | --- | --- | --- |', ...rows].join('\n');
}
