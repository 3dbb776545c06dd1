/**
 * A scratch database on an existing PostgreSQL server (the drill's ledger, the tests' fresh
 * databases): created, migrated, and dropped without tripping over its own closing connections.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { migrateDatabase } from '../../db/migrate.js';
import { DEFAULT_SCHEMA, quoteIdent, validateSchemaName } from '../../db/tables.js';

export interface ScratchDatabase {
  url: string;
  name: string;
  /** The schema cronwarden's tables were migrated into. */
  schema: string;
  /**
   * A pool on the scratch database, ended by drop(). Its search_path ends with `schema`, so the
   * harness's own SQL names cronwarden's tables unqualified, while what it creates goes to public.
   */
  pool: pg.Pool;
  drop(): Promise<void>;
}

/** `serverUrl` names any database on the server; the scratch one is created beside it. */
export async function createScratchDatabase(
  serverUrl: string,
  options: { prefix?: string; migrate?: boolean; schema?: string } = {},
): Promise<ScratchDatabase> {
  const schema = validateSchemaName(options.schema ?? DEFAULT_SCHEMA);
  const name = `${options.prefix ?? 'cw_scratch'}_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  await withClient(serverUrl, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  if (options.migrate !== false) await migrateDatabase(url.toString(), { schema });
  const pool = new pg.Pool({
    connectionString: url.toString(),
    max: 10,
    options: `-c search_path="$user",public,${quoteIdent(schema)}`,
  });
  // pool.end() resolves before its connections have finished closing; one still closing when
  // the database is dropped reports "terminating connection", which is expected then.
  let dropping = false;
  pool.on('error', (err) => {
    if (!dropping) throw err;
  });
  return {
    url: url.toString(),
    name,
    schema,
    pool,
    async drop() {
      dropping = true;
      await pool.end();
      await dropDatabase(serverUrl, name);
    },
  };
}

/** Drop a database once its sessions have left (waiting up to 5 s), forcing out any that stay. */
export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  await withClient(serverUrl, async (c) => {
    for (let i = 0; i < 50; i++) {
      const r = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [
        name,
      ]);
      if (r.rows[0]?.n === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}
