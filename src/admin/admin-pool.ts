import pg from 'pg';
import type { Logger } from 'pino';
import { reportClientErrors } from '../db/client-errors.js';
import { ledgerConnection } from '../db/ledger-url.js';
import { LedgerUnreachableError } from '../db/postgres-unavailable.js';

export interface AdminPoolOptions {
  /** At most this many connections for admin reads (default 3). */
  max?: number;
  /** PostgreSQL cancels an admin read that runs longer (default 5 s). */
  statementTimeoutMs?: number;
  /** A read waiting longer for a connection fails (503) instead of queueing (default 2 s). */
  connectionTimeoutMs?: number;
}

/**
 * The admin API's own small pool on the ledger's database, apart from the ledger pool the fire
 * loop, the elector's fence and the workers use: however many readers arrive, they wait for one of
 * these few connections (each statement bounded by statement_timeout), never for the scheduler's.
 */
export function createAdminPool(database: string | pg.PoolConfig, logger: Logger, o: AdminPoolOptions = {}): pg.Pool {
  // The ledger's connection settings (a URL, or those of a pool the application handed the replica).
  const base: pg.PoolConfig = typeof database === 'string' ? ledgerConnection(database) : { ...database };
  const pool = new pg.Pool({
    ...base,
    max: o.max ?? 3,
    connectionTimeoutMillis: o.connectionTimeoutMs ?? 2000,
    idleTimeoutMillis: 10_000,
    statement_timeout: o.statementTimeoutMs ?? 5000,
    idle_in_transaction_session_timeout: 10_000,
    application_name: 'cronwarden-admin',
  });
  pool.on('error', (err) => logger.warn({ err: err.message }, 'admin: idle PostgreSQL connection error'));
  return reportClientErrors(pool, (err) => logger.warn({ err: err.message }, 'admin: PostgreSQL connection lost'));
}

/** True for the errors an overloaded or unreachable database gives: answer 503, not 500. */
export function isDatabaseBusy(err: unknown): boolean {
  if (err instanceof LedgerUnreachableError) return true; // no read-write host now: a failover, say
  const e = err as { code?: string; message?: string };
  if (e.code === '57014' || e.code === '53300' || e.code === '57P03') return true; // statement timeout, too many connections, starting up
  if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' || e.code === 'ETIMEDOUT') return true;
  return /timeout exceeded when trying to connect|Connection terminated/.test(e.message ?? '');
}
