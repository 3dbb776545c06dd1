import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { AccessDeniedError, BackendUnavailableError, NotMigratedError } from '../errors.js';

/** migrations/ at the package root, whether running from src/ (tsx) or dist/ (built). */
export const migrationsFolder = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'migrations');

/** Any constant works; it only has to be the same for every replica. "cronwarden" in ASCII, trimmed. */
const MIGRATION_LOCK_KEY = 0x63726f6e77;

/** How long a connection to the ledger may take before we give up, unless told otherwise. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

export interface ConnectOptions {
  /** Give up on connecting (DNS, TCP, TLS, login) after this. Default 10 s. */
  connectTimeoutMs?: number;
}

/**
 * Apply the SQL migrations drizzle-kit generated. Replicas that start together serialise on a
 * session advisory lock, so exactly one applies each migration and the others then find nothing
 * left to do.
 */
export async function migrateDatabase(connectionString: string, options: ConnectOptions = {}): Promise<void> {
  const client = await connectLedger(connectionString, options);
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await migrate(drizzle(client), { migrationsFolder });
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}

/**
 * A connected client on the ledger, within the timeout. A refused login or a database that does
 * not exist is an AccessDeniedError (a restart cannot fix it); no connection in time is a
 * BackendUnavailableError; other network failures (ECONNREFUSED, …) are passed on as they are.
 */
export async function connectLedger(connectionString: string, options: ConnectOptions = {}): Promise<pg.Client> {
  const timeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: timeoutMs });
  try {
    await client.connect();
    return client;
  } catch (err) {
    await client.end().catch(() => undefined);
    throw classifyConnectError(err, timeoutMs);
  }
}

/** SQLSTATE 28xxx: authorization refused (wrong password, no pg_hba entry); 3D000: no such database. */
function classifyConnectError(err: unknown, timeoutMs: number): unknown {
  if (err instanceof pg.DatabaseError && (err.code?.startsWith('28') || err.code === '3D000')) {
    return new AccessDeniedError('PostgreSQL', err.message, { cause: err });
  }
  if (!(err instanceof Error)) return err;
  // node-postgres refuses client-side when the server asks for a password the URL lacks.
  if (/^SASL: |client password must be a string/.test(err.message)) return new AccessDeniedError('PostgreSQL', 'it asks for a password the URL does not give', { cause: err });
  if (/timeout/i.test(err.message)) return new BackendUnavailableError('PostgreSQL', `no connection within ${timeoutMs} ms`, { cause: err });
  return err;
}

/**
 * Refuse a ledger this version cannot use: cronwarden's tables missing, or migrations this
 * version ships that were not applied (by drizzle's own rule: those newer than the last one
 * recorded). `where` names the database in the message (without its password).
 */
export async function assertMigrated(client: pg.ClientBase, where: string): Promise<void> {
  const shipped = readMigrationFiles({ migrationsFolder });
  const { rows } = await client.query<{ tables: boolean; journal: boolean }>(
    "SELECT to_regclass('cw_runs') IS NOT NULL AS tables, to_regclass('drizzle.__drizzle_migrations') IS NOT NULL AS journal",
  );
  let pending = shipped.length;
  if (rows[0]?.tables && rows[0].journal) {
    const last = await client.query<{ at: string | null }>('SELECT max(created_at)::text AS at FROM drizzle.__drizzle_migrations');
    const appliedUpTo = Number(last.rows[0]?.at ?? 0);
    pending = shipped.filter((m) => m.folderMillis > appliedUpTo).length;
  }
  if (pending === shipped.length) throw new NotMigratedError(`no cronwarden tables in ${where}`);
  if (pending > 0) throw new NotMigratedError(`${pending} of ${shipped.length} migrations missing in ${where}`);
}
