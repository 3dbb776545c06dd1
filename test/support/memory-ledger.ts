/**
 * An in-memory stand-in for the fire loop's ledger operations, for driven-clock unit tests. It
 * keeps the same rules as the SQL (fence: refuse lower tokens; unique (job, scheduled_at); active
 * = pending/running/retrying); the real Ledger is tested against PostgreSQL in test/integration.
 */
import { StaleTokenError } from '../../src/errors.js';
import type { FireLedger } from '../../src/scheduler/fire-loop.js';
import type { CommittedFire, FireBatchResult, FireRequest, FireTrigger } from '../../src/scheduler/ledger.js';

export interface MemoryRun {
  id: bigint;
  job: string;
  scheduledAt: Date;
  trigger: string;
  leaderToken: bigint;
  state: string;
  enqueued: boolean;
  error?: string;
}

export class MemoryLedger implements FireLedger {
  readonly runs: MemoryRun[] = [];
  readonly fences = new Map<string, bigint>();
  readonly paused = new Set<string>();
  private nextId = 1n;

  async advanceFence(resource: string, token: bigint): Promise<void> {
    const highest = this.fences.get(resource);
    if (highest !== undefined && highest > token) throw new StaleTokenError(resource, token, highest);
    this.fences.set(resource, token);
  }

  async commitFires(
    fires: FireRequest[],
    leader: { fenceResource: string; token: bigint; replicaId: string; stillLeading: () => boolean },
  ): Promise<FireBatchResult> {
    await this.advanceFence(leader.fenceResource, leader.token);
    if (!leader.stillLeading()) return { committed: [], duplicates: 0 };
    const committed: CommittedFire[] = [];
    for (const f of fires) {
      if (this.runs.some((r) => r.job === f.job && r.scheduledAt.getTime() === f.scheduledAt.getTime())) continue;
      const state = f.state ?? 'pending';
      const run: MemoryRun = {
        id: this.nextId++,
        job: f.job,
        scheduledAt: f.scheduledAt,
        trigger: f.trigger,
        leaderToken: leader.token,
        state,
        enqueued: state === 'skipped',
        error: f.error,
      };
      this.runs.push(run);
      committed.push({ runId: run.id, job: f.job, scheduledAt: f.scheduledAt, trigger: f.trigger, state, hold: f.hold ?? false });
    }
    return { committed, duplicates: fires.length - committed.length };
  }

  async markEnqueued(runIds: bigint[]): Promise<void> {
    for (const r of this.runs) if (runIds.includes(r.id)) r.enqueued = true;
  }

  async unenqueued(limit: number, queuedJobs: string[]): Promise<CommittedFire[]> {
    return this.runs
      .filter((r) => !r.enqueued && r.state === 'pending')
      .filter((r) => !(queuedJobs.includes(r.job) && this.runs.some((a) => a.job === r.job && a.id !== r.id && a.enqueued && isActive(a))))
      .slice(0, limit)
      .map((r) => ({ runId: r.id, job: r.job, scheduledAt: r.scheduledAt, trigger: r.trigger as FireTrigger, state: 'pending' as const, hold: false }));
  }

  async lastFired(): Promise<Map<string, Date>> {
    const out = new Map<string, Date>();
    for (const r of this.runs) {
      if (r.trigger === 'manual') continue;
      const prev = out.get(r.job);
      if (!prev || prev < r.scheduledAt) out.set(r.job, r.scheduledAt);
    }
    return out;
  }

  async pausedJobs(): Promise<Set<string>> {
    return new Set(this.paused);
  }

  async activeJobs(jobs: string[]): Promise<Map<string, { ids: bigint[]; held: number }>> {
    const out = new Map<string, { ids: bigint[]; held: number }>();
    for (const r of this.runs) {
      if (!jobs.includes(r.job) || !isActive(r)) continue;
      const entry = out.get(r.job) ?? { ids: [], held: 0 };
      entry.ids.push(r.id);
      if (!r.enqueued) entry.held++;
      out.set(r.job, entry);
    }
    return out;
  }

  async cancelActive(job: string): Promise<bigint[]> {
    const ids: bigint[] = [];
    for (const r of this.runs) {
      if (r.job === job && isActive(r)) {
        r.state = 'cancelled';
        ids.push(r.id);
      }
    }
    return ids;
  }

  /** Test helper: finish a run as a worker would. */
  finish(id: bigint, state = 'completed'): void {
    const run = this.runs.find((r) => r.id === id);
    if (run) run.state = state;
  }

  of(job: string): MemoryRun[] {
    return this.runs.filter((r) => r.job === job);
  }
}

function isActive(r: MemoryRun): boolean {
  return r.state === 'pending' || r.state === 'running' || r.state === 'retrying';
}
