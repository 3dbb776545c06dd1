/**
 * The ledger pool and the Redis client of a replica, made one way: by the Replica from its URLs,
 * and by `cronwarden start`, which checks them at start-up and hands them to its Replica.
 */
import pg from 'pg';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { reportClientErrors } from '../db/client-errors.js';
import { ledgerConnection } from '../db/ledger-url.js';
import { poolSettings } from '../db/pool-settings.js';
import { settlesWithin } from '../settles-within.js';

/** How long a query waits for a connection from the ledger's pool. */
export const LEDGER_POOL_CONNECT_TIMEOUT_MS = 5000;
/** How long a stop waits for the ledger's pool to drain. */
const POOL_END_TIMEOUT_MS = 2000;

/**
 * The ledger pool of replica `replicaId`. Its sessions are named `cronwarden <replicaId>` in
 * pg_stat_activity (unless the URL or PGAPPNAME names them), so an operator (and the drill) can
 * tell whose session holds a lock. `connectTimeoutMs`: another bound for a first connection
 * (start-up's check); then usualConnectTimeout().
 */
export function ledgerPool(url: string, replicaId: string, connectTimeoutMs = LEDGER_POOL_CONNECT_TIMEOUT_MS): pg.Pool {
  return new pg.Pool({
    ...ledgerConnection(url),
    fallback_application_name: ledgerSessionName(replicaId),
    max: 10,
    connectionTimeoutMillis: connectTimeoutMs,
  });
}

/**
 * The scheduler's own connections: firing, standing in, its chores and the member heartbeat. Apart
 * from the pool handlers and their runs use, so that nothing a run waits on (a lock an application
 * holds, a frozen replica's transaction, a queue of step completions on one workflow run) can
 * leave the scheduler without a connection: a fire, a stand-in or a beat never waits behind them.
 * Made from the ledger URL, or from the settings of the pool the replica was given.
 */
export function schedulerPool(from: string | pg.Pool, replicaId: string, warn: Warn): pg.Pool {
  const settings: pg.PoolConfig =
    typeof from === 'string'
      ? { ...ledgerConnection(from), connectionTimeoutMillis: LEDGER_POOL_CONNECT_TIMEOUT_MS }
      : { ...poolSettings(from) };
  const pool = new pg.Pool({
    ...settings,
    fallback_application_name: `${ledgerSessionName(replicaId)} scheduler`,
    max: SCHEDULER_POOL_MAX,
  });
  // Always the replica's own: its connections' errors are logged here, as those of a pool it made.
  warnLostClients(pool, warn);
  watchConnections({ pool }, warn);
  return pool;
}

/**
 * The scheduler's connections at most: the runtime schedules' LISTEN, a tick's two fire commits
 * side by side and its hand-overs, a stand-in's commit, a chore, a beat.
 */
export const SCHEDULER_POOL_MAX = 8;

/** What a replica's ledger sessions are called (PostgreSQL keeps the first 63 bytes). */
export function ledgerSessionName(replicaId: string): string {
  return `cronwarden ${replicaId}`;
}

/** Back to the usual connect timeout: pg.Pool reads its options for every connection it makes. */
export function usualConnectTimeout(pool: pg.Pool): void {
  poolSettings(pool).connectionTimeoutMillis = LEDGER_POOL_CONNECT_TIMEOUT_MS;
}

/** BullMQ's producer connection (the worker's blocking ones are duplicates of it). */
export function deliveryRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: 2, ...options });
}

type Warn = (kind: string, fields: object, message: string) => void;

/** Connection errors of clients made for a replica are logged (rate-limited by `warn`), never unhandled. */
export function watchConnections(c: { pool?: pg.Pool; redis?: Redis }, warn: Warn): void {
  c.pool?.on('error', (err) => warn(`pg:${err.message}`, { err }, 'idle PostgreSQL connection error'));
  c.redis?.on('error', (err) => warn(`redis:${err.message}`, { err }, 'Redis connection error'));
}

/**
 * A connection the server drops while a replica's pool has it checked out is logged (rate-limited
 * by `warn`), never unhandled (client-errors.ts): for the runs' pool and the scheduler's alike.
 */
export function warnLostClients(pool: pg.Pool, warn: Warn): void {
  reportClientErrors(pool, lostClientWarning(warn));
}

/** The warning for a pooled connection the server dropped (also for the start-up checks' pool). */
export function lostClientWarning(warn: Warn): (err: Error) => void {
  return (err) => warn(`pg-client:${err.message}`, { err }, 'PostgreSQL connection lost');
}

/**
 * End a replica's pool after its stop. An abandoned handler may still hold a pooled client (e.g.
 * inside ctx.transaction): do not wait for it; exiting the process ends its session and PostgreSQL
 * rolls its transaction back.
 */
export async function endPool(pool: pg.Pool, logger: Logger): Promise<void> {
  if (!(await settlesWithin(pool.end(), POOL_END_TIMEOUT_MS)))
    logger.warn('a PostgreSQL client is still checked out by an abandoned handler; not waiting for it');
}
