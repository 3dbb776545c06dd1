import type { Command } from 'commander';
import { loadSettings, type SettingFlags } from '../config/replica-config.js';
import { optionSpecs, settingName, type SettingKey } from '../config/settings.js';
import { migrateDatabase } from '../db/migrate.js';
import { AccessDeniedError } from '../errors.js';

/** The settings migrate reads, from the same flags, environment and config file as start. */
const migrateKeys = ['config', 'databaseUrl', 'connectTimeoutMs'] as const satisfies readonly SettingKey[];

export function registerMigrate(program: Command): void {
  const command = program
    .command('migrate')
    .description('apply the ledger migrations to PostgreSQL (safe to run from several replicas at once)');
  for (const o of optionSpecs(migrateKeys)) command.option(o.flags, o.description);
  command.action(async (flags: SettingFlags) => {
    const { databaseUrl, connectTimeoutMs } = loadSettings(migrateKeys, flags);
    await migrateDatabase(databaseUrl, { connectTimeoutMs }).catch((err: unknown) => {
      throw err instanceof AccessDeniedError ? new AccessDeniedError(err.service, `${err.reason}; check ${settingName("databaseUrl")}`, { cause: err }) : err;
    });
    process.stdout.write('migrations applied\n');
  });
}
