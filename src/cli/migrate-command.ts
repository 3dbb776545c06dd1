import type { Command } from 'commander';
import { migrateDatabase } from '../db/migrate.js';
import { InvalidConfigError } from '../errors.js';

export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description('apply the ledger migrations to PostgreSQL (safe to run from several replicas at once)')
    .option('--database-url <url>', 'PostgreSQL URL (env CRONWARDEN_DATABASE_URL)', process.env.CRONWARDEN_DATABASE_URL)
    .action(async (opts: { databaseUrl?: string }) => {
      if (!opts.databaseUrl) throw new InvalidConfigError('CRONWARDEN_DATABASE_URL', 'is required (or pass --database-url)');
      if (!isPostgresUrl(opts.databaseUrl)) {
        throw new InvalidConfigError('CRONWARDEN_DATABASE_URL (--database-url)', 'must be a URL starting with postgres:// or postgresql://');
      }
      await migrateDatabase(opts.databaseUrl);
      process.stdout.write('migrations applied\n');
    });
}

function isPostgresUrl(value: string): boolean {
  try {
    return ['postgres:', 'postgresql:'].includes(new URL(value).protocol);
  } catch {
    return false;
  }
}
