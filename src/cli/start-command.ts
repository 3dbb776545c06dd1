import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { pino } from 'pino';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { AdminServer } from '../admin/server.js';
import { describeConfig, loadReplicaConfig } from '../config/replica-config.js';
import { MemberHeartbeat } from '../replica/member-heartbeat.js';
import { InvalidConfigError } from '../errors.js';
import type { JobDefinition } from '../jobs/define-job.js';
import { createLeaseBackend } from '../locks/create-backend.js';
import { Replica } from '../replica/replica.js';
import { resolveSchema } from '../db/tables.js';

export function registerStart(program: Command): void {
  program
    .command('start')
    .description('run a replica: campaign for leadership, fire jobs while leading, execute runs always')
    .option('--config <file>', 'JSON config file (env CRONWARDEN_CONFIG)')
    .option('--backend <kind>', 'lease backend: etcd | redis | postgres | memory (env CRONWARDEN_BACKEND)')
    .option('--backend-url <url>', 'lease backend URL; default: the database (postgres) or Redis (redis) URL')
    .option('--etcd-endpoints <urls>', 'comma-separated etcd client URLs (env CRONWARDEN_ETCD_ENDPOINTS)')
    .option('--database-url <url>', 'PostgreSQL holding the ledger (env CRONWARDEN_DATABASE_URL)')
    .option('--redis-url <url>', 'Redis for BullMQ delivery (env CRONWARDEN_REDIS_URL)')
    .option('--jobs <module>', 'module exporting job definitions (env CRONWARDEN_JOBS)')
    .option('--replica-id <id>', 'unique id of this replica; default host-pid-random')
    .option('--namespace <name>', 'separates deployments sharing servers (default "default")')
    .option('--schema <name>', 'PostgreSQL schema of the ledger (env CRONWARDEN_SCHEMA; default "cronwarden", or "cronwarden_<namespace>")')
    .option('--lease-ttl-ms <ms>', 'leader lease TTL (default 10000)')
    .option('--concurrency <n>', 'runs this replica executes at once (default 10)')
    .option('--worker-lock-ms <ms>', "BullMQ lock on a running run: a dead or frozen worker's run is re-delivered after this (default 30000)")
    .option('--shutdown-grace-ms <ms>', 'how long running handlers may finish on SIGTERM (default 10000)')
    .option('--retention-days <days>', 'the leader deletes finished runs older than this; 0 keeps everything (default 14)')
    .option('--log-level <level>', 'pino level (default info)')
    .option('--admin-host <host>', 'admin HTTP interface (env CRONWARDEN_ADMIN_HOST, default 127.0.0.1)')
    .option('--admin-port <port>', 'admin HTTP port, 0 = any free port (env CRONWARDEN_ADMIN_PORT, default 8080)')
    .option('--admin-url <url>', 'URL other replicas and the CLI use to reach this admin endpoint (env CRONWARDEN_ADMIN_URL)')
    .addHelpText('after', '\nThe admin bearer token is read from CRONWARDEN_ADMIN_TOKEN (or the config file) only, never from a flag.\nSet CRONWARDEN_ADMIN_ENABLED=false to run without the admin HTTP.')
    .action(async (flags: Record<string, string | undefined>) => {
      const config = loadReplicaConfig({ ...flags, ttlMs: flags.leaseTtlMs, configFile: flags.config, jobsModule: flags.jobs });
      const jobs = await loadJobs(config.jobsModule);
      const logger = pino({ level: config.logLevel, base: { pid: process.pid } });
      const schema = resolveSchema(config);
      // The postgres lease backend keeps its cw_leases in the deployment's schema too.
      const backend = await createLeaseBackend(config.backend.kind === 'postgres' ? { ...config.backend, schema } : config.backend);
      const replica = new Replica({
        replicaId: config.replicaId,
        namespace: config.namespace,
        schema,
        backend,
        databaseUrl: config.databaseUrl,
        redisUrl: config.redisUrl,
        jobs,
        election: { ttlMs: config.ttlMs },
        worker: { concurrency: config.concurrency, lockDurationMs: config.workerLockMs },
        shutdownGraceMs: config.shutdownGraceMs,
        retentionMs: config.retentionDays * 24 * 3600 * 1000,
        logger,
      });
      replica.logger.info({ config: describeConfig(config) }, 'starting replica');
      const admin = config.admin.enabled
        ? new AdminServer({ replica, backend, databaseUrl: config.databaseUrl, token: config.admin.token, host: config.admin.host, port: config.admin.port, advertisedUrl: config.admin.url })
        : undefined;
      let heartbeat: MemberHeartbeat | undefined;

      let stopping = false;
      const onSignal = (signal: NodeJS.Signals) => {
        if (stopping) {
          replica.logger.warn({ signal }, 'second signal: exiting at once');
          process.exit(1);
        }
        stopping = true;
        replica.logger.info({ signal }, 'stopping: resigning leadership and draining running handlers');
        (async () => {
          await heartbeat?.stop();
          await admin?.close();
          await replica.stop();
        })().then(
          () => process.exit(0),
          (err: Error) => {
            replica.logger.error({ err }, 'graceful stop failed');
            process.exit(1);
          },
        );
      };
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);

      await replica.start();
      let adminUrl = config.admin.url;
      if (admin) {
        const bound = await admin.listen();
        adminUrl ??= advertised(bound, config.admin.host);
        if (!config.admin.token) replica.logger.info('admin: no CRONWARDEN_ADMIN_TOKEN, so trigger/pause/resume/resign are refused');
        if (!['127.0.0.1', 'localhost', '::1'].includes(config.admin.host) && !config.admin.token) {
          replica.logger.warn({ host: config.admin.host }, 'admin HTTP listens beyond loopback; reads are open to that network');
        }
        replica.logger.info({ adminUrl, statusPage: `${adminUrl}/` }, 'admin HTTP listening');
      }
      heartbeat = new MemberHeartbeat({ pool: replica.ledger.pool, tables: replica.ledger.tables, replicaId: replica.replicaId, role: () => replica.role, version, adminUrl, logger: replica.logger });
      replica.on('role:changed', () => void heartbeat?.beat());
      await heartbeat.start();
    });
}

const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** A wildcard bind (0.0.0.0, ::) is advertised under this machine's host name. */
function advertised(bound: string, host: string): string {
  if (host !== '0.0.0.0' && host !== '::') return bound;
  const port = new URL(bound.replace(/\[.*\]/, 'localhost')).port;
  return `http://${hostname()}:${port}`;
}

/** Import the user's jobs module; it must export JobDefinitions (named exports or a default array). */
async function loadJobs(path: string): Promise<JobDefinition[]> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(resolve(path)).href)) as Record<string, unknown>;
  } catch (err) {
    // Node 20 imports no TypeScript by itself; under a loader (node --import tsx) the import above works.
    if ((err as NodeJS.ErrnoException).code === 'ERR_UNKNOWN_FILE_EXTENSION' && /\.[cm]?tsx?$/.test(path)) {
      throw new InvalidConfigError(
        'CRONWARDEN_JOBS (--jobs)',
        `cannot load "${path}": Node cannot import TypeScript by itself; compile it and point --jobs at the .js file, or run the CLI under a TypeScript loader: node --import tsx node_modules/cronwarden/bin/cronwarden.js start`,
      );
    }
    throw new InvalidConfigError('CRONWARDEN_JOBS (--jobs)', `cannot load "${path}": ${(err as Error).message}`);
  }
  const values = Array.isArray(mod.default) ? (mod.default as unknown[]) : Object.values(mod).flatMap((v) => (Array.isArray(v) ? v : [v]));
  const jobs = values.filter((v): v is JobDefinition => typeof v === 'object' && v !== null && 'schedule' in v && 'handler' in v && 'name' in v);
  if (jobs.length === 0) throw new InvalidConfigError('CRONWARDEN_JOBS (--jobs)', `"${path}" exports no job definitions (use defineJob)`);
  return jobs;
}
