import { readFileSync } from 'node:fs';
import { Redis, type RedisOptions } from 'ioredis';
import { systemClock, type Clock } from '../clock.js';
import {
  BackendUnavailableError,
  InvalidArgumentError,
  LeaseLostError,
  NotHolderError,
  UnexpectedReplyError,
} from '../errors.js';
import type { Lease, LeaseBackend, LeaseRecord, LeaseRequest, Unsubscribe } from './lease.js';
import { localDeadline, validateLeaseRequest } from './lease-request.js';
import { waitForLease } from './wait-for-lease.js';

export interface RedisLeaseBackendOptions {
  /** redis://host:port/db. Ignored when `redis` or `sentinel` is given. */
  url?: string;
  /** Reach the primary through Redis Sentinel: the Sentinels' addresses and the monitored name. */
  sentinel?: { sentinels: { host: string; port: number }[]; name: string };
  /** An existing ioredis client; close() leaves it open. Its own timeouts apply, capped by ours. */
  redis?: Redis;
  /** Prefix of every key and channel this backend uses. Default "cronwarden:lease:". */
  keyPrefix?: string;
  clock?: Clock;
  /** A call unanswered for this long fails with BackendUnavailableError. Default 2000 ms. */
  commandTimeoutMs?: number;
}

/** Negative return codes of the Lua scripts (see the header of each file in ./lua). */
export const RedisScriptCode = {
  /** acquire-2.lua: someone else holds the lease. */
  Held: -1,
  /** renew-1.lua: expired, or held by someone else or under another token. */
  Lost: -2,
  /** release-1.lua: not held by this holder under this token. */
  NotHolder: -3,
} as const;

/** Lua scripts as files, BullMQ style: <name>-<number of keys>.lua, next to this file in src and dist. */
const scriptFiles = {
  cwAcquire: 'acquire-2.lua',
  cwRenew: 'renew-1.lua',
  cwRelease: 'release-1.lua',
  cwRaiseFloor: 'raise-floor-1.lua',
  cwCurrent: 'current-1.lua',
} as const;
const scripts = Object.entries(scriptFiles).map(([command, file]) => ({
  command,
  numberOfKeys: Number(/-(\d+)\.lua$/.exec(file)![1]),
  lua: readFileSync(new URL(`./lua/${file}`, import.meta.url), 'utf8'),
}));

/** The commands defineCommand adds; tokens come back as decimal strings (exact beyond 2^53). */
interface ScriptCommands {
  cwAcquire(
    lease: string,
    counter: string,
    holder: string,
    ttlMs: number,
    channel: string,
    floor: string,
  ): Promise<[number, string | number, string?, string?]>;
  cwRenew(lease: string, expected: string, ttlMs: number): Promise<number>;
  cwRelease(lease: string, expected: string, channel: string): Promise<number>;
  cwRaiseFloor(counter: string, floor: string): Promise<number>;
  cwCurrent(lease: string): Promise<[string, number] | null>;
}

/** Replies that mean "the server is there but cannot serve now", as opposed to a bug in a call. */
const UNAVAILABLE_REPLY = /^(LOADING|BUSY|READONLY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|NOREPLICAS)\b/;

/**
 * Leases on Redis.
 * - Acquire: one script with SET NX PX semantics that takes the fencing token from INCR of a
 *   per-name counter; the value is "<token>:<holder>". Renew and release compare that whole value
 *   (holder AND token), then PEXPIRE or DEL.
 * - Keys: "<prefix><name>" holds the lease, "<prefix><name>#token" the counter, and changes are
 *   published on "<prefix><name>#changes". Names cannot contain '#', so no lease key can ever be
 *   another name's counter.
 * - Waiting: waitForLease. Redis has no queue, so this is not FIFO: whoever tries first after a
 *   release wins. Acquire and release PUBLISH on the name's channel; an expiry is NOT published
 *   (that needs keyspace notifications, a server setting we cannot assume), so waiters also wake
 *   when the holder's PTTL runs out.
 * - Durability: without persistence a Redis restart resets the counter. This backend never grants a
 *   token at or below one it has seen itself (granted, read, refused with, or given as a floor), so a
 *   follower that watched the old leader stays above it across a restart; a process that saw
 *   nothing relies on ensureTokenAbove (the scheduler calls it, from the highest token its ledger
 *   has seen, before every campaign).
 * - Availability: commands are not queued while disconnected and not retried after a drop, and a
 *   call unanswered within commandTimeoutMs fails: a lease decision is never made late.
 */
export class RedisLeaseBackend implements LeaseBackend {
  readonly kind = 'redis' as const;
  private readonly client: Redis & ScriptCommands;
  private readonly ownsClient: boolean;
  private subscriber: Redis | undefined;
  /** Listeners per channel, and the SUBSCRIBE that must finish before a new listener can count on it. */
  private readonly channels = new Map<string, { listeners: Set<() => void>; subscribed: Promise<void> }>();
  private readonly prefix: string;
  private readonly clock: Clock;
  private readonly timeoutMs: number;
  private closed = false;
  /** Highest token seen per lease name: the floor every grant from this process stays above. */
  private readonly seen = new Map<string, bigint>();

  constructor(options: RedisLeaseBackendOptions) {
    if (!options.redis && !options.url && !options.sentinel)
      throw new InvalidArgumentError('RedisLeaseBackend needs a url, a sentinel or a redis client');
    const timeoutMs = options.commandTimeoutMs ?? 2000;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new InvalidArgumentError(`commandTimeoutMs must be a positive number of milliseconds, got ${timeoutMs}`);
    }
    this.timeoutMs = timeoutMs;
    this.ownsClient = !options.redis;
    const clientOptions: RedisOptions = {
      commandTimeout: timeoutMs,
      connectTimeout: timeoutMs,
      // Fail at once while disconnected rather than queueing, and never resend a command after a
      // drop: whether it ran is unknown, and the caller (the elector, withLock) decides on retries.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    };
    const client =
      options.redis ??
      (options.sentinel
        ? new Redis({ ...options.sentinel, ...clientOptions })
        : new Redis(options.url!, clientOptions));
    // Our own client: its connection errors reach callers as BackendUnavailableError from the call
    // that hit them, and ioredis reconnects by itself; without a listener they would crash the process.
    if (this.ownsClient) client.on('error', () => undefined);
    for (const s of scripts) client.defineCommand(s.command, { numberOfKeys: s.numberOfKeys, lua: s.lua });
    this.client = client as Redis & ScriptCommands;
    this.prefix = options.keyPrefix ?? 'cronwarden:lease:';
    this.clock = options.clock ?? systemClock;
  }

  private leaseKey(name: string): string {
    return this.prefix + name;
  }

  private counterKey(name: string): string {
    return `${this.prefix}${name}#token`;
  }

  private channel(name: string): string {
    return `${this.prefix}${name}#changes`;
  }

  async tryAcquire(request: LeaseRequest): Promise<Lease | null> {
    const valid = validateLeaseRequest(request);
    const sentAt = this.clock.monotonic();
    const floor = (this.seen.get(valid.name) ?? 0n).toString();
    const [code, token, , heldToken] = await this.call('acquire', (c) =>
      c.cwAcquire(
        this.leaseKey(valid.name),
        this.counterKey(valid.name),
        valid.holder,
        valid.ttlMs,
        this.channel(valid.name),
        floor,
      ),
    );
    if (code === RedisScriptCode.Held) {
      this.noteToken(valid.name, BigInt(heldToken!));
      return null;
    }
    if (code !== 1) throw new UnexpectedReplyError('acquire-2.lua', `code ${code}`);
    return { ...valid, token: this.noteToken(valid.name, BigInt(token)), deadline: localDeadline(sentAt, valid) };
  }

  acquire(request: LeaseRequest, signal?: AbortSignal): Promise<Lease> {
    return waitForLease(this, request, signal, { clock: this.clock });
  }

  async renew(lease: Lease): Promise<Lease> {
    const sentAt = this.clock.monotonic();
    const code = await this.call('renew', (c) => c.cwRenew(this.leaseKey(lease.name), leaseValue(lease), lease.ttlMs));
    if (code === RedisScriptCode.Lost) {
      // Only to say why; the lease is lost whatever this read returns.
      const now = await this.current(lease.name).catch(() => null);
      throw new LeaseLostError(lease.name, now ? `now held by "${now.holder}" with token ${now.token}` : 'expired');
    }
    if (code !== 1) throw new UnexpectedReplyError('renew-1.lua', `code ${code}`);
    return { ...lease, deadline: localDeadline(sentAt, lease) };
  }

  async release(lease: Lease): Promise<void> {
    const code = await this.call('release', (c) =>
      c.cwRelease(this.leaseKey(lease.name), leaseValue(lease), this.channel(lease.name)),
    );
    if (code === RedisScriptCode.NotHolder) throw new NotHolderError(lease.name, lease.holder, lease.token);
    if (code !== 1) throw new UnexpectedReplyError('release-1.lua', `code ${code}`);
  }

  async current(name: string): Promise<LeaseRecord | null> {
    const row = await this.call('current', (c) => c.cwCurrent(this.leaseKey(name)));
    if (!row) return null;
    const [raw, pttl] = row;
    const sep = raw.indexOf(':'); // tokens have no ':', holders may
    const token = this.noteToken(name, BigInt(raw.slice(0, sep)));
    return { name, token, holder: raw.slice(sep + 1), expiresInMs: Math.max(0, Number(pttl)) };
  }

  async onChange(name: string, listener: () => void): Promise<Unsubscribe> {
    if (this.closed) throw new BackendUnavailableError('redis', 'backend is closed');
    const channel = this.channel(name);
    let entry = this.channels.get(channel);
    if (!entry) {
      const sub = this.subscriberConnection();
      entry = {
        listeners: new Set(),
        subscribed: this.withTimeout('subscribe', sub.subscribe(channel)).then(() => undefined),
      };
      this.channels.set(channel, entry);
    }
    const mine = entry;
    mine.listeners.add(listener);
    const unsubscribe = async () => {
      mine.listeners.delete(listener);
      if (mine.listeners.size > 0 || this.channels.get(channel) !== mine) return;
      this.channels.delete(channel);
      // Not awaited: a stale subscription only delivers messages nobody listens to, and a caller
      // leaving (often because Redis is down) must not wait for, or fail on, the UNSUBSCRIBE.
      this.subscriber?.unsubscribe(channel).catch(() => undefined);
    };
    try {
      await mine.subscribed;
    } catch (err) {
      await unsubscribe();
      throw err;
    }
    return unsubscribe;
  }

  /** One subscriber connection per backend, shared by all lease names (a subscribed connection can run nothing else). */
  private subscriberConnection(): Redis {
    if (this.subscriber) return this.subscriber;
    // SUBSCRIBE may wait in the offline queue across a reconnect (our timeout still bounds the
    // caller), and ioredis re-subscribes every channel after a reconnect by itself.
    const sub = this.client.duplicate({
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      commandTimeout: undefined,
    });
    // Errors show up as a timed-out SUBSCRIBE or as missed wake-ups, which the expiry wake covers.
    sub.on('error', () => undefined);
    sub.on('message', (channel: string) => {
      for (const l of [...(this.channels.get(channel)?.listeners ?? [])]) l();
    });
    // A release may have been published while we were disconnected: every listener looks again.
    let connectedBefore = false;
    sub.on('ready', () => {
      if (connectedBefore) this.notifyAll();
      connectedBefore = true;
    });
    this.subscriber = sub;
    return sub;
  }

  private notifyAll(): void {
    for (const { listeners } of [...this.channels.values()]) for (const l of [...listeners]) l();
  }

  async ensureTokenAbove(name: string, floor: bigint): Promise<void> {
    if (floor < 0n) throw new InvalidArgumentError(`token floor must not be negative, got ${floor}`);
    await this.call('raise token floor', (c) => c.cwRaiseFloor(this.counterKey(name), floor.toString()));
    this.noteToken(name, floor);
  }

  /** Remember a token of `name` seen from the server; returns it. */
  private noteToken(name: string, token: bigint): bigint {
    if (token > (this.seen.get(name) ?? 0n)) this.seen.set(name, token);
    return token;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Waiting acquires wake, try again and fail with "backend is closed" instead of sleeping a TTL.
    this.notifyAll();
    this.channels.clear();
    this.subscriber?.disconnect();
    if (this.ownsClient) {
      await this.withTimeout('quit', this.client.quit()).catch(() => undefined); // best effort; disconnect either way
      this.client.disconnect();
    }
  }

  /**
   * Run one command; every failure to get an answer in time becomes BackendUnavailableError.
   * I/O timeouts run on real timers, not the injected clock: they bound real network waits, and a
   * test clock that is never advanced must not make them hang.
   */
  private async call<T>(what: string, fn: (client: Redis & ScriptCommands) => Promise<T>): Promise<T> {
    if (this.closed) throw new BackendUnavailableError('redis', `${what}: backend is closed`);
    const started = performance.now();
    // With no offline queue a command sent while (re)connecting fails at once; wait for the
    // connection instead, inside the same time budget. ('end' = closed for good: fail at once.)
    const status = this.client.status;
    if (status === 'ready' && this.ownsClient) {
      // Our own client bounds every command by its commandTimeout: no second timer on the hot path.
      return fn(this.client).catch((err: unknown) => Promise.reject(toBackendError(what, err)));
    }
    if (status !== 'ready' && status !== 'end' && !this.client.options.enableOfflineQueue) await this.ready(what);
    return this.withTimeout(what, fn(this.client), this.timeoutMs - (performance.now() - started));
  }

  private ready(what: string): Promise<void> {
    // A lazyConnect client given to us: connect it; its 'ready' or our timeout decides.
    if (this.client.status === 'wait') this.client.connect().catch(() => undefined);
    return new Promise<void>((resolve, reject) => {
      const onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.client.off('ready', onReady);
        reject(
          new BackendUnavailableError(
            'redis',
            `${what}: not connected (${this.client.status}) after ${this.timeoutMs} ms`,
          ),
        );
      }, this.timeoutMs);
      this.client.once('ready', onReady);
    });
  }

  /** Bound a reply by our timeout even on a client given without one, and map its errors. */
  private withTimeout<T>(what: string, reply: Promise<T>, ms = this.timeoutMs): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new BackendUnavailableError('redis', `${what}: no reply within ${this.timeoutMs} ms`)),
        Math.max(0, ms),
      );
      reply.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(toBackendError(what, err));
        },
      );
    });
  }
}

/** Connection loss, timeouts and "cannot serve now" replies are BackendUnavailableError; anything else is a bug to surface as is. */
function toBackendError(what: string, err: unknown): unknown {
  if (err instanceof BackendUnavailableError || !(err instanceof Error)) return err;
  if (err.name === 'ReplyError' && !UNAVAILABLE_REPLY.test(err.message)) return err;
  return new BackendUnavailableError('redis', `${what}: ${err.message}`, { cause: err });
}

function leaseValue(lease: Lease): string {
  return `${lease.token}:${lease.holder}`;
}
