/**
 * What the admin server and the metrics see of a replica: a narrow, mostly read-only view, so the
 * admin layer needs neither the Replica class above it nor its parts (elector, fire loop, pools).
 * Replica implements it.
 */
import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { CommittedFire } from '../ledger/fire-ledger.js';
import type { OnceRun, StoredSchedule } from '../ledger/schedule-ledger.js';
import type { BackfillRequest, BackfillStep } from '../scheduler/firing/backfill.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import type { JobPause, PauseRequest } from '../ledger/pauses.js';
import type { Lease } from '../locks/lease.js';
import type { ElectorEvents, ElectorRole } from '../scheduler/election/elector.js';
import type { FireLoopEvents } from '../scheduler/firing/fire-loop.js';
import type { CodeJob } from '../cron/scheduled-job.js';
import { shardOf } from '../scheduler/shards/shard-map.js';

/** The leader lifted an expired pause (once across replicas). */
export interface PauseEvents {
  'pause:expired': [pause: JobPause];
}

/** Everything a replica announces: its elector's and its fire loop's events, and pause expiries. */
export type ReplicaEvents = FireLoopEvents & ElectorEvents & PauseEvents;

export interface ReplicaView extends Pick<EventEmitter<ReplicaEvents>, 'on' | 'off'> {
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
  /** Answers when the ledger's own pool can run a query (for /readyz). */
  pingLedger(): Promise<void>;
  /** Fire a job now (leader only). */
  trigger(job: string): Promise<CommittedFire>;
  setPaused(job: string, paused: boolean): Promise<void>;
  /** Pause with a reason, who and an optional expiry (slots at or after `until` fire). */
  pause(job: string, request: PauseRequest): Promise<JobPause>;
  /** Give up leadership; false when not leading. */
  resign(): Promise<boolean>;
  /** Retry a failed or cancelled run (leader only, fenced like a fire). */
  retry(runId: bigint): Promise<RetriedRun>;
  /** Runtime schedules, one-off runs and backfill; absent on a view without them. */
  readonly runtime?: RuntimeAdmin;
}

/** The admin API's mutations of runtime schedules, one-off runs and backfills. */
export interface RuntimeAdmin {
  create(id: string, input: unknown, actor: string): Promise<StoredSchedule>;
  /** A partial input laid over the current version. */
  update(id: string, input: unknown, actor: string): Promise<StoredSchedule>;
  setPaused(id: string, paused: boolean, actor: string): Promise<StoredSchedule>;
  delete(id: string, actor: string): Promise<StoredSchedule>;
  /** Leader only (NotLeaderError otherwise). */
  once(job: string, o: { at: Date; key: string; payload: unknown }): Promise<OnceRun>;
  /** Leader only (NotLeaderError otherwise). */
  backfill(r: BackfillRequest): Promise<BackfillStep>;
}

/** The lease whose leader may fire `job`: its shard's with sharded leadership, else the scheduler's. */
export function jobLease(r: Pick<ReplicaView, 'leaseName' | 'shardLeases'>, job: string): string {
  const leases = r.shardLeases;
  return leases && leases.length > 1 ? leases[shardOf(job, leases.length)]! : r.leaseName;
}
