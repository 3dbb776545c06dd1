/**
 * The drill's view of sharded leadership (drill.ts, with shards > 1): every shard's holder beside
 * which replicas run and which have joined (shard-timeline.ts), shard 0's jobs (whose fires end a
 * fault's gap: the leader faults strike shard 0's holder), when every job has fired once, and the
 * wait before each fault until the cluster is whole again.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LeaseBackend } from '../locks/lease.js';
import { shardLeaseName, shardOf } from '../scheduler/shards/shard-map.js';
import type { ReplicaFleet } from './fleet.js';
import { drillJobNames } from './job-names.js';
import type { LedgerProbe } from './ledger-probe.js';
import { isWhole, ShardTimeline, shardsLed, type Liveness, type ShardMeasure } from './shard-timeline.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class ShardWatch {
  private readonly timeline: ShardTimeline;
  /** Shard 0's jobs. */
  readonly leaderJobs: string[];

  constructor(
    observer: LeaseBackend,
    namespace: string,
    private readonly o: { shards: number; jobs: number; replicas: number; ttlMs: number },
    fleet: ReplicaFleet,
    private readonly probe: LedgerProbe,
  ) {
    const leases = Array.from({ length: o.shards }, (_, i) => shardLeaseName(namespace, i, o.shards));
    this.timeline = new ShardTimeline(observer, leases, liveness(fleet, probe, o.ttlMs));
    this.leaderJobs = drillJobNames(o.jobs, o.shards).filter((j) => shardOf(j, o.shards) === 0);
  }

  /**
   * When the last job first fired: each shard starts on its own (its own election, at start-up
   * while the replicas are still loading), and a job's slots before its first fire ever are not
   * caught up (there is nothing to catch up from). Null: not every job within timeoutMs.
   */
  async everyJobFired(timeoutMs: number): Promise<number | null> {
    const deadline = Date.now() + timeoutMs;
    let last = 0;
    for (const job of drillJobNames(this.o.jobs, this.o.shards)) {
      const first = await this.probe.firstCommitAfter(0, Math.max(0, deadline - Date.now()), undefined, [job]);
      if (first === null) return null;
      last = Math.max(last, first);
    }
    return last;
  }

  /**
   * Wait (up to timeoutMs) until every replica is up, a member, and the shards are balanced among
   * them, so a fault strikes a whole cluster. Milliseconds waited, null if not. (The drill then
   * lets it run quietly for its interval: balance is reached by handing the last shards to the
   * newest replica, which then leads shard 0 more often than not, and striking it at that instant
   * would strike every time within a TTL of a hand-over.)
   */
  async untilWhole(timeoutMs = 60_000): Promise<number | null> {
    const start = Date.now();
    while (Date.now() - start < timeoutMs) {
      const now = this.timeline.samples.at(-1);
      if (now && isWhole(now, this.o.replicas)) return Date.now() - start;
      await sleep(50);
    }
    return null;
  }

  measure(from: number, to: number): ShardMeasure {
    return this.timeline.measure(from, to);
  }

  /** The shards each replica held at some point. */
  led(): Record<string, number[]> {
    return shardsLed(this.timeline.samples);
  }

  /** Stop sampling; with a log directory, leave the samples there (shard-timeline.jsonl), for timing a fault by hand. */
  async stop(logDir: string | undefined): Promise<void> {
    await this.timeline.stop();
    if (logDir)
      writeFileSync(
        join(logDir, 'shard-timeline.jsonl'),
        this.timeline.samples.map((x) => `${JSON.stringify({ ...x, at: new Date(x.at).toISOString() })}\n`).join(''),
      );
  }
}

/**
 * The replicas running (not struck, not frozen), and of them those with a member beat within a TTL
 * (the members the replicas' own balancer counts); while the ledger does not answer, the members it
 * last named.
 */
function liveness(fleet: ReplicaFleet, probe: LedgerProbe, ttlMs: number): () => Promise<Liveness> {
  let members = new Set<string>();
  return async () => {
    members = (await probe.members(ttlMs)) ?? members;
    const running = fleet.liveIds();
    return { running, joined: running.filter((id) => members.has(id)) };
  };
}
