import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { readMigrationFiles, type MigrationMeta } from 'drizzle-orm/migrator';
import { AccessDeniedError, BackendUnavailableError, NotMigratedError } from '../errors.js';
import { ledgerConnection } from './ledger-url.js';
import { EXECUTION_TOKEN_SEQ, JOURNAL_TABLE, TABLE_NAMES, quoteIdent, resolveSchema, tablesIn } from './tables.js';

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

export interface MigrateOptions extends ConnectOptions {
  /** The schema to migrate; default: the namespace's (`cronwarden` for the default namespace). */
  schema?: string;
  namespace?: string;
}

export interface MigrateResult {
  schema: string;
  /** Tags of the migrations applied by this call. */
  applied: string[];
  /** True when a 0.1.0 ledger was moved out of `public` (see adoptPublicLedger). */
  movedFromPublic: boolean;
}

/**
 * Apply the SQL migrations drizzle-kit generated, inside the deployment's own schema, with the
 * journal in that schema too (drizzle's format: id, hash, created_at). Replicas that start
 * together serialise on a session advisory lock, so exactly one applies each migration and the
 * others then find nothing left to do.
 *
 * Why not drizzle's migrate(): it can keep its journal elsewhere (migrationsSchema), but it runs the
 * SQL as written, and drizzle-kit writes `"public".` into it (the sequence, foreign keys), while
 * migrations are append-only and may never be edited. So this applies drizzle's own parsed files
 * (readMigrationFiles) with the same rule as drizzle (everything newer than the journal's newest
 * entry, in one transaction), each statement with `"public".` rebased onto our schema and
 * search_path set to that schema alone for the transaction, so unqualified names land there too.
 *
 * An install of 0.1.0 (tables in `public`, journal rows in `drizzle.__drizzle_migrations`) is
 * moved into the schema first, once, without losing a row (adoptPublicLedger).
 */
export async function migrateDatabase(connectionString: string, options: MigrateOptions = {}): Promise<MigrateResult> {
  const schema = resolveSchema(options);
  const migrations = readMigrationFiles({ migrationsFolder });
  const client = await connectLedger(connectionString, options);
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await client.query('BEGIN');
      try {
        const movedFromPublic = await adoptPublicLedger(client, schema, migrations);
        const applied = await applyMigrations(client, schema, migrations);
        await client.query('COMMIT');
        return { schema, applied, movedFromPublic };
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}

async function applyMigrations(client: pg.Client, schema: string, migrations: MigrationMeta[]): Promise<string[]> {
  const t = tablesIn(schema);
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`);
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${t.journal} (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
  );
  const last = await client.query<{ created_at: string }>(
    `SELECT created_at FROM ${t.journal} ORDER BY created_at DESC LIMIT 1`,
  );
  const lastMillis = last.rows[0] ? Number(last.rows[0].created_at) : -Infinity;
  const tags = migrationTags();
  const applied: string[] = [];
  await client.query(`SET LOCAL search_path TO ${quoteIdent(schema)}`);
  for (const [i, m] of migrations.entries()) {
    if (m.folderMillis <= lastMillis) continue;
    for (const statement of m.sql) {
      if (statement.trim()) await client.query(rebase(statement, schema));
    }
    await client.query(`INSERT INTO ${t.journal} (hash, created_at) VALUES ($1, $2)`, [m.hash, m.folderMillis]);
    applied.push(tags[i] ?? String(m.folderMillis));
  }
  return applied;
}

/** drizzle-kit names the default schema explicitly in some statements; ours is the deployment's. */
export function rebase(statement: string, schema: string): string {
  return statement.replaceAll('"public".', `${quoteIdent(schema)}.`);
}

/**
 * Move a 0.1.0 ledger (tables and sequence in `public`, journal rows in drizzle's
 * `drizzle.__drizzle_migrations`) into `schema`, inside the caller's transaction: ALTER … SET
 * SCHEMA keeps every row, index, constraint and owned sequence (run ids, execution tokens, fences,
 * job state continue where they were). Only cronwarden's journal rows (matched by the hash of our
 * migration files) move out of drizzle's journal; the application's rows stay, so its next
 * migration is no longer hidden behind ours. Runs only when `public.cw_ledger` exists and `schema`
 * has no ledger yet; replicas of 0.1.0 must be stopped (the move takes the tables' locks).
 */
async function adoptPublicLedger(client: pg.Client, schema: string, migrations: MigrationMeta[]): Promise<boolean> {
  const found = await client.query<{ old: string | null; ours: string | null }>(
    `SELECT to_regclass('public.cw_ledger')::text AS old, to_regclass($1)::text AS ours`,
    [`${quoteIdent(schema)}.cw_ledger`],
  );
  if (!found.rows[0]?.old || found.rows[0].ours) return false;
  const journal = await client.query<{ exists: boolean }>(
    `SELECT to_regclass('drizzle.${JOURNAL_TABLE}') IS NOT NULL AS exists`,
  );
  const hashes = migrations.map((m) => m.hash);
  const rows = journal.rows[0]?.exists
    ? (
        await client.query<{ id: number; hash: string; created_at: string }>(
          `SELECT id, hash, created_at FROM drizzle.${JOURNAL_TABLE} WHERE hash = ANY($1::text[]) ORDER BY created_at`,
          [hashes],
        )
      ).rows
    : [];
  if (rows.length === 0)
    throw new NotMigratedError(
      'public.cw_ledger exists but drizzle.__drizzle_migrations records none of its migrations; move it by hand',
    );
  const t = tablesIn(schema);
  const s = quoteIdent(schema);
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
  for (const table of TABLE_NAMES)
    await client.query(`ALTER TABLE IF EXISTS public.${quoteIdent(table)} SET SCHEMA ${s}`);
  await client.query(`ALTER SEQUENCE IF EXISTS public.${quoteIdent(EXECUTION_TOKEN_SEQ)} SET SCHEMA ${s}`);
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${t.journal} (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
  );
  for (const r of rows)
    await client.query(`INSERT INTO ${t.journal} (hash, created_at) VALUES ($1, $2)`, [r.hash, r.created_at]);
  await client.query(`DELETE FROM drizzle.${JOURNAL_TABLE} WHERE id = ANY($1::int[])`, [rows.map((r) => r.id)]);
  return true;
}

/** Migration tags in journal order, for the report of what was applied (readMigrationFiles drops them). */
function migrationTags(): string[] {
  const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as {
    entries: { tag: string }[];
  };
  return journal.entries.map((e) => e.tag);
}

/**
 * A connected client on the ledger, within the timeout. A refused login or a database that does
 * not exist is an AccessDeniedError (a restart cannot fix it); no connection in time is a
 * BackendUnavailableError; other network failures (ECONNREFUSED, …) are passed on as they are.
 */
export async function connectLedger(connectionString: string, options: ConnectOptions = {}): Promise<pg.Client> {
  const timeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const { Client = pg.Client, ...connection } = ledgerConnection(connectionString);
  const client = new Client({ ...connection, connectionTimeoutMillis: timeoutMs });
  try {
    await client.connect();
    return client;
  } catch (err) {
    await client.end().catch(() => undefined);
    throw classifyConnectError(err, timeoutMs);
  }
}

/**
 * A client of `pool` (made with `connectionTimeoutMillis: timeoutMs`), its failure classified as
 * connectLedger's: for a check whose connection then stays in the pool for its user.
 */
export async function connectPooled(pool: pg.Pool, timeoutMs: number): Promise<pg.PoolClient> {
  try {
    return await pool.connect();
  } catch (err) {
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
  if (/^SASL: |client password must be a string/.test(err.message))
    return new AccessDeniedError('PostgreSQL', 'it asks for a password the URL does not give', { cause: err });
  if (/timeout/i.test(err.message))
    return new BackendUnavailableError('PostgreSQL', `no connection within ${timeoutMs} ms`, { cause: err });
  return err;
}

/**
 * Refuse a ledger this version cannot use: cronwarden's tables missing, or migrations this
 * version ships that were not applied (by drizzle's own rule: those newer than the last one
 * recorded). `where` names the database in the message (without its password).
 */
export async function assertMigrated(client: pg.ClientBase, where: string, schema: string): Promise<void> {
  const shipped = readMigrationFiles({ migrationsFolder });
  const t = tablesIn(schema);
  const { rows } = await client.query<{ tables: boolean; journal: boolean }>(
    'SELECT to_regclass($1) IS NOT NULL AS tables, to_regclass($2) IS NOT NULL AS journal',
    [t.runs, t.journal],
  );
  let pending = shipped.length;
  if (rows[0]?.tables && rows[0].journal) {
    const last = await client.query<{ at: string | null }>(`SELECT max(created_at)::text AS at FROM ${t.journal}`);
    const appliedUpTo = Number(last.rows[0]?.at ?? 0);
    pending = shipped.filter((m) => m.folderMillis > appliedUpTo).length;
  }
  if (pending === shipped.length) throw new NotMigratedError(`no cronwarden tables in schema "${schema}" of ${where}`);
  if (pending > 0) throw new NotMigratedError(`${pending} of ${shipped.length} migrations missing in ${where}`);
}
