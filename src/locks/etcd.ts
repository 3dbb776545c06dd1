import { Etcd3, type IKeyValue, type Watcher } from 'etcd3';
import { systemClock, type Clock } from '../clock.js';
import {
  AbortedError,
  BackendUnavailableError,
  ConnectionClosedError,
  InvalidArgumentError,
  LeaseLostError,
  NotHolderError,
  TimedOutError,
} from '../errors.js';
import type { Lease, LeaseBackend, LeaseRecord, LeaseRequest, Unsubscribe } from './lease.js';
import { localDeadline, validateLeaseRequest, type ValidLeaseRequest } from './lease-request.js';

export interface EtcdLeaseBackendOptions {
  /** Client URLs, e.g. ["http://127.0.0.1:2379"]; ignored when `client` is given. */
  endpoints?: string | string[];
  /** An existing client. close() leaves it open: whoever created it closes it. */
  client?: Etcd3;
  /** Prepended to every lease name. Default "". */
  prefix?: string;
  /** Local deadlines are measured on clock.monotonic(). Default: the system clock. */
  clock?: Clock;
  /** How long to wait for a member to accept a connection (only for a client we create). Default 2 s. */
  dialTimeoutMs?: number;
  /** A call unanswered for this long fails with BackendUnavailableError. Default 2 s. */
  requestTimeoutMs?: number;
}

/** Backend-private part of a Lease (serialised into Lease.handle). */
interface Handle {
  /** etcd lease id, decimal. */
  lease: string;
  /** Our candidate key: `${prefix}${name}/${lease id in hex}`. */
  key: string;
}

const CANDIDATE_SUFFIX = /^[0-9a-f]+$/;

/** The election queue of one name: candidate keys, oldest first, and the revision they were read at. */
interface Queue {
  kvs: IKeyValue[];
  revision: string;
}

/** Only `NAME/<hex>` keys are candidates; deeper keys belong to other names. */
function onlyCandidates(kvs: IKeyValue[], prefix: string): IKeyValue[] {
  return kvs.filter((kv) => CANDIDATE_SUFFIX.test(kv.key.toString().slice(prefix.length)));
}
/** A waiter re-reads the queue at least this often even if no watch event arrives. */
const RECHECK_MS = 5000;

/**
 * Leases on etcd, laid out like etcd's own election recipe (Go `concurrency.Election`), so that
 * `etcdctl elect --listen NAME` observes our leader and an `etcdctl elect NAME` candidate queues
 * with ours:
 * - each candidate puts `NAME/<etcd lease id in lowercase hex>` = holder id, attached to an etcd
 *   lease, created only if absent (create_revision == 0);
 * - the key with the lowest create revision under `NAME/` leads; a waiter watches only the key
 *   just before its own (no thundering herd), so waiting is FIFO;
 * - the fencing token is the leader key's create revision: cluster-wide, strictly increasing,
 *   durable across restarts (it is the raft-replicated store revision).
 * etcd lease TTLs are whole seconds: the etcd lease lasts ceil(ttlMs / 1000) s (at least 1 s),
 * while the local deadline still uses ttlMs, so the holder steps down no later than it asked to.
 * Keys nested deeper (a lease named "a/b" lives under "a/") are not candidates of "a": only
 * `NAME/<hex>` counts (etcd's recipe does not make that distinction; we must).
 */
export class EtcdLeaseBackend implements LeaseBackend {
  readonly kind = 'etcd' as const;
  private readonly client: Etcd3;
  private readonly ownsClient: boolean;
  private readonly prefix: string;
  private readonly clock: Clock;
  private readonly timeoutMs: number;
  private readonly watchers = new Set<Watcher>();
  /** Aborts every acquire still waiting when close() is called. */
  private readonly closing = new AbortController();
  private readonly waiting = new Set<Promise<unknown>>();
  /** Candidate keys of leases this backend granted and has not seen end: renew may trust them. */
  private readonly issued = new Set<string>();
  /** Background revokes after release, awaited by close(). */
  private readonly revoking = new Set<Promise<void>>();
  private closed = false;
  private closedPromise: Promise<void> | undefined;

  constructor(options: EtcdLeaseBackendOptions) {
    if (!options.client && !options.endpoints)
      throw new InvalidArgumentError('EtcdLeaseBackend needs endpoints or a client');
    this.timeoutMs = options.requestTimeoutMs ?? 2000;
    if (!(this.timeoutMs > 0))
      throw new InvalidArgumentError(`requestTimeoutMs must be positive, got ${this.timeoutMs}`);
    this.ownsClient = !options.client;
    this.client =
      options.client ??
      new Etcd3({
        hosts: options.endpoints!,
        dialTimeout: options.dialTimeoutMs ?? 2000,
        // Unary calls get a deadline per attempt; streams (watch, keepalive) are bounded by us.
        defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + this.timeoutMs }),
      });
    this.prefix = options.prefix ?? '';
    this.clock = options.clock ?? systemClock;
  }

  private electionPrefix(name: string): string {
    return `${this.prefix}${name}/`;
  }

  /** Run one etcd operation, bounded in time; anything but our own errors becomes BackendUnavailableError. */
  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    if (this.closed) throw new BackendUnavailableError('etcd', 'backend is closed');
    try {
      return await withTimeout(fn(), this.timeoutMs * 2, what);
    } catch (err) {
      if (err instanceof LeaseLostError || err instanceof NotHolderError || err instanceof AbortedError) throw err;
      throw new BackendUnavailableError('etcd', `${what}: ${(err as Error).message}`, { cause: err });
    }
  }

  /** Candidate keys of `name`, oldest (the leader) first, and the store revision they were read at. */
  private async candidates(name: string): Promise<Queue> {
    const prefix = this.electionPrefix(name);
    const res = await this.call('range candidates', () =>
      this.client.getAll().prefix(prefix).sort('Create', 'Ascend').exec(),
    );
    return { kvs: onlyCandidates(res.kvs, prefix), revision: res.header.revision };
  }

  /**
   * Grant an etcd lease, create our candidate key on it and read the queue, in two round trips:
   * the create and the read share one transaction, so the queue we get back already holds our key.
   * Returns the key's create revision and the monotonic time the grant was sent (the etcd lease's
   * TTL runs from about then, so a deadline measured from it is never late).
   */
  private async campaign(
    valid: ValidLeaseRequest,
  ): Promise<{ handle: Handle; revision: bigint; grantSentAt: number; queue: Queue }> {
    const ttlSeconds = Math.max(1, Math.ceil(valid.ttlMs / 1000));
    const grantSentAt = this.clock.monotonic();
    const grant = await this.call('lease grant', () => this.client.leaseClient.leaseGrant({ TTL: ttlSeconds, ID: 0 }));
    const handle = { lease: String(grant.ID), key: this.electionPrefix(valid.name) + BigInt(grant.ID).toString(16) };
    const prefix = this.electionPrefix(valid.name);
    try {
      const txn = await this.call('create candidate key', () =>
        this.client
          .if(handle.key, 'Create', '==', 0)
          .then(
            this.client.put(handle.key).value(valid.holder).lease(handle.lease),
            this.client.getAll().prefix(prefix).sort('Create', 'Ascend'),
          )
          .commit(),
      );
      // A fresh lease id cannot already name a key; if it does, someone wrote into our namespace.
      if (!txn.succeeded) throw new BackendUnavailableError('etcd', `candidate key ${handle.key} already exists`);
      const range = txn.responses[1]?.response_range;
      if (!range) throw new BackendUnavailableError('etcd', 'create candidate key: the transaction returned no range');
      // The put is the only write of the txn, so the txn's revision is the key's create revision.
      return {
        handle,
        revision: BigInt(txn.header.revision),
        grantSentAt,
        queue: { kvs: onlyCandidates(range.kvs, prefix), revision: txn.header.revision },
      };
    } catch (err) {
      await this.withdraw(handle);
      throw err;
    }
  }

  /**
   * Delete our candidate key and revoke its lease. The delete comes first and on its own: a key we
   * no longer keep alive but that stays in the queue would lead later and block everyone for a TTL.
   * Best effort: if etcd cannot be reached, the lease (and the key with it) expires by its TTL.
   */
  private async withdraw(handle: Handle): Promise<void> {
    try {
      await this.call('delete candidate key', () => this.client.delete().key(handle.key).exec());
    } catch {
      // Unreachable etcd: the revoke below is tried anyway, then the TTL cleans up.
    }
    await this.revoke(handle.lease);
  }

  private async revoke(leaseId: string): Promise<void> {
    try {
      await this.call('lease revoke', () => this.client.leaseClient.leaseRevoke({ ID: leaseId }));
    } catch {
      // Already expired, or etcd unreachable: either way the lease ends by its TTL.
    }
  }

  private lease(valid: ValidLeaseRequest, handle: Handle, token: bigint, sentAt: number): Lease {
    this.issued.add(handle.key);
    return { ...valid, token, deadline: localDeadline(sentAt, valid), handle: JSON.stringify(handle) };
  }

  async tryAcquire(request: LeaseRequest): Promise<Lease | null> {
    const valid = validateLeaseRequest(request);
    const { handle, revision, grantSentAt, queue } = await this.campaign(valid);
    const first = queue.kvs[0];
    if (first?.key.toString() === handle.key) return this.lease(valid, handle, revision, grantSentAt);
    await this.withdraw(handle);
    // Re-entry (e.g. a retry after a reply we never saw): an older key of ours leads; adopt it.
    if (first && first.value.toString() === valid.holder) {
      const older = { lease: String(first.lease), key: first.key.toString() };
      const sentAt = this.clock.monotonic();
      if ((await this.keepAliveOnce(older.lease)) > 0)
        return this.lease(valid, older, BigInt(first.create_revision), sentAt);
    }
    return null;
  }

  acquire(request: LeaseRequest, signal?: AbortSignal): Promise<Lease> {
    const valid = validateLeaseRequest(request);
    const both = signal ? AbortSignal.any([signal, this.closing.signal]) : this.closing.signal;
    const run = this.queue(valid, both);
    this.waiting.add(run);
    const untrack = () => this.waiting.delete(run);
    run.then(untrack, untrack);
    return run;
  }

  /** FIFO wait per etcd's recipe: one key in the queue, watching only its predecessor. */
  private async queue(valid: ValidLeaseRequest, signal: AbortSignal): Promise<Lease> {
    const aborted = () => new AbortedError(`acquire of lease "${valid.name}"`, { cause: signal.reason });
    if (signal.aborted) throw aborted();
    let handle: Handle | undefined;
    let myRevision = 0n;
    let wake: (() => void) | undefined;
    let keeper: ReturnType<Clock['setTimer']> | undefined;
    // Keep our waiting key's lease alive; a lost lease wakes the loop, which then queues again.
    const keepWaitingKeyAlive = () => {
      keeper = this.clock.setTimer(
        () => {
          const h = handle;
          if (!h) return;
          this.keepAliveOnce(h.lease).then(
            (ttl) => {
              if (ttl <= 0) wake?.();
            },
            () => {}, // a blip: the next tick tries again, and the loop's re-read sees a lost key
          );
          keepWaitingKeyAlive();
        },
        Math.max(200, Math.floor(valid.ttlMs / 3)),
      );
    };
    keepWaitingKeyAlive();
    // A queue read in the campaign's own transaction, used instead of a fresh read once.
    let justQueued: { queue: Queue; grantSentAt: number } | undefined;
    try {
      for (;;) {
        if (signal.aborted) throw aborted();
        const fresh = justQueued;
        justQueued = undefined;
        const { kvs, revision } = fresh?.queue ?? (await this.candidates(valid.name));
        const index = handle
          ? kvs.findIndex((kv) => kv.key.toString() === handle!.key)
          : kvs.findIndex((kv) => kv.value.toString() === valid.holder); // re-entry: adopt our own key
        if (index < 0) {
          // Not queued yet, or our key expired while we waited: join the back of the queue.
          const joined = await this.campaign(valid);
          ({ handle, revision: myRevision } = joined);
          justQueued = joined;
          continue;
        }
        const mine = kvs[index]!;
        handle = { lease: String(mine.lease), key: mine.key.toString() };
        myRevision = BigInt(mine.create_revision);
        // First in the very queue we just joined: the lease was granted a moment ago, no keepalive needed.
        if (index === 0 && fresh) return this.lease(valid, handle, myRevision, fresh.grantSentAt);
        if (index === 0) {
          const sentAt = this.clock.monotonic();
          if ((await this.keepAliveOnce(handle.lease)) <= 0) continue; // expired just now: re-queue
          return this.lease(valid, handle, myRevision, sentAt);
        }
        await this.waitForDelete(kvs[index - 1]!.key.toString(), revision, signal, (fn) => (wake = fn));
      }
    } catch (err) {
      if (handle) await this.withdraw(handle);
      throw signal.aborted && !(err instanceof AbortedError) ? aborted() : err;
    } finally {
      keeper?.cancel();
    }
  }

  /** Resolve once `key` is deleted after `revision`, or on abort, wake(), a lost watch, or RECHECK_MS. */
  private async waitForDelete(
    key: string,
    revision: string,
    signal: AbortSignal,
    setWake: (fn: () => void) => void,
  ): Promise<void> {
    // Starting just after the revision we read at, the watch also reports a delete that happened
    // between that read and now: nothing can slip through.
    const next = (BigInt(revision) + 1n).toString();
    const watcher = await this.call('watch predecessor', () =>
      this.client.watch().key(key).startRevision(next).create(),
    );
    this.watchers.add(watcher);
    try {
      await new Promise<void>((resolve) => {
        const timer = this.clock.setTimer(done, RECHECK_MS);
        watcher.on('delete', done);
        watcher.on('disconnected', done);
        signal.addEventListener('abort', done, { once: true });
        setWake(done);
        function done() {
          timer.cancel();
          signal.removeEventListener('abort', done);
          resolve();
        }
      });
    } finally {
      this.watchers.delete(watcher);
      await watcher.cancel().catch(() => undefined); // the watch dies with its stream anyway
    }
  }

  /**
   * One keepalive round trip; returns the TTL etcd reports (<= 0: the lease is gone). Keepalive is
   * a stream in etcd's API, and etcd3 moves unary calls to another member on failure but not
   * streams: each attempt gets its own deadline and we retry (on a freshly picked member) until the
   * request timeout is spent.
   */
  private keepAliveOnce(leaseId: string): Promise<number> {
    return this.call('lease keepalive', async () => {
      const giveUpAt = Date.now() + this.timeoutMs;
      const perAttempt = Math.max(250, Math.floor(this.timeoutMs / 3));
      for (;;) {
        const deadline = Math.min(giveUpAt, Date.now() + perAttempt);
        try {
          const stream = await this.client.leaseClient.leaseKeepAlive({ deadline });
          try {
            const res = await new Promise<{ TTL: string }>((resolve, reject) => {
              stream.on('data', resolve);
              stream.on('error', reject);
              stream.on('end', () => reject(new ConnectionClosedError('keepalive stream ended without a reply')));
              stream.write({ ID: leaseId });
            });
            return Number(res.TTL);
          } finally {
            stream.end();
          }
        } catch (err) {
          if (Date.now() + 20 >= giveUpAt) throw err;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    });
  }

  /**
   * Keep the etcd lease alive and check that our key is still the one it holds (the key could have
   * been deleted by hand while the lease lives on). For a lease this backend granted, the two go
   * out together: one round trip. For any other Lease object (another process's, or forged), the
   * ownership check comes first, so it can never extend somebody else's etcd lease.
   */
  async renew(lease: Lease): Promise<Lease> {
    const handle = parseHandle(lease);
    const sentAt = this.clock.monotonic();
    const readKey = async () => (await this.call('get candidate key', () => this.client.get(handle.key).exec())).kvs[0];
    const check = (kv: IKeyValue | undefined) => {
      if (
        !kv ||
        BigInt(kv.create_revision) !== lease.token ||
        kv.value.toString() !== lease.holder ||
        String(kv.lease) !== handle.lease
      ) {
        this.issued.delete(handle.key);
        throw new LeaseLostError(
          lease.name,
          kv ? `key ${handle.key} now belongs to "${kv.value.toString()}"` : 'our key is gone (expired or deleted)',
        );
      }
    };
    let ttl: number;
    if (this.issued.has(handle.key)) {
      const [kv, keptAlive] = await Promise.all([readKey(), this.keepAliveOnce(handle.lease)]);
      check(kv);
      ttl = keptAlive;
    } else {
      check(await readKey());
      ttl = await this.keepAliveOnce(handle.lease);
    }
    if (ttl <= 0) {
      this.issued.delete(handle.key);
      throw new LeaseLostError(lease.name, `etcd lease ${handle.lease} expired`);
    }
    return { ...lease, deadline: sentAt + lease.ttlMs - lease.safetyMarginMs };
  }

  async release(lease: Lease): Promise<void> {
    const handle = parseHandle(lease);
    if (!handle.key.startsWith(this.electionPrefix(lease.name)))
      throw new NotHolderError(lease.name, lease.holder, lease.token);
    const txn = await this.call('release', () =>
      this.client
        .if(handle.key, 'Create', '==', lease.token.toString())
        .and(handle.key, 'Value', '==', lease.holder)
        .then(this.client.delete().key(handle.key))
        .commit(),
    );
    if (!txn.succeeded) throw new NotHolderError(lease.name, lease.holder, lease.token);
    this.issued.delete(handle.key);
    // The key, which is what others wait on, is gone: revoking its etcd lease is clean-up, done in
    // the background (close() waits for it), so a release costs one round trip.
    const revoking = this.revoke(handle.lease);
    this.revoking.add(revoking);
    void revoking.finally(() => this.revoking.delete(revoking));
  }

  async current(name: string): Promise<LeaseRecord | null> {
    const first = (await this.candidates(name)).kvs[0];
    if (!first) return null;
    const record = { name, holder: first.value.toString(), token: BigInt(first.create_revision) };
    // A key without a lease (written by hand) never expires.
    if (String(first.lease) === '0') return { ...record, expiresInMs: Number.POSITIVE_INFINITY };
    const ttl = await this.call('lease ttl', () =>
      this.client.leaseClient.leaseTimeToLive({ ID: first.lease, keys: false }),
    );
    return { ...record, expiresInMs: Math.max(0, Number(ttl.TTL) * 1000) };
  }

  async onChange(name: string, listener: () => void): Promise<Unsubscribe> {
    const watcher = await this.call('watch', () => this.client.watch().prefix(this.electionPrefix(name)).create());
    this.watchers.add(watcher);
    watcher.on('put', listener);
    watcher.on('delete', listener);
    watcher.on('connected', listener); // after a reconnect, events may have been missed: look again
    watcher.on('error', () => undefined); // etcd3 reconnects the watch by itself, then 'connected' fires
    return async () => {
      this.watchers.delete(watcher);
      await watcher.cancel().catch(() => undefined);
    };
  }

  /**
   * etcd tokens are store revisions: they cannot be raised. A floor at or below the current
   * revision is already honoured (every new key gets a higher revision). A floor above it means the
   * etcd data was wiped (or a different cluster is configured) under a ledger that remembers higher
   * tokens: we refuse rather than hand out tokens the fence would reject.
   */
  async ensureTokenAbove(name: string, floor: bigint): Promise<void> {
    if (floor < 0n) throw new InvalidArgumentError(`token floor must not be negative, got ${floor}`);
    const { revision } = await this.candidates(name);
    if (BigInt(revision) < floor) {
      throw new InvalidArgumentError(
        `etcd revision ${revision} is below token ${floor} already used for lease "${name}": was the etcd data wiped? ` +
          'etcd tokens are store revisions and cannot be raised',
      );
    }
  }

  /**
   * Aborts waiting acquires (their queue keys are withdrawn), cancels watches, and closes the
   * client if we created it. Leases already granted are left to their holders (release them first)
   * and otherwise expire by their TTL. Idempotent.
   */
  close(): Promise<void> {
    this.closedPromise ??= this.shutDown();
    return this.closedPromise;
  }

  private async shutDown(): Promise<void> {
    this.closing.abort(new BackendUnavailableError('etcd', 'backend is closing'));
    await Promise.allSettled([...this.waiting]);
    await Promise.allSettled([...this.revoking]);
    this.closed = true;
    await Promise.all([...this.watchers].map((w) => w.cancel().catch(() => undefined)));
    this.watchers.clear();
    if (this.ownsClient) this.client.close();
  }
}

function parseHandle(lease: Lease): Handle {
  try {
    const h = JSON.parse(lease.handle ?? '') as Partial<Handle>;
    if (typeof h.lease === 'string' && typeof h.key === 'string') return { lease: h.lease, key: h.key };
  } catch {
    // not JSON: not a lease of this backend, refused below
  }
  throw new NotHolderError(lease.name, lease.holder, lease.token);
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TimedOutError(what, ms)), ms);
    }),
  ]);
}
