import type { Command } from 'commander';
import { loadSettings, type SettingFlags } from '../config/replica-config.js';
import { optionSpecs, settingName, type SettingKey } from '../config/settings.js';
import { migrateDatabase } from '../db/migrate.js';
import { AccessDeniedError } from '../errors.js';
import { resolveSchema } from '../db/tables.js';

/** The settings migrate reads, from the same flags, environment and config file as start. */
const migrateKeys = [
  'config',
  'databaseUrl',
  'namespace',
  'schema',
  'connectTimeoutMs',
] as const satisfies readonly SettingKey[];

export function registerMigrate(program: Command): void {
  const command = program
    .command('migrate')
    .description(
      "apply the ledger migrations to PostgreSQL, in the deployment's own schema (safe to run from several replicas at once); " +
        'moves a 0.1.0 ledger out of public on the way',
    );
  for (const o of optionSpecs(migrateKeys)) command.option(o.flags, o.description);
  command.action(async (flags: SettingFlags) => {
    const { databaseUrl, namespace, schema: chosen, connectTimeoutMs } = loadSettings(migrateKeys, flags);
    const schema = resolveSchema({ schema: chosen, namespace });
    const result = await migrateDatabase(databaseUrl, { connectTimeoutMs, schema }).catch((err: unknown) => {
      throw err instanceof AccessDeniedError
        ? new AccessDeniedError(err.service, `${err.reason}; check ${settingName('databaseUrl')}`, { cause: err })
        : err;
    });
    if (result.movedFromPublic) process.stdout.write(`moved the 0.1.0 ledger from public into schema "${schema}"\n`);
    process.stdout.write('migrations applied\n');
  });
}
