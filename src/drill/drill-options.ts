/**
 * What a failover drill is asked to do: the backend, the fleet, the faults and their settings. Its
 * own file because both the drill (drill.ts) and the strike of a fault (strike.ts) read it, and
 * drill.ts imports strike.ts.
 */
import type { FaultKind } from './faults.js';

export interface DrillOptions {
  backend: 'etcd' | 'redis' | 'postgres';
  replicas: number;
  jobs: number;
  faults: FaultKind[];
  /** Total faults to strike (each chosen kind at least once). */
  faultCount: number;
  /**
   * Sharded leadership: every replica runs with this many shards (default 1: one leader). The
   * leader faults strike shard 0's holder; there must be at least as many jobs as shards for
   * every shard to have a job due every second (fewer: a warning).
   */
  shards?: number;
  /**
   * Run the workflow workload beside the jobs (workflow-workload.ts: a diamond, a fan-out of 50
   * with a fan-in, a step waiting for a signal) and check I7 and each step's effect once.
   */
  workflows?: boolean;
  /** Seconds between the end of one fault and the next. */
  intervalSeconds: number;
  ttlMs: number;
  seed: number;
  /** link-slow: one-way delay ± jitter on the leader's link. Default 75 ± 50 ms. */
  slowLink?: { delayMs: number; jitterMs: number };
  /** link-lossy: share of segments lost (each costs a 200 ms RTO, doubling). Default 0.05. */
  lossRate?: number;
  /**
   * Server for the ledger; the drill creates and drops its own database there. With ledger faults
   * the ledger is the drill's own PostgreSQL, and this server keeps the attempt log (the witness).
   */
  databaseUrl: string;
  /** Redis for BullMQ; with queue faults the drill runs its own redis-server instead. */
  redisUrl: string;
  /** ledger-failover: an asynchronous standby, the assumption broken on purpose. */
  ledgerAsync?: boolean;
  /** ledger-failover: the standby is cut off this long before the primary is killed (default 1000 ms). */
  ledgerLagMs?: number;
  /** redis-sentinel-failover: the replica is cut off this long before the primary is killed (default 0). */
  sentinelLagMs?: number;
  log?: (line: string) => void;
}
