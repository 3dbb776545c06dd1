import pg from 'pg';

/** SQLSTATE classes that mean "the server cannot serve us now": connection, resources, operator, system. */
const UNAVAILABLE_CLASSES = new Set(['08', '53', '57', '58']);
/** Socket-level failures node-postgres passes through from the network. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);
/** node-postgres's own messages for a connection it lost or could not get in time. */
const LOST_CONNECTION =
  /Connection terminated|timeout exceeded when trying to connect|Query read timeout|not queryable|Client was closed/i;

/** No host of a (multi-host) ledger URL answered as asked (read-write): a failover under way, say. */
export class LedgerUnreachableError extends Error {
  override readonly name = 'LedgerUnreachableError';
}

/** A write on a server that is (still) a standby: read_only_sql_transaction. Another host may be primary. */
const READ_ONLY_SQLSTATE = '25006';

/**
 * True when a PostgreSQL failure means the server cannot serve us now (down, restarting, out of
 * connections, network cut), so the same statement may succeed later; false for errors a retry
 * cannot fix (a bad statement, a constraint, a bug).
 */
export function isPostgresUnavailable(err: unknown): boolean {
  if (err instanceof LedgerUnreachableError) return true;
  if (err instanceof pg.DatabaseError)
    return err.code === READ_ONLY_SQLSTATE || UNAVAILABLE_CLASSES.has((err.code ?? '').slice(0, 2));
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return (typeof code === 'string' && NETWORK_CODES.has(code)) || LOST_CONNECTION.test(err.message);
}
