import type { Command } from 'commander';
import { migrateDatabase } from '../db/migrate.js';
import { InvalidConfigError } from '../errors.js';
import { resolveSchema } from '../db/tables.js';

export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description(
      "apply the ledger migrations to PostgreSQL, in the deployment's own schema (safe to run from several replicas at once); " +
        'moves a 0.1.0 ledger out of public on the way',
    )
    .option('--database-url <url>', 'PostgreSQL URL (env CRONWARDEN_DATABASE_URL)', process.env.CRONWARDEN_DATABASE_URL)
    .option('--namespace <name>', 'the deployment whose schema to migrate (env CRONWARDEN_NAMESPACE, default "default")', process.env.CRONWARDEN_NAMESPACE)
    .option('--schema <name>', 'the schema to migrate (env CRONWARDEN_SCHEMA; default "cronwarden", or "cronwarden_<namespace>")', process.env.CRONWARDEN_SCHEMA)
    .action(async (opts: { databaseUrl?: string; namespace?: string; schema?: string }) => {
      if (!opts.databaseUrl) throw new InvalidConfigError('CRONWARDEN_DATABASE_URL', 'is required (or pass --database-url)');
      if (!isPostgresUrl(opts.databaseUrl)) {
        throw new InvalidConfigError('CRONWARDEN_DATABASE_URL (--database-url)', 'must be a URL starting with postgres:// or postgresql://');
      }
      const schema = resolveSchema({ schema: opts.schema || undefined, namespace: opts.namespace || undefined });
      const result = await migrateDatabase(opts.databaseUrl, { schema });
      if (result.movedFromPublic) process.stdout.write(`moved the 0.1.0 ledger from public into schema "${schema}"\n`);
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
