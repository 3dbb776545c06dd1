import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';

/** migrations/ at the package root, whether running from src/ (tsx) or dist/ (built). */
export const migrationsFolder = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'migrations');

/** Any constant works; it only has to be the same for every replica. "cronwarden" in ASCII, trimmed. */
const MIGRATION_LOCK_KEY = 0x63726f6e77;

/**
 * Apply the SQL migrations drizzle-kit generated. Replicas that start together serialise on a
 * session advisory lock, so exactly one applies each migration and the others then find nothing
 * left to do.
 */
export async function migrateDatabase(connectionString: string): Promise<void> {
  const client = new pg.Client({ connectionString });
  await client.connect();
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
