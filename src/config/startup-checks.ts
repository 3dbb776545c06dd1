import type pg from 'pg';
import { Redis } from 'ioredis';
import {
  AccessDeniedError,
  BackendUnavailableError,
  CronwardenError,
  InvalidConfigError,
  NotMigratedError,
  TimedOutError,
} from '../errors.js';
import { assertMigrated, connectPooled } from '../db/migrate.js';
import { parseLedgerUrl } from '../db/ledger-url.js';
import type { LeaseBackend } from '../locks/lease.js';
import { deliveryRedis, ledgerPool, usualConnectTimeout } from '../replica/connections.js';
import type { ReplicaConfig } from './replica-config.js';
import { settingName, type SettingKey } from './settings.js';

/**
 * Before a replica starts: the servers it needs answer, within the connect timeout, and the
 * ledger is migrated. Otherwise start-up stops with one line instead of a replica that hangs,
 * stays a follower for ever, or reports ready over a database without its tables.
 *
 * Exit codes follow from the error (see cli/main.ts): a refused login, a missing database or an
 * unmigrated ledger is a configuration error (2: restarting cannot help); a server that does not
 * answer in time may be booting, so that is a runtime failure (1: the unit may retry).
 *
 * The ledger pool and the Redis client it checked are the replica's (made as the Replica makes its
 * own, replica/connections.ts): handed over connected, not closed and opened again. A ledger
 * client that errs meanwhile goes to `onClientError`; the caller watches the rest from then on.
 */
export async function checkStartup(
  config: ReplicaConfig & { replicaId: string },
  backend: LeaseBackend,
  schema: string,
  onClientError: (err: Error) => void,
): Promise<CheckedConnections> {
  const ms = config.connectTimeoutMs;
  const ledger = checkLedger(config.databaseUrl, config.replicaId, schema, ms, onClientError);
  const redis = checkRedis(config.redisUrl, ms);
  try {
    // Ledger and Redis first: when the lease backend is the same server, their errors are the
    // clearer ones (a refused login, not a backend that "did not answer").
    await Promise.all([ledger.checked, redis.checked]);
    await checkLeaseBackend(backend, leaseBackendSetting(config), ms);
  } catch (err) {
    redis.client.disconnect();
    void ledger.pool.end().catch(() => undefined);
    throw err;
  } finally {
    ledger.done();
    redis.done();
  }
  return { pool: ledger.pool, redis: redis.client };
}

/** What start-up checked, for the replica to use as it is. */
export interface CheckedConnections {
  pool: pg.Pool;
  redis: Redis;
}

/** `checked` settles when the check is over; `done()` removes what only the check listens to. */
function checkLedger(url: string, replicaId: string, schema: string, ms: number, onClientError: (err: Error) => void) {
  const name = settingName('databaseUrl');
  const pool = ledgerPool(url, replicaId, ms);
  // The Replica reports the errors of each client its pool connects later; the client connected
  // here reports to onClientError for its whole life (see db/client-errors.ts).
  const watch = (client: pg.PoolClient) => client.on('error', onClientError);
  pool.on('connect', watch);
  pool.on('error', onClientError);
  const checked = (async () => {
    let client;
    try {
      client = await connectPooled(pool, ms);
    } catch (err) {
      throw startupError('PostgreSQL', err, name);
    }
    try {
      await within(assertMigrated(client, where(url), schema), ms, 'migrations check');
    } catch (err) {
      throw startupError('PostgreSQL', err, name);
    } finally {
      client.release();
    }
    usualConnectTimeout(pool);
  })();
  return {
    pool,
    checked,
    done: () => {
      pool.off('connect', watch);
      pool.off('error', onClientError);
    },
  };
}

function checkRedis(url: string, ms: number) {
  const name = settingName('redisUrl');
  const client = deliveryRedis(url, { lazyConnect: true });
  // One attempt while start-up checks it, bounded, and then one line; afterwards it reconnects as
  // any replica's client does (ioredis reads these options on each connect).
  const { connectTimeout, retryStrategy } = client.options;
  Object.assign(client.options, { connectTimeout: ms, retryStrategy: () => null });
  let lastError: Error | undefined;
  const noteError = (err: Error) => (lastError = err);
  client.on('error', noteError);
  const checked = (async () => {
    try {
      await within(
        client.connect().then(() => client.ping()),
        ms,
        'PING',
      );
    } catch (err) {
      throw startupError(
        'Redis',
        lastError && !(err instanceof TimedOutError) && !authFailure(err) ? lastError : err,
        name,
      );
    }
    // Duplicates (the worker's connections) then connect at once, as those of a replica's own client.
    Object.assign(client.options, { connectTimeout, retryStrategy, lazyConnect: false });
  })();
  return { client, checked, done: () => client.off('error', noteError) };
}

async function checkLeaseBackend(backend: LeaseBackend, key: SettingKey, ms: number): Promise<void> {
  if (backend.kind === 'memory') return;
  try {
    await within(backend.current('cronwarden/start-up-check'), ms, 'lease read');
  } catch (err) {
    throw startupError(backend.kind, err, settingName(key));
  }
}

/** The setting that names the lease backend's server, for the message. */
function leaseBackendSetting(c: ReplicaConfig): SettingKey {
  switch (c.backend.kind) {
    case 'etcd':
      return 'etcdEndpoints';
    case 'redis':
      return c.backend.url === c.redisUrl ? 'redisUrl' : 'backendUrl';
    case 'postgres':
      return c.backend.url === c.databaseUrl ? 'databaseUrl' : 'backendUrl';
    case 'memory':
      return 'backend';
  }
}

/** `promise`, or a TimedOutError after `ms`. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimedOutError(what, ms)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const AUTH = /^(WRONGPASS|NOAUTH|NOPERM)\b|password authentication failed/i;
const AUTH_SQLSTATES = ['28P01', '28000', '3D000'];

/** The refused login in `err` or its causes, if there is one. */
function authFailure(err: unknown): string | undefined {
  for (let e = err; e instanceof Error; e = e.cause) {
    if (e instanceof AccessDeniedError) return e.reason;
    if (AUTH.test(e.message) || AUTH_SQLSTATES.includes(String((e as { code?: unknown }).code)))
      return oneLine(e.message);
  }
  return undefined;
}

/**
 * One typed, one-line error naming the setting to look at: an unmigrated ledger as it is; a
 * refused login anywhere in the cause chain as an AccessDeniedError (exit 2), a backend's
 * configuration error as ours (exit 2); anything else
 * (refused, reset, timed out, unresolvable) as the server being unavailable now (exit 1).
 */
function startupError(service: string, err: unknown, setting: string): CronwardenError {
  if (err instanceof NotMigratedError) return err;
  // A backend's own configuration error (postgres: a refused login, tables missing) names the
  // backend's internal setting: name the operator's instead.
  if (err instanceof InvalidConfigError)
    return new InvalidConfigError(setting, err.message.slice(err.setting.length + 2));
  const denied = authFailure(err);
  if (denied) return new AccessDeniedError(service, `${denied}; check ${setting}`, { cause: err });
  const e = err as Error & { code?: string };
  let message = oneLine((err instanceof Error && (e.message || e.code || e.name)) || String(err));
  if (err instanceof BackendUnavailableError) message = message.replace(`${err.backend} unavailable: `, '');
  return new BackendUnavailableError(service, `${message}; check ${setting}`, { cause: err });
}

const oneLine = (text: string) =>
  text
    .replace(/\s*\n\s*/g, ' ')
    .trim()
    .replace(/\.$/, '');

/** host:port/database of a PostgreSQL URL: enough to tell which, without the password. */
function where(url: string): string {
  try {
    const u = new URL(url);
    return `${u.host}${u.pathname}`;
  } catch {
    return parseLedgerUrl(url).where; // several hosts, which URL cannot parse
  }
}
