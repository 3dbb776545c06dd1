import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { migrateDatabase } from '../../src/db/migrate.js';

/** The machine's shared PostgreSQL; tests only ever create and drop their own databases on it. */
export const SHARED_POSTGRES_URL = process.env.CRONWARDEN_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface TestDatabase {
  url: string;
  name: string;
  pool: pg.Pool;
  drop(): Promise<void>;
}

/** A fresh database on the shared server, migrated, dropped by `drop()`. */
export async function createTestDatabase(options: { migrate?: boolean; baseUrl?: string } = {}): Promise<TestDatabase> {
  const baseUrl = options.baseUrl ?? SHARED_POSTGRES_URL;
  const name = `cw_test_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  if (options.migrate !== false) await migrateDatabase(url.toString());
  const pool = new pg.Pool({ connectionString: url.toString(), max: 10 });
  return {
    url: url.toString(),
    name,
    pool,
    async drop() {
      await pool.end();
      const c = new pg.Client({ connectionString: baseUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}
