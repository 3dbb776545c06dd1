/**
 * The ledger pool and the Redis client a replica makes from its URLs, how their errors are
 * watched, and how its stop ends the pool.
 */
import pg from 'pg';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { ledgerConnection } from '../db/ledger-url.js';
import { settlesWithin } from '../settles-within.js';

/** How long a query waits for a connection from the ledger's pool. */
export const LEDGER_POOL_CONNECT_TIMEOUT_MS = 5000;
/** How long a stop waits for the ledger's pool to drain. */
const POOL_END_TIMEOUT_MS = 2000;

export function ledgerPool(url: string): pg.Pool {
  return new pg.Pool({ ...ledgerConnection(url), max: 10, connectionTimeoutMillis: LEDGER_POOL_CONNECT_TIMEOUT_MS });
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
 * End a replica's pool after its stop. An abandoned handler may still hold a pooled client (e.g.
 * inside ctx.transaction): do not wait for it; exiting the process ends its session and PostgreSQL
 * rolls its transaction back.
 */
export async function endPool(pool: pg.Pool, logger: Logger): Promise<void> {
  if (!(await settlesWithin(pool.end(), POOL_END_TIMEOUT_MS)))
    logger.warn('a PostgreSQL client is still checked out by an abandoned handler; not waiting for it');
}
