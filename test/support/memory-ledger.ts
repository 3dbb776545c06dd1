/**
 * An in-memory stand-in for the fire loop's ledger operations, for driven-clock unit tests. It
 * keeps the same rules as the SQL (fence: refuse lower tokens; unique (job, scheduled_at) for every
 * trigger but 'manual'; a batch past the leader's deadline rolls back whole, fence included;
 * active = pending/running/retrying). test/ledger/contract.ts holds it to the real Ledger's
 * behaviour; MemoryRunLedger (memory-run-ledger.ts) is the workers' side over the same runs.
 */
import { StaleTokenError } from '../../src/errors.js';
import { slotOwner } from '../../src/cron/job-names.js';
import { sameSchedule } from '../../src/cron/schedule-era.js';
import type { FireLoopLedger } from '../../src/scheduler/firing/fire-loop.js';
import type { FireTrigger } from '../../src/cron/fire-trigger.js';
import type { CommittedFire, FireBatchResult, FireRequest } from '../../src/ledger/fire-batch.js';
import type { JobPause, PauseRequest } from '../../src/ledger/ledger.js';
import type { LastCommit, MissedRangeRecord, OpenEra } from '../../src/ledger/fire-ledger.js';

export interface MemoryRun {
  id: bigint;
  job: string;
  scheduledAt: Date;
  trigger: string;
  leaderToken: bigint;
  state: string;
  /** enqueued_at set: released to the queue (at its commit, or once handed over). */
  enqueued: boolean;
  /** A cw_hand_overs row: released at its commit, the queue's taking it not yet confirmed. */
  handOver?: boolean;
  error?: string;
  /** When it was committed (the `now` hook's clock): what a stand-in learns the leader's lateness from. */
  createdAt?: number;
  /** Overlap 'coalesce': the later slots this waiting run stands for. */
  coalesced?: { count: number; until: Date };
}

export class MemoryLedger implements FireLoopLedger {
  readonly runs: MemoryRun[] = [];
  readonly fences = new Map<string, bigint>();
  readonly paused = new Set<string>();
  /** Reason, who, since and until of the jobs in `paused` that were paused with them. */
  readonly pauseInfo = new Map<string, JobPause>();
  /** Test hook: the clock `pause` stamps `at` with. */
  now: () => number = () => Date.now();
  /** Test hook: the next `failCommits` commits throw `commitError` and write nothing (rolled back). */
  failCommits = 0;
  /** Test hook: the next `failAfterCommits` commits write everything, then throw (the reply is lost). */
  failAfterCommits = 0;
  commitError: Error = new Error('connection reset by peer');
  /** Every commitFires call, in order: what was asked and how it ended. */
  readonly commitLog: {
    fires: FireRequest[];
    token: bigint;
    outcome: 'committed' | 'failed' | 'reply lost' | 'refused' | 'rolled back';
  }[] = [];
  /** Missed ranges recorded with commits (a retried commit may record a range again). */
  readonly missed: MissedRangeRecord[] = [];
  /** Schedule eras, open and closed, in the order opened. */
  readonly eras: (OpenEra & { to: Date | null })[] = [];
  private nextId = 1n;

  async openEras(): Promise<Map<string, OpenEra>> {
    return new Map(this.eras.filter((e) => e.to === null).map((e) => [e.job, e]));
  }

  async openNewEras(eras: readonly OpenEra[], leader: { fenceResource: string; token: bigint }): Promise<void> {
    this.checkFence(leader.fenceResource, leader.token);
    for (const era of eras) {
      // As the ledger does: a schedule already open is not opened again.
      const open = this.eras.find((e) => e.job === era.job && e.to === null);
      if (open && sameSchedule(open, era)) continue;
      if (open) open.to = era.from;
      this.eras.push({ ...era, to: null });
    }
  }

  async advanceFence(resource: string, token: bigint): Promise<void> {
    this.checkFence(resource, token);
    this.fences.set(resource, token);
  }

  async fenceToken(resource: string): Promise<bigint | null> {
    return this.fences.get(resource) ?? null;
  }

  private checkFence(resource: string, token: bigint): void {
    const highest = this.fences.get(resource);
    if (highest !== undefined && highest > token) throw new StaleTokenError(resource, token, highest);
  }

  async commitFires(
    fires: FireRequest[],
    leader: { fenceResource: string; token: bigint; replicaId: string; stillLeading: () => boolean },
    missed: readonly MissedRangeRecord[] = [],
  ): Promise<FireBatchResult> {
    if (fires.length === 0) {
      if (missed.length > 0) {
        this.checkFence(leader.fenceResource, leader.token);
        this.missed.push(...missed);
      }
      return { committed: [], duplicates: 0, cancelled: [] };
    }
    const log = { fires, token: leader.token, outcome: 'failed' as (typeof this.commitLog)[number]['outcome'] };
    this.commitLog.push(log);
    if (this.failCommits > 0) {
      this.failCommits--;
      throw this.commitError;
    }
    try {
      this.checkFence(leader.fenceResource, leader.token);
    } catch (err) {
      log.outcome = 'refused';
      throw err;
    }
    // Past the deadline the SQL rolls the whole transaction back, the fence's advance with it.
    if (!leader.stillLeading()) {
      log.outcome = 'rolled back';
      return { committed: [], duplicates: 0, cancelled: [] };
    }
    this.fences.set(leader.fenceResource, leader.token);
    this.missed.push(...missed);
    const committed: CommittedFire[] = [];
    const replaced = new Map<string, Date>(); // job → its newest inserted 'replace' fire
    for (const f of fires) {
      // The unique key is partial: manual triggers are outside it, each one its own run. It is the
      // slot owner's: a runtime schedule's slot under any handler's name.
      const taken = (r: MemoryRun) =>
        r.trigger !== 'manual' &&
        slotOwner(r.job) === slotOwner(f.job) &&
        r.scheduledAt.getTime() === f.scheduledAt.getTime();
      if (f.trigger !== 'manual' && this.runs.some(taken)) continue;
      const state = f.state ?? 'pending';
      const run: MemoryRun = {
        id: this.nextId++,
        job: f.job,
        scheduledAt: f.scheduledAt,
        trigger: f.trigger,
        leaderToken: leader.token,
        state,
        enqueued: state === 'skipped' || !f.hold,
        handOver: state === 'pending' && !f.hold,
        error: f.error,
        createdAt: this.now(),
      };
      this.runs.push(run);
      committed.push({
        runId: run.id,
        job: f.job,
        scheduledAt: f.scheduledAt,
        trigger: f.trigger,
        state,
        hold: f.hold ?? false,
      });
      const newest = replaced.get(f.job);
      if (f.replace && (!newest || newest < f.scheduledAt)) replaced.set(f.job, f.scheduledAt);
    }
    this.coalesce(fires, committed);
    // Overlap 'replace', as in the SQL: an inserted replace fire cancels the job's other active runs.
    const keep = new Set(committed.map((c) => c.runId));
    const cancelled: bigint[] = [];
    for (const r of this.runs) {
      const by = replaced.get(r.job);
      if (by && isActive(r) && !keep.has(r.id)) {
        r.state = 'cancelled';
        r.error = `replaced by the fire of ${by.toISOString()}`;
        cancelled.push(r.id);
      }
    }
    if (this.failAfterCommits > 0) {
      this.failAfterCommits--;
      log.outcome = 'reply lost';
      throw this.commitError;
    }
    log.outcome = 'committed';
    return { committed, duplicates: fires.length - committed.length, cancelled };
  }

  /** Overlap 'coalesce', as coalesced-fires.ts: the job's waiting run stands for the skipped slots, or the oldest becomes it. */
  private coalesce(fires: FireRequest[], committed: CommittedFire[]): void {
    const key = (f: { job: string; scheduledAt: Date }) => `${f.job}@${f.scheduledAt.getTime()}`;
    const flagged = new Set(fires.filter((f) => f.coalesce).map(key));
    const byJob = new Map<string, CommittedFire[]>();
    for (const c of committed)
      if (c.state === 'skipped' && flagged.has(key(c))) byJob.set(c.job, [...(byJob.get(c.job) ?? []), c]);
    for (const [job, skipped] of byJob) {
      skipped.sort((a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime());
      const ids = new Set(skipped.map((c) => c.runId));
      const newest = skipped.at(-1)!.scheduledAt;
      const waiting = this.runs
        .filter((r) => r.job === job && r.state === 'pending' && !r.enqueued && !ids.has(r.id))
        .sort((a, b) => b.scheduledAt.getTime() - a.scheduledAt.getTime())[0];
      let named = skipped;
      let standing = waiting;
      if (standing) {
        const count = (standing.coalesced?.count ?? 0) + skipped.length;
        const until = standing.coalesced && standing.coalesced.until > newest ? standing.coalesced.until : newest;
        standing.coalesced = { count, until };
      } else {
        const [first, ...rest] = skipped;
        standing = this.runs.find((r) => r.id === first!.runId)!;
        Object.assign(standing, { state: 'pending', enqueued: false, error: undefined });
        if (rest.length > 0) standing.coalesced = { count: rest.length, until: newest };
        Object.assign(first!, { state: 'pending', hold: true });
        named = rest;
      }
      for (const c of named)
        this.runs.find((r) => r.id === c.runId)!.error = `overlap "coalesce": run ${standing.id} stands for it`;
    }
  }

  /** As the SQL: the fence's current token, nothing before any leader raised it, no 'replace'. */
  async commitStandInFires(
    fires: FireRequest[],
    standIn: { fenceResource: string; replicaId: string },
  ): Promise<FireBatchResult> {
    const token = this.fences.get(standIn.fenceResource);
    const accepted = fires.filter((f) => !f.replace);
    if (token === undefined || accepted.length === 0) return { committed: [], duplicates: 0, cancelled: [] };
    return this.commitFires(accepted, { ...standIn, token, stillLeading: () => true });
  }

  async lastFiredOf(jobs: readonly string[]): Promise<Map<string, Date>> {
    const all = await this.lastFired();
    const owners = new Set(jobs.map(slotOwner));
    return new Map([...all].filter(([owner]) => owners.has(owner)));
  }

  async lastCommitsOf(jobs: readonly string[]): Promise<Map<string, LastCommit>> {
    const out = new Map<string, LastCommit>();
    for (const [owner, slot] of await this.lastFiredOf(jobs)) {
      const run = this.runs.find(
        (r) => r.trigger !== 'manual' && slotOwner(r.job) === owner && r.scheduledAt.getTime() === slot.getTime(),
      );
      out.set(owner, {
        slot,
        trigger: run?.trigger ?? null,
        committedAt: run?.createdAt === undefined ? null : new Date(run.createdAt),
      });
    }
    return out;
  }

  async markEnqueued(runIds: bigint[]): Promise<void> {
    for (const r of this.runs) if (runIds.includes(r.id)) Object.assign(r, { enqueued: true, handOver: false });
  }

  async unenqueued(limit: number, queuedJobs: string[]): Promise<CommittedFire[]> {
    return this.runs
      .filter((r) => (!r.enqueued || r.handOver) && r.state === 'pending')
      .filter(
        (r) =>
          !(
            queuedJobs.includes(r.job) &&
            this.runs.some((a) => a.job === r.job && a.id !== r.id && (a.enqueued || a.id < r.id) && isActive(a))
          ),
      )
      .slice(0, limit)
      .map((r) => ({
        runId: r.id,
        job: r.job,
        scheduledAt: r.scheduledAt,
        trigger: r.trigger as FireTrigger,
        state: 'pending' as const,
        hold: false,
      }));
  }

  /** As the SQL: by slot owner, a runtime schedule's newest fire under any handler's name. */
  async lastFired(): Promise<Map<string, Date>> {
    const out = new Map<string, Date>();
    for (const r of this.runs) {
      if (r.trigger === 'manual') continue;
      const prev = out.get(slotOwner(r.job));
      if (!prev || prev < r.scheduledAt) out.set(slotOwner(r.job), r.scheduledAt);
    }
    return out;
  }

  async pausedJobs(): Promise<Set<string>> {
    return new Set(this.paused);
  }

  async setPaused(job: string, paused: boolean): Promise<void> {
    if (paused) this.paused.add(job);
    else this.paused.delete(job);
    this.pauseInfo.delete(job);
  }

  async pauses(): Promise<Map<string, JobPause>> {
    const none = { reason: null, by: null, at: null, until: null };
    return new Map([...this.paused].map((job) => [job, this.pauseInfo.get(job) ?? { job, ...none }]));
  }

  async pause(job: string, request: PauseRequest): Promise<JobPause> {
    const pause: JobPause = { job, ...request, at: new Date(this.now()) };
    this.paused.add(job);
    this.pauseInfo.set(job, pause);
    return pause;
  }

  async expirePauses(nowMs: number, fence: { resource: string; token: bigint }): Promise<JobPause[]> {
    await this.advanceFence(fence.resource, fence.token);
    const lifted: JobPause[] = [];
    for (const [job, pause] of this.pauseInfo) {
      if (pause.until === null || pause.until.getTime() > nowMs || !this.paused.has(job)) continue;
      lifted.push(pause);
      this.paused.delete(job);
      this.pauseInfo.delete(job);
    }
    return lifted;
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

  /** Test helper: finish a run as a worker would. */
  finish(id: bigint, state = 'completed'): void {
    const run = this.runs.find((r) => r.id === id);
    if (run) run.state = state;
  }

  of(job: string): MemoryRun[] {
    return this.runs.filter((r) => r.job === job);
  }
}

export function isActive(r: MemoryRun): boolean {
  return r.state === 'pending' || r.state === 'running' || r.state === 'retrying';
}
