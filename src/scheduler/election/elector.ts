import { EventEmitter } from 'node:events';
import { systemClock, type Clock } from '../../clock.js';
import { LeaseLostError, NotHolderError } from '../../errors.js';
import type { Lease, LeaseBackend } from '../../locks/lease.js';
import { resolveElectorOptions, type ElectorOptions, type ResolvedElectorOptions } from './elector-options.js';
import { LeaderTerm, Tenure, describeTenureEnd, mayStillHold, type TenureEnd } from './tenure.js';

export type { TenureEnd } from './tenure.js';

export type ElectorRole = 'follower' | 'candidate' | 'leader' | 'stopped';

export interface ElectorEvents {
  'role:changed': [role: ElectorRole];
  'lease:acquired': [lease: Lease];
  'lease:renewed': [lease: Lease, latencyMs: number];
  /**
   * Leadership ended; reason says why (lost, local deadline, resigned, fence refused, stopped) as
   * text, end says it as data.
   */
  'lease:lost': [lease: Lease, reason: string, end: TenureEnd];
  'backend:error': [error: Error];
}

export interface ElectorCallbacks {
  /** Called before each campaign: raise the backend's token floor, for example. */
  beforeCampaign?: () => Promise<void>;
  /** Called once per tenure; signal aborts when the tenure ends for any reason. */
  onStartedLeading?: (lease: Lease, signal: AbortSignal) => void | Promise<void>;
  /** Always called after onStartedLeading, once the tenure is over. */
  onStoppedLeading?: (reason: string, end: TenureEnd) => void | Promise<void>;
}

/** Outcome of one renew, raced against the end of the tenure. */
type RenewOutcome = { renewed: Lease } | { failed: unknown } | { ended: TenureEnd };

/**
 * Leader election on any LeaseBackend, in two states (as River's elector): the follower state
 * campaigns until it wins a lease, the leader state renews it until the tenure ends, and the
 * reason it ended (a TenureEnd) decides what happens next. While leading it renews every
 * `renewEveryMs`, and steps down by itself at the lease's local deadline whether or not the
 * backend ever answers: a renew that hangs cannot keep it leading.
 */
export class Elector extends EventEmitter<ElectorEvents> {
  readonly options: ResolvedElectorOptions;
  private readonly clock: Clock;
  private readonly random: () => number;
  private roleValue: ElectorRole = 'follower';
  private tenure: Tenure | undefined;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private campaign = new AbortController();

  /** random: the source of retry jitter, in [0, 1); injectable so tests can fix it. */
  constructor(
    private readonly backend: LeaseBackend,
    options: ElectorOptions,
    private readonly callbacks: ElectorCallbacks = {},
    clock: Clock = systemClock,
    random: () => number = Math.random,
  ) {
    super();
    this.options = resolveElectorOptions(options);
    this.clock = clock;
    this.random = random;
  }

  get role(): ElectorRole {
    return this.roleValue;
  }

  get backendKind(): string {
    return this.backend.kind;
  }

  /** The lease while this replica leads and its local deadline has not passed; else undefined. */
  lease(): Lease | undefined {
    const tenure = this.tenure;
    if (!tenure || tenure.over || tenure.term.remaining(this.clock.monotonic()) <= 0) return undefined;
    return tenure.term.lease;
  }

  /** Wall-clock ms when the current tenure began, if leading. */
  get leadingSince(): number | undefined {
    return this.tenure?.term.startedAt;
  }

  start(): void {
    if (this.loop) return;
    this.stopping = false;
    this.campaign = new AbortController();
    this.loop = this.run();
  }

  /**
   * Give up leadership now (releasing the lease so a follower takes over at once) and keep
   * campaigning, after leaving the field to the others for `pauseMs` (default a TTL). A sharded
   * replica handing a shard back pauses less: the others are already waiting, and if they hand it
   * back too, a TTL of everyone pausing would leave the shard with no leader.
   */
  async resign(pauseMs?: number): Promise<boolean> {
    if (!this.tenure || this.tenure.over) return false;
    this.tenure.end(pauseMs === undefined ? { kind: 'resigned' } : { kind: 'resigned', pauseMs });
    return true;
  }

  /** Step down because something (the fence) proved this tenure stale. */
  stepDown(reason: string): void {
    this.tenure?.end({ kind: 'fence', detail: reason });
  }

  /** Stop campaigning; if leading, resign and release the lease. Resolves when fully stopped. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.campaign.abort();
    this.tenure?.end({ kind: 'stopped' });
    await this.loop;
    this.loop = undefined;
    this.setRole('stopped');
  }

  private setRole(role: ElectorRole): void {
    if (this.roleValue === role) return;
    this.roleValue = role;
    this.emit('role:changed', role);
  }

  private request() {
    const o = this.options;
    return { name: o.leaseName, holder: o.replicaId, ttlMs: o.ttlMs, safetyMarginMs: o.safetyMarginMs };
  }

  private backoff(): number {
    return this.options.retryPeriodMs + Math.floor(this.random() * (this.options.retryJitterMs + 1));
  }

  /** Wait ms, or less if stop() aborts the campaign; never rejects. */
  private async pause(ms: number): Promise<void> {
    await this.clock.sleep(ms, this.campaign.signal).catch(() => {});
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      const lease = await this.runFollowerState();
      if (!lease) continue;
      const end = await this.runLeaderState(lease);
      if (this.stopping) break;
      this.setRole('follower');
      // After a resign, leave the field to the others for a moment; they were woken by the release.
      await this.pause(end.kind === 'resigned' ? (end.pauseMs ?? this.options.ttlMs) : this.backoff());
    }
  }

  /**
   * Follower state: campaign until the backend grants the lease. Undefined when the campaign
   * failed (after backing off) or stop() came first (after releasing a lease won meanwhile).
   */
  private async runFollowerState(): Promise<Lease | undefined> {
    this.setRole('candidate');
    let lease: Lease;
    try {
      await this.callbacks.beforeCampaign?.();
      lease = await this.backend.acquire(this.request(), this.campaign.signal);
    } catch (err) {
      if (this.stopping) return undefined;
      this.emit('backend:error', err as Error);
      this.setRole('follower');
      await this.pause(this.backoff());
      return undefined;
    }
    if (this.stopping) {
      await this.backend.release(lease).catch(() => {});
      return undefined;
    }
    return lease;
  }

  /** Leader state: one tenure, from the won lease to its end; returns why it ended. */
  private async runLeaderState(first: Lease): Promise<TenureEnd> {
    const tenure = new Tenure(new LeaderTerm(first, this.clock.now()), this.clock);
    this.tenure = tenure;
    const renewing = this.keepRenewing(tenure);
    this.setRole('leader');
    this.emit('lease:acquired', first);
    const callbackSignal = new AbortController();
    this.startLeading(tenure, callbackSignal.signal);
    const end = await tenure.ended;
    await renewing;
    const lease = tenure.term.lease;
    this.tenure = undefined;
    const reason = describeTenureEnd(end);
    callbackSignal.abort(new LeaseLostError(lease.name, reason));
    if (mayStillHold(end)) await this.release(lease);
    this.emit('lease:lost', lease, reason, end);
    try {
      await this.callbacks.onStoppedLeading?.(reason, end);
    } catch (err) {
      this.emit('backend:error', err as Error);
    }
    return end;
  }

  /** Run onStartedLeading without waiting for it; if it throws, the tenure ends. */
  private startLeading(tenure: Tenure, signal: AbortSignal): void {
    const lease = tenure.term.lease;
    void Promise.resolve()
      .then(() => this.callbacks.onStartedLeading?.(lease, signal))
      .catch((error: Error) => tenure.end({ kind: 'callback-failed', error }));
  }

  /**
   * Renew every renewEveryMs until the tenure ends. A failed renew is retried sooner; a refused
   * one ends the tenure as lost. A renew that hangs is simply outlived: the tenure's deadline
   * timer ends it, and this loop returns as soon as it has.
   */
  private async keepRenewing(tenure: Tenure): Promise<void> {
    let wait = this.options.renewEveryMs;
    for (;;) {
      const slept = await this.clock.sleep(wait, tenure.signal).then(
        () => true,
        () => false,
      );
      if (!slept || tenure.over) return;
      const sentAt = this.clock.monotonic();
      const outcome = await this.renewOnce(tenure);
      if ('ended' in outcome) return;
      if ('renewed' in outcome) {
        tenure.renewed(outcome.renewed);
        this.emit('lease:renewed', outcome.renewed, this.clock.monotonic() - sentAt);
        wait = this.options.renewEveryMs;
      } else if (outcome.failed instanceof LeaseLostError) {
        tenure.end({ kind: 'lost', error: outcome.failed });
        return;
      } else {
        this.emit('backend:error', outcome.failed as Error);
        wait = Math.min(this.options.retryPeriodMs, this.options.renewEveryMs);
      }
    }
  }

  /** One renew of the term's lease, or the tenure's end if that comes first. */
  private async renewOnce(tenure: Tenure): Promise<RenewOutcome> {
    const renew = this.backend.renew(tenure.term.lease).then(
      (renewed): RenewOutcome => ({ renewed }),
      (failed: unknown): RenewOutcome => ({ failed }),
    );
    const outcome = await Promise.race([renew, tenure.ended.then((ended): RenewOutcome => ({ ended }))]);
    // A renew that answers just as the tenure ends changes nothing: the end stands.
    return tenure.over && !('ended' in outcome) ? { ended: await tenure.ended } : outcome;
  }

  private async release(lease: Lease): Promise<void> {
    try {
      await this.backend.release(lease);
    } catch (err) {
      if (!(err instanceof NotHolderError)) this.emit('backend:error', err as Error);
    }
  }
}
