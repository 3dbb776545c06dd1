import { EventEmitter } from 'node:events';
import { systemClock, type Clock, type TimerHandle } from '../clock.js';
import { LeaseLostError, NotHolderError } from '../errors.js';
import type { Lease, LeaseBackend } from '../locks/lease.js';
import { resolveElectorOptions, type ElectorOptions, type ResolvedElectorOptions } from './elector-options.js';

export type ElectorRole = 'follower' | 'candidate' | 'leader' | 'stopped';

export interface ElectorEvents {
  'role:changed': [role: ElectorRole];
  'lease:acquired': [lease: Lease];
  'lease:renewed': [lease: Lease, latencyMs: number];
  /** Leadership ended; reason says why (lost, local deadline, resigned, fence refused, stopped). */
  'lease:lost': [lease: Lease, reason: string];
  'backend:error': [error: Error];
}

export interface ElectorCallbacks {
  /** Called before each campaign: raise the backend's token floor, for example. */
  beforeCampaign?: () => Promise<void>;
  /** Called once per tenure; signal aborts when the tenure ends for any reason. */
  onStartedLeading?: (lease: Lease, signal: AbortSignal) => void | Promise<void>;
  /** Always called after onStartedLeading, once the tenure is over. */
  onStoppedLeading?: (reason: string) => void | Promise<void>;
}

/**
 * Leader election on any LeaseBackend: follower → candidate → leader → follower.
 * While leading it renews every `renewEveryMs`, and steps down by itself at the lease's local
 * deadline whether or not the backend ever answers: a renew that hangs cannot keep it leading.
 */
export class Elector extends EventEmitter<ElectorEvents> {
  readonly options: ResolvedElectorOptions;
  private readonly clock: Clock;
  private roleValue: ElectorRole = 'follower';
  private held: Lease | undefined;
  private leaderSince: number | undefined;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private campaign = new AbortController();
  private endTenure: ((reason: string) => void) | undefined;

  constructor(
    private readonly backend: LeaseBackend,
    options: ElectorOptions,
    private readonly callbacks: ElectorCallbacks = {},
    clock: Clock = systemClock,
  ) {
    super();
    this.options = resolveElectorOptions(options);
    this.clock = clock;
  }

  get role(): ElectorRole {
    return this.roleValue;
  }

  get backendKind(): string {
    return this.backend.kind;
  }

  /** The lease while this replica leads and its local deadline has not passed; else undefined. */
  lease(): Lease | undefined {
    const lease = this.held;
    if (!lease || this.clock.monotonic() >= lease.deadline) return undefined;
    return lease;
  }

  /** Wall-clock ms when the current tenure began, if leading. */
  get leadingSince(): number | undefined {
    return this.held ? this.leaderSince : undefined;
  }

  start(): void {
    if (this.loop) return;
    this.stopping = false;
    this.campaign = new AbortController();
    this.loop = this.run();
  }

  /** Give up leadership now (releasing the lease so a follower takes over at once) and keep campaigning. */
  async resign(): Promise<boolean> {
    if (!this.endTenure) return false;
    this.endTenure('resigned');
    return true;
  }

  /** Step down because something (the fence) proved this tenure stale. */
  stepDown(reason: string): void {
    this.endTenure?.(reason);
  }

  /** Stop campaigning; if leading, resign and release the lease. Resolves when fully stopped. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.campaign.abort();
    this.endTenure?.('stopped');
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
    return this.options.retryPeriodMs + Math.floor(Math.random() * (this.options.retryJitterMs + 1));
  }

  private async pause(ms: number): Promise<void> {
    await this.clock.sleep(ms, this.campaign.signal).catch(() => {});
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      this.setRole('candidate');
      let lease: Lease;
      try {
        await this.callbacks.beforeCampaign?.();
        lease = await this.backend.acquire(this.request(), this.campaign.signal);
      } catch (err) {
        if (this.stopping) break;
        this.emit('backend:error', err as Error);
        this.setRole('follower');
        await this.pause(this.backoff());
        continue;
      }
      if (this.stopping) {
        await this.backend.release(lease).catch(() => {});
        break;
      }
      const reason = await this.lead(lease);
      if (this.stopping) break;
      this.setRole('follower');
      // After a resign, leave the field to the others for a moment; they were woken by the release.
      await this.pause(reason === 'resigned' ? this.options.ttlMs : this.backoff());
    }
  }

  private async lead(first: Lease): Promise<string> {
    let lease = first;
    this.held = lease;
    this.leaderSince = this.clock.now();
    const tenure = new AbortController();
    let deadlineTimer: TimerHandle | undefined;
    let renewTimer: TimerHandle | undefined;
    let over = false;
    let lostByBackend = false;

    const reason = await new Promise<string>((resolve) => {
      const end = (why: string) => {
        if (over) return;
        over = true;
        resolve(why);
      };
      this.endTenure = end;
      const armDeadline = () => {
        deadlineTimer?.cancel();
        deadlineTimer = this.clock.setTimer(
          () => {
            lostByBackend = true;
            end('local deadline passed without a successful renew');
          },
          lease.deadline - this.clock.monotonic(),
        );
      };
      const scheduleRenew = (ms: number) => {
        renewTimer = this.clock.setTimer(async () => {
          const sentAt = this.clock.monotonic();
          try {
            const renewed = await this.backend.renew(lease);
            if (over) return;
            lease = renewed;
            this.held = renewed;
            armDeadline();
            this.emit('lease:renewed', renewed, this.clock.monotonic() - sentAt);
            scheduleRenew(this.options.renewEveryMs);
          } catch (err) {
            if (over) return;
            if (err instanceof LeaseLostError) {
              lostByBackend = true;
              return end(err.message);
            }
            this.emit('backend:error', err as Error);
            scheduleRenew(Math.min(this.options.retryPeriodMs, this.options.renewEveryMs));
          }
        }, ms);
      };
      armDeadline();
      scheduleRenew(this.options.renewEveryMs);
      this.setRole('leader');
      this.emit('lease:acquired', lease);
      Promise.resolve()
        .then(() => this.callbacks.onStartedLeading?.(lease, tenure.signal))
        .catch((err: Error) => end(`onStartedLeading failed: ${err.message}`));
    });

    deadlineTimer?.cancel();
    renewTimer?.cancel();
    this.endTenure = undefined;
    this.held = undefined;
    tenure.abort(new LeaseLostError(lease.name, reason));
    // Release whenever the backend may still think we hold it (resign, stop, fence refusal), so a
    // follower need not wait out the TTL. Not after a lost lease or a missed deadline: not ours.
    if (!lostByBackend) {
      try {
        await this.backend.release(lease);
      } catch (err) {
        if (!(err instanceof NotHolderError)) this.emit('backend:error', err as Error);
      }
    }
    this.emit('lease:lost', lease, reason);
    try {
      await this.callbacks.onStoppedLeading?.(reason);
    } catch (err) {
      this.emit('backend:error', err as Error);
    }
    return reason;
  }
}
