import { createScratchDatabase, type ScratchDatabase } from '../../src/drill/servers/scratch-database.js';

/** The machine's shared PostgreSQL; tests only ever create and drop their own databases on it. */
export const SHARED_POSTGRES_URL =
  process.env.CRONWARDEN_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export type TestDatabase = ScratchDatabase;

/** A fresh database on the shared server, migrated into `schema` (default "cronwarden"), dropped by `drop()`. */
export function createTestDatabase(
  options: { migrate?: boolean; baseUrl?: string; schema?: string } = {},
): Promise<TestDatabase> {
  return createScratchDatabase(options.baseUrl ?? SHARED_POSTGRES_URL, {
    prefix: 'cw_test',
    migrate: options.migrate,
    schema: options.schema,
  });
}
