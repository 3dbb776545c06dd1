import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { describeConfig, loadReplicaConfig, type AdminConfig, type SettingFlags } from '../config/replica-config.js';
import { toReplicaOptions } from '../config/to-replica-options.js';
import {
  envName,
  optionSpecs,
  settingName,
  settingKeys,
  settings,
  type SettingDefinition,
  type SettingKey,
} from '../config/settings.js';
import { checkStartup, type CheckedConnections } from '../config/startup-checks.js';
import { createLogger } from '../config/logger.js';
import { settlesWithin } from '../settles-within.js';
import { limitedWarn } from '../once-per-kind.js';
import { systemClock } from '../clock.js';
import { InvalidConfigError } from '../errors.js';
import type { JobDefinition } from '../jobs/define-job.js';
import { createLeaseBackend } from '../locks/create-backend.js';
import { endPool, lostClientWarning, watchConnections } from '../replica/connections.js';
import { Replica } from '../replica/replica.js';
import { defaultReplicaId } from '../replica/replica-defaults.js';
import { resolveSchema } from '../db/tables.js';

export function registerStart(program: Command): void {
  const command = program
    .command('start')
    .description('run a replica: campaign for leadership, fire jobs while leading, execute runs always');
  for (const o of optionSpecs(settingKeys)) command.option(o.flags, o.description);
  command.addHelpText('after', `\nSet only in the environment or the config file: ${envOnly}.`).action(startReplica);
}

/** The start action: load and check everything, then run the replica until a signal stops it. */
async function startReplica(flags: SettingFlags): Promise<void> {
  const loaded = loadReplicaConfig(flags);
  // Known before the connections are made: the ledger's sessions carry it (connections.ts).
  const config = { ...loaded, replicaId: loaded.replicaId ?? defaultReplicaId() };
  const jobs = await loadJobs(config.jobsModule);
  const logger = await createLogger(config);
  const schema = resolveSchema(config);
  // The postgres lease backend keeps its cw_leases in the deployment's schema too.
  const backend = await createLeaseBackend(
    config.backend.kind === 'postgres' ? { ...config.backend, schema } : config.backend,
  );
  // Connection errors repeat during a restart or failover: the first of a kind, then one a minute.
  const warn = limitedWarn(logger, () => systemClock.monotonic());
  let checked: CheckedConnections;
  try {
    checked = await checkStartup(config, backend, schema, lostClientWarning(warn));
  } catch (err) {
    await settlesWithin(backend.close(), 1000);
    throw err;
  }
  // The connections the checks opened are the replica's: watched here, closed after its stop.
  watchConnections(checked, warn);
  const replica = new Replica(toReplicaOptions(config, { ...checked, backend, jobs, logger, schema }));
  replica.logger.info({ config: describeConfig(config) }, 'starting replica');
  stopOnSignals(replica, checked);
  await replica.start().catch((err: unknown) => {
    throw asSetting(err);
  });
  if (replica.adminUrl) logAdmin(replica, config.admin);
}

/** The Replica's options the CLI sets from a setting of its own, for errors that name an option. */
const optionSettings: Partial<Record<string, SettingKey>> = {
  'admin.port': 'adminPort',
  'admin.probe.port': 'probePort',
};

/** A Replica's InvalidConfigError as the operator's setting (flag and variable) to change. */
function asSetting(err: unknown): unknown {
  if (!(err instanceof InvalidConfigError)) return err;
  const key = optionSettings[err.setting];
  return key ? new InvalidConfigError(settingName(key), err.message.slice(err.setting.length + 2)) : err;
}

/** SIGTERM / SIGINT stop the replica gracefully, close its connections and exit; a second signal exits at once. */
function stopOnSignals(replica: Replica, connections: CheckedConnections): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      replica.logger.warn({ signal }, 'second signal: exiting at once');
      process.exit(1);
    }
    stopping = true;
    replica.logger.info({ signal }, 'stopping: resigning leadership and draining running handlers');
    stopAndClose(replica, connections).then(
      () => process.exit(0),
      (err: Error) => {
        replica.logger.error({ err }, 'graceful stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}

async function stopAndClose(replica: Replica, connections: CheckedConnections): Promise<void> {
  await replica.stop();
  await connections.redis.quit().catch(() => {});
  await endPool(connections.pool, replica.logger);
}

/** Where the admin HTTP listens, and what an operator should know about its exposure. */
function logAdmin(replica: Replica, admin: AdminConfig): void {
  if (!admin.token) replica.logger.info('admin: no CRONWARDEN_ADMIN_TOKEN, so trigger/pause/resume/resign are refused');
  if (!['127.0.0.1', 'localhost', '::1'].includes(admin.host) && !(admin.token && admin.readsNeedToken)) {
    replica.logger.warn(
      { host: admin.host },
      'admin HTTP listens beyond loopback; reads are open to that network (set CRONWARDEN_ADMIN_READS_NEED_TOKEN=true and a token)',
    );
  }
  replica.logger.info({ adminUrl: replica.adminUrl, statusPage: `${replica.adminUrl}/` }, 'admin HTTP listening');
  if (replica.probeUrl) replica.logger.info({ probeUrl: replica.probeUrl }, 'probes (/healthz, /readyz) listening');
}

/** Settings without a flag, named in --help. */
const envOnly = settingKeys
  .filter((k) => !(settings[k] as SettingDefinition).arg)
  .map((k) => `${envName(k)}${(settings[k] as SettingDefinition).secret ? ' (a secret: flags show in ps)' : ''}`)
  .join(', ');

/** Import the user's jobs module; it must export JobDefinitions (named exports or a default array). */
async function loadJobs(path: string): Promise<JobDefinition[]> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(resolve(path)).href)) as Record<string, unknown>;
  } catch (err) {
    // Node 20 imports no TypeScript by itself; under a loader (node --import tsx) the import above works.
    if ((err as NodeJS.ErrnoException).code === 'ERR_UNKNOWN_FILE_EXTENSION' && /\.[cm]?tsx?$/.test(path)) {
      throw new InvalidConfigError(
        settingName('jobs'),
        `cannot load "${path}": Node cannot import TypeScript by itself; compile it and point --jobs at the .js file, or run the CLI under a TypeScript loader: node --import tsx node_modules/cronwarden/bin/cronwarden.js start`,
      );
    }
    throw new InvalidConfigError(settingName('jobs'), `cannot load "${path}": ${(err as Error).message}`);
  }
  const values = Array.isArray(mod.default)
    ? (mod.default as unknown[])
    : Object.values(mod).flatMap((v): unknown[] => (Array.isArray(v) ? (v as unknown[]) : [v]));
  const jobs = values.filter(
    (v): v is JobDefinition => typeof v === 'object' && v !== null && 'schedule' in v && 'handler' in v && 'name' in v,
  );
  if (jobs.length === 0)
    throw new InvalidConfigError(settingName('jobs'), `"${path}" exports no job definitions (use defineJob)`);
  return jobs;
}
