/**
 * PostgreSQL lease backend: one row per lease name in `cw_leases` (src/db/schema.ts), in cronwarden's
 * own schema (default `cronwarden`, the `schema` option; see src/db/tables.ts).
 *
 * Every decision is one conditional statement judged on the DATABASE clock (`now()`), never on ours:
 * two replicas whose clocks disagree still agree on who holds the lease. The local clock only sets
 * the holder's own deadline (sent time + TTL - margin, see localDeadline).
 *
 * The row's `token` is both the fencing token of the current tenure and the counter for the next
 * one: it grows by one on every change of holder and on every new tenure (a re-acquire after expiry
 * or release), never on re-entry by the live holder, and a release keeps the row so the counter
 * survives. It is an ordinary committed column, so it survives restarts and crashes.
 *
 * Change notifications: acquire and release call pg_notify('cronwarden_lease', name) in the same
 * statement, so the notification is sent if and only if the change commits. Each backend holds one
 * dedicated LISTEN connection, reconnected with backoff if it drops; on reconnect every listener is
 * woken once, because notifications sent while it was down are lost. acquire() is waitForLease:
 * it also wakes when the holder's TTL runs out, so a lost notification costs at most one TTL. Not
 * FIFO: whoever tries first after a release wins. The channel is shared by every schema on the
 * database: a deployment may be woken by another's release of a lease with the same name, which
 * costs one extra try and nothing else.
 *
 * Raw parameterised SQL rather than drizzle: the conditional upserts read more plainly as SQL.
 */
import pg from 'pg';
import { reportClientErrors } from '../db/client-errors.js';
import { ledgerConnection, type LedgerConnection } from '../db/ledger-url.js';
import { systemClock, type Clock } from '../clock.js';
import {
  BackendUnavailableError,
  ConnectionClosedError,
  InvalidArgumentError,
  InvalidConfigError,
  LeaseLostError,
  NotHolderError,
  TimedOutError,
} from '../errors.js';
import type { Lease, LeaseBackend, LeaseRecord, LeaseRequest, Unsubscribe } from './lease.js';
import { localDeadline, validateLeaseRequest } from './lease-request.js';
import { isPostgresUnavailable } from '../db/postgres-unavailable.js';
import { waitForLease } from './wait-for-lease.js';
import { resolveSchema, tablesIn } from '../db/tables.js';

export interface PostgresLeaseBackendOptions {
  /** Used to open our own pool (and the LISTEN connection) when no pool is given. */
  connectionString?: string;
  /**
   * A pool owned by the caller: we never end it. Give it a connectionTimeoutMillis; our own calls
   * are bounded regardless. The LISTEN connection is a separate client opened with pool.options.
   */
  pool?: pg.Pool;
  clock?: Clock;
  /**
   * Upper bound for one statement (server statement_timeout) and for opening a connection.
   * Default 5000 ms. A call that exceeds it fails with BackendUnavailableError.
   */
  statementTimeoutMs?: number;
  /**
   * The schema holding cw_leases (migrated by `cronwarden migrate`): give the ledger's, or its
   * namespace (`namespace`), and the schema is derived as the Replica derives its own
   * (resolveSchema). Neither: "cronwarden", the default namespace's.
   */
  schema?: string;
  namespace?: string;
}

export const LEASE_CHANNEL = 'cronwarden_lease';
const DEFAULT_STATEMENT_TIMEOUT_MS = 5000;
const MAX_RECONNECT_DELAY_MS = 2000;

/** The statements on one schema's cw_leases. */
function leaseStatements(leases: string) {
  return {
    /** Take the lease if free, expired or ours. Re-entry by the live holder keeps token and acquired_at. */
    tryAcquire: `
WITH granted AS (
  INSERT INTO ${leases} AS l (name, holder, token, expires_at, acquired_at, renewed_at)
  VALUES ($1, $2, 1, now() + $3::integer * interval '1 millisecond', now(), now())
  ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    token = CASE WHEN l.holder = excluded.holder AND l.expires_at > now() THEN l.token ELSE l.token + 1 END,
    acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at > now() THEN l.acquired_at ELSE now() END,
    expires_at = excluded.expires_at,
    renewed_at = now()
  WHERE l.holder = excluded.holder OR l.holder IS NULL OR l.expires_at IS NULL OR l.expires_at <= now()
  RETURNING l.token, l.acquired_at = now() AS new_tenure
)
SELECT token::text AS token, CASE WHEN new_tenure THEN pg_notify('${LEASE_CHANNEL}', $1) END AS notified
FROM granted`,

    /** Extend only a live lease with our holder and token: one plain conditional UPDATE, the hot path. */
    renew: `
UPDATE ${leases} SET expires_at = now() + $4::integer * interval '1 millisecond', renewed_at = now()
WHERE name = $1 AND holder = $2 AND token = $3::bigint AND expires_at > now()`,

    /** Clear the holder but keep the row: its token is the counter for the next tenure. */
    release: `
WITH released AS (
  UPDATE ${leases} SET holder = NULL, expires_at = NULL
  WHERE name = $1 AND holder = $2 AND token = $3::bigint AND expires_at > now()
  RETURNING name
)
SELECT pg_notify('${LEASE_CHANNEL}', name) FROM released`,

    current: `
SELECT holder, token::text AS token, ceil(extract(epoch FROM expires_at - now()) * 1000)::float8 AS expires_in_ms
FROM ${leases} WHERE name = $1 AND holder IS NOT NULL AND expires_at > now()`,

    floor: `
INSERT INTO ${leases} AS l (name, token) VALUES ($1, $2::bigint)
ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE l.token < excluded.token`,
  };
}

export class PostgresLeaseBackend implements LeaseBackend {
  readonly kind = 'postgres' as const;
  readonly schema: string;
  /** Why the LISTEN connection last failed, while it is being re-established; undefined when up. */
  listenerError: Error | undefined;

  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly clock: Clock;
  private readonly timeoutMs: number;
  private readonly listenConfig: pg.ClientConfig & { Client?: typeof pg.Client };
  private readonly listeners = new Map<string, Set<() => void>>();
  private listenClient: pg.Client | undefined;
  private listenReady: Promise<void> | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private readonly sql: ReturnType<typeof leaseStatements>;

  constructor(options: PostgresLeaseBackendOptions) {
    const tables = tablesIn(resolveSchema(options));
    this.schema = tables.schema;
    this.sql = leaseStatements(tables.leases);
    this.clock = options.clock ?? systemClock;
    this.timeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    if (!Number.isInteger(this.timeoutMs) || this.timeoutMs <= 0) {
      throw new InvalidConfigError(
        'statementTimeoutMs',
        `must be a positive whole number of ms, got ${this.timeoutMs}`,
      );
    }
    const bounds = {
      connectionTimeoutMillis: this.timeoutMs,
      statement_timeout: this.timeoutMs,
      query_timeout: this.timeoutMs + 500, // client-side backstop when the server cannot answer at all
      keepAlive: true,
    };
    if (options.pool) {
      this.pool = options.pool;
      this.ownsPool = false;
      this.listenConfig = { ...(options.pool.options as LedgerConnection), ...bounds };
    } else if (options.connectionString) {
      // A multi-host URL (libpq's form) gets a client that picks the read-write host.
      // Named in pg_stat_activity beside the replica's own sessions (unless the URL names them).
      const connection = {
        ...ledgerConnection(options.connectionString),
        fallback_application_name: 'cronwarden lease',
      };
      this.pool = new pg.Pool({
        ...connection,
        max: 4,
        idleTimeoutMillis: 10_000,
        allowExitOnIdle: true,
        ...bounds,
      });
      // An idle connection broke (server restarted): the pool drops it and the next call reconnects
      // or fails with BackendUnavailableError. Without a handler the error would crash the process.
      this.pool.on('error', () => {});
      // The same for a checked-out client between queries: its holder's next query fails instead.
      reportClientErrors(this.pool, () => {});
      this.ownsPool = true;
      this.listenConfig = { ...connection, ...bounds };
    } else {
      throw new InvalidConfigError('backend.url', 'postgres needs a connectionString or a pool');
    }
  }

  async tryAcquire(request: LeaseRequest): Promise<Lease | null> {
    const valid = validateLeaseRequest(request);
    const sentAt = this.clock.monotonic();
    const { rows } = await this.query<{ token: string }>(this.sql.tryAcquire, [valid.name, valid.holder, valid.ttlMs]);
    const row = rows[0];
    if (!row) return null;
    return { ...valid, token: BigInt(row.token), deadline: localDeadline(sentAt, valid) };
  }

  acquire(request: LeaseRequest, signal?: AbortSignal): Promise<Lease> {
    return waitForLease(this, request, signal, { clock: this.clock });
  }

  async renew(lease: Lease): Promise<Lease> {
    const sentAt = this.clock.monotonic();
    const { rowCount } = await this.query(this.sql.renew, [
      lease.name,
      lease.holder,
      lease.token.toString(),
      lease.ttlMs,
    ]);
    if (rowCount !== 1) {
      // Only to say why; the lease is lost whatever this read returns.
      const now = await this.current(lease.name).catch(() => null);
      throw new LeaseLostError(
        lease.name,
        now ? `now held by "${now.holder}" with token ${now.token}` : 'expired or released',
      );
    }
    return { ...lease, deadline: sentAt + lease.ttlMs - lease.safetyMarginMs };
  }

  /**
   * Refused (NotHolderError) unless the lease is live with our holder and token. That includes a
   * lease that expired but nobody took yet: it is no longer ours to give, and a late release must
   * not look like a clean hand-over.
   */
  async release(lease: Lease): Promise<void> {
    const { rowCount } = await this.query(this.sql.release, [lease.name, lease.holder, lease.token.toString()]);
    if (rowCount !== 1) throw new NotHolderError(lease.name, lease.holder, lease.token);
  }

  /** expiresInMs is computed by the database from its own clock. */
  async current(name: string): Promise<LeaseRecord | null> {
    const { rows } = await this.query<{ holder: string; token: string; expires_in_ms: number }>(this.sql.current, [
      name,
    ]);
    const row = rows[0];
    if (!row) return null;
    return { name, holder: row.holder, token: BigInt(row.token), expiresInMs: row.expires_in_ms };
  }

  /**
   * Raise the row's counter to at least floor (creating the row if missing), leaving the holder.
   * The schema has one token column for tenure and counter: if a live holder's token is below the
   * floor, raising it ends that tenure (its renew fails) — right, since the fence already refuses it.
   */
  async ensureTokenAbove(name: string, floor: bigint): Promise<void> {
    if (floor < 0n) throw new InvalidArgumentError(`token floor must not be negative, got ${floor}`);
    await this.query(this.sql.floor, [name, floor.toString()]);
  }

  async onChange(name: string, listener: () => void): Promise<Unsubscribe> {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    set.add(listener);
    const unsubscribe = async () => {
      set.delete(listener);
      if (set.size === 0 && this.listeners.get(name) === set) this.listeners.delete(name);
    };
    try {
      await this.ensureListening();
    } catch (err) {
      await unsubscribe();
      throw err;
    }
    return unsubscribe;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      clearTimeout(this.reconnectTimer);
      this.listeners.clear();
      const client = this.listenClient;
      this.listenClient = undefined;
      const ends: Promise<void>[] = [];
      if (client) ends.push(this.bounded(client.end(), () => client.connection.stream.destroy()));
      if (this.ownsPool) ends.push(this.bounded(this.pool.end(), () => {}));
      await Promise.all(ends);
    })();
    return this.closing;
  }

  // ---- internals ----

  private async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values: unknown[],
  ): Promise<pg.QueryResult<R>> {
    if (this.closing) throw new BackendUnavailableError('postgres', 'lease backend is closed');
    const config = { text, values, query_timeout: this.timeoutMs + 500 } as pg.QueryConfig;
    let timer: NodeJS.Timeout | undefined;
    const running = this.pool.query<R>(config);
    // Covers the wait for a connection too, which a caller's pool may not bound.
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TimedOutError('query', 2 * this.timeoutMs + 500)), 2 * this.timeoutMs + 500);
    });
    try {
      return await Promise.race([running, timeout]);
    } catch (err) {
      running.catch(() => {}); // settled later by its own timeout; the caller already has our error
      throw toBackendError(err, this.schema);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resolve when `ending` does or after the timeout, whichever is first; then run `force`. */
  private async bounded(ending: Promise<void>, force: () => void): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), this.timeoutMs)));
    // A connection that is already broken may reject its end(); there is nothing left to close.
    const ended = ending.then(
      () => false,
      () => false,
    );
    if (await Promise.race([ended, timedOut])) force();
    clearTimeout(timer);
  }

  private ensureListening(): Promise<void> {
    if (this.closing) return Promise.reject(new BackendUnavailableError('postgres', 'lease backend is closed'));
    // While a background reconnect is pending, register without waiting: it wakes everyone when up.
    if (this.reconnectTimer) return Promise.resolve();
    this.listenReady ??= this.connectListener().catch((err: unknown) => {
      this.listenReady = undefined;
      throw toBackendError(err, this.schema);
    });
    return this.listenReady;
  }

  private async connectListener(): Promise<void> {
    const client = new (this.listenConfig.Client ?? pg.Client)(this.listenConfig);
    let up = false;
    client.on('notification', (msg) => {
      if (msg.channel !== LEASE_CHANNEL) return;
      for (const listener of [...(this.listeners.get(msg.payload ?? '') ?? [])]) listener();
    });
    const dropped = (err: Error) => {
      if (up && this.listenClient === client) this.listenerDropped(client, err);
    };
    client.on('error', dropped);
    client.on('end', () => dropped(new ConnectionClosedError('LISTEN connection ended')));
    this.listenClient = client;
    try {
      await client.connect();
      await client.query(`LISTEN ${LEASE_CHANNEL}`);
    } catch (err) {
      if (this.listenClient === client) this.listenClient = undefined;
      await this.bounded(client.end(), () => client.connection.stream.destroy());
      throw err;
    }
    if (this.closing || this.listenClient !== client) {
      await this.bounded(client.end(), () => client.connection.stream.destroy());
      throw new BackendUnavailableError('postgres', 'lease backend is closed');
    }
    up = true;
    this.listenerError = undefined;
  }

  private listenerDropped(client: pg.Client, err: Error): void {
    this.listenClient = undefined;
    this.listenReady = undefined;
    this.listenerError = err;
    client.connection.stream.destroy();
    this.scheduleReconnect(0);
  }

  private scheduleReconnect(attempt: number): void {
    if (this.closing || this.reconnectTimer) return;
    const delay = Math.min(MAX_RECONNECT_DELAY_MS, 100 * 2 ** attempt);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.closing) return;
      this.ensureListening().then(
        () => {
          // Changes made while we were not listening were not announced: everyone must look again.
          for (const set of [...this.listeners.values()]) for (const listener of [...set]) listener();
        },
        (error: Error) => {
          this.listenerError = error;
          this.scheduleReconnect(attempt + 1);
        },
      );
    }, delay);
    this.reconnectTimer.unref();
  }
}

/** Map a pg failure into the error family; leaves our own errors alone. */
function toBackendError(err: unknown, schema: string): Error {
  if (err instanceof BackendUnavailableError || err instanceof InvalidConfigError) return err;
  if (err instanceof pg.DatabaseError) {
    const code = err.code ?? '';
    if (isPostgresUnavailable(err)) return new BackendUnavailableError('postgres', err.message, { cause: err });
    if (code === '42P01')
      return new InvalidConfigError(
        'backend.schema',
        `no cw_leases table in schema "${schema}": give the backend the schema or namespace of the ledger it serves, or migrate that schema (cronwarden migrate)`,
      );
    if (code === '3D000' || code.startsWith('28')) return new InvalidConfigError('backend.url', err.message);
    return err; // a bug in our SQL or the schema: not something a retry fixes
  }
  // Socket errors, connection timeouts, "Connection terminated unexpectedly", query read timeouts.
  const message = err instanceof Error ? err.message : String(err);
  return new BackendUnavailableError('postgres', message, { cause: err });
}
