import { EventEmitter } from 'node:events';
import { systemClock, type Clock } from '../clock.js';
import { InvalidArgumentError, LeaseLostError, NotHolderError } from '../errors.js';
import type { Lease, LeaseBackend, LeaseRecord, LeaseRequest, Unsubscribe } from './lease.js';
import { localDeadline, validateLeaseRequest } from './lease-request.js';
import { waitForLease } from './wait-for-lease.js';

interface Held {
  holder: string;
  token: bigint;
  expiresAt: number;
}

/**
 * In-process leases for unit tests and a single replica. Several MemoryLeaseBackend objects that
 * share one MemoryLeaseStore behave like replicas sharing one server.
 */
export class MemoryLeaseStore {
  readonly leases = new Map<string, Held>();
  readonly counters = new Map<string, bigint>();
  // Typed explicitly: the inferred EventEmitter<[never]> in the .d.ts fails newer @types/node.
  readonly events: EventEmitter = new EventEmitter().setMaxListeners(0);
  constructor(readonly clock: Clock = systemClock) {}
}

export class MemoryLeaseBackend implements LeaseBackend {
  readonly kind = 'memory' as const;
  private readonly store: MemoryLeaseStore;

  constructor(options: { store?: MemoryLeaseStore; clock?: Clock } = {}) {
    this.store = options.store ?? new MemoryLeaseStore(options.clock);
  }

  private get clock(): Clock {
    return this.store.clock;
  }

  private live(name: string): Held | undefined {
    const held = this.store.leases.get(name);
    if (held && held.expiresAt <= this.clock.monotonic()) {
      this.store.leases.delete(name);
      this.store.events.emit(name);
      return undefined;
    }
    return held;
  }

  async tryAcquire(request: LeaseRequest): Promise<Lease | null> {
    const valid = validateLeaseRequest(request);
    const sentAt = this.clock.monotonic();
    const held = this.live(valid.name);
    if (held && held.holder !== valid.holder) return null;
    let token: bigint;
    if (held) {
      token = held.token; // re-entry: the holder asked again, keep its tenure
    } else {
      token = (this.store.counters.get(valid.name) ?? 0n) + 1n;
      this.store.counters.set(valid.name, token);
    }
    this.store.leases.set(valid.name, { holder: valid.holder, token, expiresAt: sentAt + valid.ttlMs });
    if (!held) this.store.events.emit(valid.name);
    return { ...valid, token, deadline: localDeadline(sentAt, valid) };
  }

  acquire(request: LeaseRequest, signal?: AbortSignal): Promise<Lease> {
    return waitForLease(this, request, signal, { clock: this.clock });
  }

  async renew(lease: Lease): Promise<Lease> {
    const sentAt = this.clock.monotonic();
    const held = this.live(lease.name);
    if (!held || held.holder !== lease.holder || held.token !== lease.token) {
      throw new LeaseLostError(lease.name, held ? `now held by "${held.holder}" with token ${held.token}` : 'expired');
    }
    held.expiresAt = sentAt + lease.ttlMs;
    return { ...lease, deadline: sentAt + lease.ttlMs - lease.safetyMarginMs };
  }

  async release(lease: Lease): Promise<void> {
    const held = this.live(lease.name);
    if (!held || held.holder !== lease.holder || held.token !== lease.token) {
      throw new NotHolderError(lease.name, lease.holder, lease.token);
    }
    this.store.leases.delete(lease.name);
    this.store.events.emit(lease.name);
  }

  async current(name: string): Promise<LeaseRecord | null> {
    const held = this.live(name);
    if (!held) return null;
    return {
      name,
      holder: held.holder,
      token: held.token,
      expiresInMs: Math.max(0, held.expiresAt - this.clock.monotonic()),
    };
  }

  async onChange(name: string, listener: () => void): Promise<Unsubscribe> {
    this.store.events.on(name, listener);
    return async () => {
      this.store.events.off(name, listener);
    };
  }

  async ensureTokenAbove(name: string, floor: bigint): Promise<void> {
    if (floor < 0n) throw new InvalidArgumentError(`token floor must not be negative, got ${floor}`);
    const counter = this.store.counters.get(name) ?? 0n;
    if (counter < floor) this.store.counters.set(name, floor);
  }

  async close(): Promise<void> {}
}
