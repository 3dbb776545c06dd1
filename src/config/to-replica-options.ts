import { DAY_MS } from '../replica/replica-defaults.js';
import type { ReplicaAdminOptions, ReplicaOptions } from '../replica/replica-options.js';
import type { AdminConfig, ReplicaConfig } from './replica-config.js';

/**
 * The Replica's options from `cronwarden start`'s configuration, plus what start-up made: the lease
 * backend, the jobs module's definitions, the logger, and the connections it checked. The Replica
 * fills and checks them in the same step as any library caller's (replica/replica-defaults.ts).
 */
export function toReplicaOptions(
  config: ReplicaConfig,
  made: Pick<ReplicaOptions, 'backend' | 'jobs' | 'logger' | 'pool' | 'redis' | 'schema'>,
): ReplicaOptions {
  return {
    ...made,
    replicaId: config.replicaId,
    namespace: config.namespace,
    // The URLs stay: the admin thread opens its own pool from the ledger's URL.
    databaseUrl: config.databaseUrl,
    redisUrl: config.redisUrl,
    election: { ttlMs: config.ttlMs },
    worker: { concurrency: config.concurrency, lockDurationMs: config.workerLockMs },
    shutdownGraceMs: config.shutdownGraceMs,
    standInGraceMs: config.standInGraceMs,
    standInsPerJob: config.standInsPerJob,
    shards: config.shards,
    retentionMs: config.retentionDays * DAY_MS,
    ledgerCheck: config.ledgerCheck,
    admin: config.admin.enabled ? replicaAdmin(config.admin) : false,
  };
}

/** The Replica's admin options from the configuration. */
function replicaAdmin(a: AdminConfig): ReplicaAdminOptions {
  return {
    host: a.host,
    port: a.port,
    token: a.token,
    readsNeedToken: a.readsNeedToken,
    url: a.url,
    niceness: a.niceness,
    probe: a.probePort === undefined ? undefined : { host: a.probeHost, port: a.probePort },
  };
}
