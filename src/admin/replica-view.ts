/**
 * What the admin server and the metrics see of a replica: a narrow, mostly read-only view, so the
 * admin layer needs neither the Replica class above it nor its parts (elector, fire loop, pools).
 * Replica implements it.
 */
import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { JobPause } from '../ledger/pauses.js';
import type { Lease } from '../locks/lease.js';
import type { ElectorEvents, ElectorRole } from '../scheduler/election/elector.js';
import type { FireLoopEvents } from '../scheduler/firing/fire-loop.js';
import type { CodeJob } from '../cron/scheduled-job.js';
import { shardOf } from '../scheduler/shards/shard-map.js';
import type { AdminCalls } from './admin-calls.js';

/** The leader lifted an expired pause (once across replicas). */
export interface PauseEvents {
  'pause:expired': [pause: JobPause];
}

/** Everything a replica announces: its elector's and its fire loop's events, and pause expiries. */
export type ReplicaEvents = FireLoopEvents & ElectorEvents & PauseEvents;

/** What the admin server asks the replica to do (pingLedger, trigger, pause, resign, retry…): admin-calls.ts. */
export type ReplicaActions = AdminCalls['replica'];

/** The admin API's mutations of runtime schedules, one-off runs and backfills: admin-calls.ts. */
export type RuntimeAdmin = AdminCalls['runtime'];

export interface ReplicaView extends ReplicaActions, Pick<EventEmitter<ReplicaEvents>, 'on' | 'off'> {
  readonly replicaId: string;
  readonly namespace: string;
  /** The PostgreSQL schema of this deployment's ledger. */
  readonly schema: string;
  readonly leaseName: string;
  /** Sharded leadership: each shard's lease name, by shard; undefined with one leader. */
  readonly shardLeases?: readonly string[];
  /** When this replica started, on its scheduler clock (epoch ms). */
  readonly startedAt: number;
  readonly logger: Logger;
  /** The scheduler's clock (the ledger's, by default). */
  readonly clock: Clock;
  readonly role: ElectorRole;
  readonly backendKind: string;
  readonly ttlMs: number;
  /** Finished runs older than this are deleted by the leader (0: kept); absent: unknown. */
  readonly retentionMs?: number;
  /** Since when this replica leads (epoch ms on the scheduler clock), if it does. */
  readonly leadingSince: number | undefined;
  /** The lease while leading and within its local deadline. */
  lease(): Lease | undefined;
  /** The jobs this replica defines. */
  jobs(): readonly CodeJob[];
  job(name: string): CodeJob | undefined;
  /**
   * Why the replica's scheduler cannot be vouched for (its event loop silent too long), for
   * /healthz served from another thread; undefined when it can.
   */
  stalled?(): string | undefined;
  /** This host's wall clock minus the ledger's, once known. */
  hostOffsetMs(): number | undefined;
  /** Runtime schedules, one-off runs and backfill; absent on a view without them. */
  readonly runtime?: RuntimeAdmin;
}

/** The lease whose leader may fire `job`: its shard's with sharded leadership, else the scheduler's. */
export function jobLease(r: Pick<ReplicaView, 'leaseName' | 'shardLeases'>, job: string): string {
  const leases = r.shardLeases;
  return leases && leases.length > 1 ? leases[shardOf(job, leases.length)]! : r.leaseName;
}
