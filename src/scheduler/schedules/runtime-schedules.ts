/**
 * Schedules created at runtime, as the leader's fire loop sees them: each one a job of its own,
 * named "<handler>/<id>" after its current handler (its slots are keyed by its id, whatever the
 * handler: src/cron/job-names.ts), whose schedule is made of its versions, each in effect from its
 * effective_at until the next one. A slot is planned with the version in effect at its instant,
 * and the commit re-checks that version against the ledger in the same transaction
 * (schedule-ledger.ts states the rule).
 */
import type { Logger } from 'pino';
import type { Clock } from '../../clock.js';
import type { FireRequest } from '../../ledger/fire-ledger.js';
import type { ScheduleLedger, ScheduleSpec, ScheduleVersion } from '../../ledger/schedule-ledger.js';
import { CronSchedule } from '../../cron/cron-schedule.js';
import { runtimeJobName } from '../../cron/job-names.js';
import type { FireLoopLedger } from '../firing/fire-loop.js';
import type { FireSchedule, ScheduledJob, ScheduledJobs } from '../../cron/scheduled-job.js';

// Where their callers have always found them; the names' rules live in src/cron/job-names.ts.
export { RUNTIME_SEPARATOR, handlerOf, runtimeJobName } from '../../cron/job-names.js';

/** How far back versions are loaded: the longest catch-up window a schedule may have. */
const MAX_CATCH_UP_MS = 7 * 24 * 3600 * 1000;

/** One version's span of time; `schedule` null while the version pauses or deletes the schedule. */
interface Segment {
  from: number;
  until: number;
  version: number;
  schedule: CronSchedule | null;
  spec: ScheduleSpec | null;
}

/** A runtime schedule's slots: in each version's span, that version's cron and zone. */
export class VersionedSchedule implements FireSchedule {
  constructor(private readonly segments: readonly Segment[]) {}

  private get current(): Segment {
    return this.segments[this.segments.length - 1]!;
  }

  get expression(): string {
    return this.lastSpec()?.cron ?? '';
  }

  get timezone(): string {
    return this.lastSpec()?.timezone ?? 'UTC';
  }

  /** The newest version's spec that still says something (a deleted schedule's last one). */
  lastSpec(): ScheduleSpec | null {
    for (let i = this.segments.length - 1; i >= 0; i--) if (this.segments[i]!.spec) return this.segments[i]!.spec;
    return null;
  }

  get version(): number {
    return this.current.version;
  }

  /** Deleted, or paused, from its last version on. */
  get stopped(): boolean {
    return this.current.schedule === null;
  }

  get stoppedSince(): number {
    return this.current.from;
  }

  /** When the current version took effect. */
  get changedAt(): number {
    return this.current.from;
  }

  nextAfter(afterMs: number): number | null {
    for (const seg of this.segments) {
      if (seg.until <= afterMs + 1 || !seg.schedule) continue;
      const t = seg.schedule.nextAfter(Math.max(afterMs, seg.from - 1));
      if (t !== null && t < seg.until) return t;
    }
    return null;
  }

  between(fromMs: number, toMs: number, limit = 10_000): number[] {
    const out: number[] = [];
    let t = limit > 0 ? this.nextAfter(fromMs) : null;
    while (t !== null && t <= toMs && out.length < limit) {
      out.push(t);
      t = this.nextAfter(t);
    }
    return out;
  }

  /** The version in effect at `t`, if `t` is one of its slots. */
  versionFor(t: number): Segment | undefined {
    const seg = this.segments.find((s) => s.from <= t && t < s.until);
    if (!seg?.schedule || seg.schedule.nextAfter(t - 1) !== t) return undefined;
    return seg;
  }
}

export interface RuntimeJob extends ScheduledJob {
  readonly id: string;
  readonly handler: string;
  readonly schedule: VersionedSchedule;
}

/** Build a schedule's job from its versions (oldest first); undefined if none still says anything. */
export function runtimeJob(id: string, versions: readonly ScheduleVersion[]): RuntimeJob | undefined {
  const segments: Segment[] = versions.map((v, i) => ({
    from: v.effectiveAt.getTime(),
    until: versions[i + 1]?.effectiveAt.getTime() ?? Infinity,
    version: v.version,
    spec: v.after,
    schedule: v.after && !v.after.paused ? CronSchedule.parse(v.after.cron, v.after.timezone) : null,
  }));
  const schedule = new VersionedSchedule(segments);
  const spec = schedule.lastSpec();
  if (!spec) return undefined;
  return {
    id,
    handler: spec.handler,
    name: runtimeJobName(spec.handler, id),
    schedule,
    misfire: spec.misfire,
    overlap: spec.overlap,
    catchUpWindowMs: spec.catchUpWindowMs,
    misfireGraceMs: spec.misfireGraceMs,
    // A job from code's defaults (define-job.ts): runtime schedules do not choose these yet.
    maxCatchUp: 1000,
    overlapQueueMax: 1,
  };
}

export interface RuntimeSchedulesOptions {
  /** The jobs from code. */
  code: ScheduledJobs;
  ledger: Pick<ScheduleLedger, 'versionsInEffect' | 'currentVersions' | 'fingerprint'>;
  clock: Clock;
  logger: Logger;
}

/**
 * The jobs the leader fires: those from code, then the runtime schedules loaded from the ledger
 * (by name "<handler>/<id>"). Kept current by `refresh` (a notification) and `reconcile` (the
 * periodic backstop).
 */
export class RuntimeSchedules implements ScheduledJobs {
  private readonly byName = new Map<string, RuntimeJob>();
  private readonly byId = new Map<string, RuntimeJob>();
  private all: readonly ScheduledJob[] | undefined;
  private lastFingerprint: string | undefined;

  constructor(private readonly o: RuntimeSchedulesOptions) {}

  get(name: string): ScheduledJob | undefined {
    return this.o.code.get(name) ?? this.byName.get(name);
  }

  require(name: string): ScheduledJob {
    return this.byName.get(name) ?? this.o.code.require(name);
  }

  list(): readonly ScheduledJob[] {
    // No runtime schedules: the code's own list, not a copy of a million jobs in one turn.
    this.all ??= this.byName.size === 0 ? this.o.code.list() : [...this.o.code.list(), ...this.byName.values()];
    return this.all;
  }

  /** Runtime schedules held, by id. */
  runtime(id: string): RuntimeJob | undefined {
    return this.byId.get(id);
  }

  get size(): number {
    return this.byId.size;
  }

  /** The job names of the runtime schedules held. */
  runtimeNames(): string[] {
    return [...this.byName.keys()];
  }

  /** Load every schedule (start of a tenure). Returns how many are held. */
  async load(): Promise<number> {
    const fingerprint = await this.o.ledger.fingerprint();
    const versions = await this.o.ledger.versionsInEffect(new Date(this.o.clock.now() - MAX_CATCH_UP_MS));
    this.byName.clear();
    this.byId.clear();
    this.apply(versions, []);
    this.lastFingerprint = fingerprint;
    return this.byId.size;
  }

  /** Reload some schedules (a notification). Returns the names of the jobs that changed. */
  async refresh(ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const versions = await this.o.ledger.versionsInEffect(new Date(this.o.clock.now() - MAX_CATCH_UP_MS), [...ids]);
    return this.apply(versions, ids);
  }

  /**
   * The backstop for a lost notification (a dropped LISTEN connection): one cheap aggregate; only
   * if it moved, the versions are compared and the changed schedules reloaded.
   */
  async reconcile(): Promise<string[]> {
    const fingerprint = await this.o.ledger.fingerprint();
    if (fingerprint === this.lastFingerprint) return [];
    const current = await this.o.ledger.currentVersions();
    const changed = [...current].filter(([id, v]) => this.byId.get(id)?.schedule.version !== v).map(([id]) => id);
    for (const id of this.byId.keys()) if (!current.has(id)) changed.push(id);
    const names = await this.refresh(changed);
    this.lastFingerprint = fingerprint;
    if (names.length > 0) this.o.logger.info({ schedules: changed.length }, 'reconcile picked up schedule changes');
    return names;
  }

  /** Replace the schedules `ids` (and any in `versions`) with what `versions` says of them. */
  private apply(versions: readonly ScheduleVersion[], ids: readonly string[]): string[] {
    const grouped = new Map<string, ScheduleVersion[]>(ids.map((id) => [id, []]));
    for (const v of versions) {
      const list = grouped.get(v.scheduleId);
      if (list) list.push(v);
      else grouped.set(v.scheduleId, [v]);
    }
    const changed: string[] = [];
    const now = this.o.clock.now();
    for (const [id, list] of grouped) {
      const old = this.byId.get(id);
      if (old) {
        this.byName.delete(old.name);
        this.byId.delete(id);
        changed.push(old.name);
      }
      const job = list.length > 0 ? runtimeJob(id, list) : undefined;
      if (!job) continue;
      // A deleted schedule is kept while a slot before its deletion may still need catching up.
      const deleted = list.at(-1)!.after === null;
      if (deleted && job.schedule.stoppedSince < now - job.catchUpWindowMs) continue;
      this.byName.set(job.name, job);
      this.byId.set(id, job);
      if (job.name !== old?.name) changed.push(job.name);
    }
    this.all = undefined;
    return changed;
  }

  /**
   * Name each runtime schedule fire's version and payload: the version in effect at the slot, if
   * the slot is one of its own (a plan made before a change arrived is dropped here, and the commit
   * re-checks against the ledger).
   */
  annotate(fires: FireRequest[]): FireRequest[] {
    const out: FireRequest[] = [];
    let dropped = 0;
    for (const f of fires) {
      const job = this.byName.get(f.job);
      if (!job || f.trigger === 'manual') {
        out.push(job && f.trigger === 'manual' ? { ...f, payload: job.schedule.lastSpec()?.payload } : f);
        continue;
      }
      const seg = job.schedule.versionFor(f.scheduledAt.getTime());
      if (!seg) {
        dropped++;
        continue;
      }
      out.push({ ...f, schedule: { id: job.id, version: seg.version }, payload: seg.spec?.payload ?? null });
    }
    if (dropped > 0)
      this.o.logger.info({ dropped }, 'dropped fires planned with a schedule version no longer in effect');
    return out;
  }
}

/** The fire loop's ledger, with runtime schedule fires named by version on their way to the commit. */
export function withRuntimeSchedules<L extends FireLoopLedger>(ledger: L, schedules: RuntimeSchedules): L {
  // Every other method is the ledger's own (through the prototype), whatever the seam grows to.
  const wrapped = Object.create(ledger) as L;
  wrapped.commitFires = (fires, leader, missed) => ledger.commitFires(schedules.annotate(fires), leader, missed);
  return wrapped;
}
