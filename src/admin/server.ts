import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { LeaseBackend } from '../locks/lease.js';
import { Ledger } from '../ledger/ledger.js';
import { jobStats, type JobStats } from '../ledger/job-stats.js';
import { OncePerKind } from '../once-per-kind.js';
import type { AdminRoute, RouteContext } from './admin-route.js';
import { createAdminPool, isDatabaseBusy, type AdminPoolOptions } from './admin-pool.js';
import { bearerMatches } from './auth.js';
import {
  ConcurrencyCap,
  SharedCheck,
  apiPolicy,
  hostAllowed,
  hostPolicy,
  pagePolicy,
  sameOrigin,
  type HostPolicy,
} from './guards.js';
import { HttpError, parse } from './http-error.js';
import { boundJsonDepth } from './json-body.js';
import { ReplicaMetrics } from './metrics.js';
import { ProbeServer, type ProbeListenOptions } from './probe-server.js';
import { readinessCheck, type Readiness } from './probes.js';
import type { ReplicaView } from './replica-view.js';
import { adminRoutes } from './routes.js';

export interface AdminServerOptions {
  replica: ReplicaView;
  /** The replica's lease backend, to read who holds the lease. */
  backend: Pick<LeaseBackend, 'current'>;
  /**
   * The ledger's database: admin reads get their own small pool on it (see createAdminPool), so
   * readers never wait for, or take, the connections the fire loop and the workers use.
   */
  databaseUrl: string | pg.PoolConfig;
  /** Size and timeouts of that pool (default 3 connections, 5 s statement timeout). */
  pool?: AdminPoolOptions;
  /** Bearer token for mutations; without one every mutation is refused (401). */
  token?: string;
  /** The `read` routes (the /api reads) need the token too; default false (open). */
  readsNeedToken?: boolean;
  host?: string;
  port?: number;
  /** The URL advertised to the other replicas and the CLI; its host is accepted in Host headers. */
  advertisedUrl?: string;
  /** More host names (not IPs: those are always accepted) this server answers to, e.g. a Service name. */
  allowedHosts?: string[];
  /** Database reads (every /api read and /metrics) served at once; beyond it 503 + Retry-After. Default 8. */
  maxConcurrentReads?: number;
  /** How long a read refused by the cap waits before its 503 goes out (default 1 s, the Retry-After). */
  busyDelayMs?: number;
  /** A socket with no traffic for this long is closed; also bounds a request's headers and body. Default 10 s. */
  idleTimeoutMs?: number;
  /** Open connections beyond this are closed at once, keeping file descriptors for the scheduler. Default 512. */
  maxConnections?: number;
  /** How long /readyz waits for the backend and the database. Default 2 s. */
  readyTimeoutMs?: number;
  /** Also answer /healthz and /readyz on a listener of their own (see probe-server.ts). */
  probe?: ProbeListenOptions;
}

const STATS_REUSE_MS = 10_000;

const pageCandidates = [
  new URL('./console.html', import.meta.url),
  new URL('../../src/admin/console.html', import.meta.url),
].map((u) => fileURLToPath(u));

/**
 * The admin HTTP server of one replica. Reads are open (bind to loopback unless you mean it);
 * mutations need `Authorization: Bearer <token>`. Trigger and resign are leader-only: a follower
 * answers 409 with the leader's id and admin URL (from cw_members), and the CLI follows it. The
 * routes are defined in modules of their own (routes.ts lists them); this is what they share.
 *
 * It cannot starve the scheduler: reads use their own small pool (never the ledger's), at most
 * `maxConcurrentReads` run at once (503 + Retry-After beyond), idle sockets are closed and the
 * number of open ones is capped. /healthz reads no database; /readyz shares one check among callers.
 */
export class AdminServer {
  readonly app: FastifyInstance;
  readonly metrics: ReplicaMetrics;
  /** The admin reads' own pool (not the ledger's). */
  readonly pool: pg.Pool;
  private readonly reads: Ledger;
  private readonly cap: ConcurrencyCap;
  /** Reads in flight, by URL, for requests of the same URL to share. */
  private readonly sharedReads = new Map<string, Promise<{ value: unknown } | undefined>>();
  private readonly hosts: HostPolicy;
  private readonly errorLog: OncePerKind;
  private readonly ready: Readiness;
  private readonly probes: ProbeServer | undefined;
  /** Where the probe listener answers, once listening (undefined without one). */
  probeUrl: string | undefined;
  /** The jobs' 24 h numbers scan a day of runs: computed at most every 10 s, shared by every caller. */
  private readonly stats: SharedCheck<Map<string, JobStats>>;
  private page: Promise<{ html: string; csp: string }> | undefined;

  constructor(private readonly o: AdminServerOptions) {
    const r = o.replica;
    this.pool = createAdminPool(o.databaseUrl, r.logger, o.pool);
    this.reads = new Ledger(this.pool, r.schema);
    this.metrics = new ReplicaMetrics(r, this.pool, this.reads.tables);
    this.cap = new ConcurrencyCap(o.maxConcurrentReads ?? 8);
    this.hosts = hostPolicy({
      bindHost: o.host ?? '127.0.0.1',
      advertisedUrl: o.advertisedUrl,
      allowedHosts: o.allowedHosts,
      machineName: hostname(),
    });
    const monotonic = () => r.clock.monotonic();
    this.errorLog = new OncePerKind(monotonic);
    // The ledger pool is what the scheduler needs; one shared check takes at most one of its connections.
    this.ready = readinessCheck(r, o.backend, o.readyTimeoutMs ?? 2000, monotonic);
    this.probes = o.probe && probeServer(o.probe, o);
    this.stats = new SharedCheck(
      () =>
        jobStats(
          this.pool,
          this.reads.tables,
          r.jobs().map((j) => j.name),
        ),
      monotonic,
      STATS_REUSE_MS,
    );
    this.app = boundedApp(o);
    this.guardRequests();
    this.handleErrors();
    this.routes();
  }

  /** Every response gets the safety headers; a foreign Host, or a cross-origin change, is refused first. */
  private guardRequests(): void {
    this.app.addHook('onRequest', async (req, reply) => {
      reply
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .header('x-frame-options', 'DENY');
      reply.header('content-security-policy', apiPolicy);
      if (!hostAllowed(this.hosts, req.headers.host)) {
        throw new HttpError(
          403,
          'forbidden_host',
          `host "${String(req.headers.host).slice(0, 100)}" is not served here; use the bind address, localhost, the advertised admin URL, or add the name to the allowed hosts`,
        );
      }
      if (req.method !== 'GET' && req.method !== 'HEAD' && !sameOrigin(req.headers.origin, req.headers.host)) {
        throw new HttpError(403, 'cross_origin', 'cross-origin requests may not change anything');
      }
    });
  }

  /** Errors answer as JSON `{ error, code }`; unexpected ones are logged, never served. */
  private handleErrors(): void {
    const r = this.o.replica;
    this.app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
      if (err instanceof HttpError) {
        if (err.status === 503) reply.header('retry-after', '1');
        return reply.code(err.status).send({ error: err.message, code: err.code, ...err.extra });
      }
      if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
        return reply.code(err.statusCode).send({ error: err.message, code: 'bad_request' });
      }
      // Never serve the database's or a library's text: log it (once per kind) and answer generically.
      const busy = isDatabaseBusy(err);
      const kind = `${busy ? 'busy' : 'internal'}:${err.code ?? err.name}`;
      const suppressed = this.errorLog.shouldLog(kind);
      if (suppressed !== undefined) {
        r.logger[busy ? 'warn' : 'error'](
          { err, route: req.routeOptions.url, suppressedSinceLast: suppressed },
          busy ? 'admin request: database busy or unreachable' : 'admin request failed',
        );
      }
      if (busy) {
        reply.header('retry-after', '1');
        return reply
          .code(503)
          .send({ error: 'the ledger database is busy or unreachable; try again', code: 'unavailable' });
      }
      return reply.code(500).send({ error: 'internal error (logged by the replica)', code: 'internal' });
    });
    this.app.setNotFoundHandler((req, reply) =>
      reply
        .code(404)
        .send({ error: `no route ${req.method} ${req.url.split('?')[0]!.slice(0, 200)}`, code: 'not_found' }),
    );
  }

  /** Listen; resolves to the base URL (http://host:port). */
  async listen(): Promise<string> {
    const host = this.o.host ?? '127.0.0.1';
    await this.app.listen({ host, port: this.o.port ?? 8080 });
    this.probeUrl = await this.probes?.listen();
    const addr = this.app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : this.o.port;
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  }

  async close(): Promise<void> {
    await this.probes?.close();
    await this.app.close();
    await this.pool.end();
  }

  /**
   * Runs a database read under the read cap: 503 with Retry-After when it is full. A GET of a URL
   * already being read shares that read (its answer would be the same), so a dashboard open in
   * many tabs, or a flood of one URL, costs one query at a time, not one per request. So `work`
   * returns its data and never touches the reply: one answer can serve many.
   */
  private async read<T>(req: FastifyRequest, work: () => Promise<T>): Promise<T> {
    const key = req.method === 'GET' ? req.url : undefined;
    let read = key === undefined ? undefined : (this.sharedReads.get(key) as Promise<{ value: T } | undefined>);
    if (!read) {
      read = this.cap.run(work);
      if (key !== undefined) {
        this.sharedReads.set(key, read);
        const forget = () => void this.sharedReads.delete(key);
        read.then(forget, forget);
      }
    }
    const done = await read;
    if (!done) {
      // The refusal is held for the Retry-After second (a timer, no work): a keep-alive flood gets
      // one refused read per connection per second instead of spinning this event loop on 503s.
      await this.o.replica.clock.sleep(this.o.busyDelayMs ?? 1000);
      throw new HttpError(503, 'busy', `too many admin reads at once (${this.cap.max}); try again`);
    }
    return done.value;
  }

  private consolePage(): Promise<{ html: string; csp: string }> {
    this.page ??= (async () => {
      const path = pageCandidates.find((p) => existsSync(p));
      if (!path) throw new HttpError(500, 'internal', 'console.html not found');
      const html = await readFile(path, 'utf8');
      return { html, csp: pagePolicy(html) };
    })();
    return this.page;
  }

  private requireToken = async (req: FastifyRequest): Promise<void> => {
    if (!bearerMatches(req.headers.authorization, this.o.token)) {
      throw new HttpError(
        401,
        'unauthorized',
        this.o.token ? 'missing or wrong bearer token' : 'mutations are disabled: no admin token configured',
      );
    }
  };

  private requireReadToken = async (req: FastifyRequest): Promise<void> => {
    if (!bearerMatches(req.headers.authorization, this.o.token))
      throw new HttpError(401, 'unauthorized', 'reads need the admin bearer token here (adminReadsNeedToken)');
  };

  /** Which check a route's access needs, if any. */
  private guard(access: AdminRoute['access']) {
    if (access === 'token') return this.requireToken;
    if (access === 'read' && this.o.readsNeedToken) return this.requireReadToken;
    return undefined;
  }

  /** Every route of routes.ts, a token route (and a read, when reads need it) behind the bearer check. */
  private routes(): void {
    const c: RouteContext = {
      replica: this.o.replica,
      backend: this.o.backend,
      pool: this.pool,
      reads: this.reads,
      metrics: this.metrics,
      read: (req, work) => this.read(req, work),
      jobStats: () => this.stats.get(),
      readiness: this.ready,
      consolePage: () => this.consolePage(),
    };
    for (const route of adminRoutes) {
      const guard = this.guard(route.access);
      this.app.route({
        method: route.method,
        url: route.path,
        ...(guard && { onRequest: guard }),
        handler: (req, reply) => route.handle(c, req, reply, route.params && parse(route.params, req.params)),
      });
    }
  }
}

/** Fastify with every timeout and size bounded, so slow or idle clients cannot hold sockets or memory. */
function boundedApp(o: AdminServerOptions): FastifyInstance {
  const idleMs = o.idleTimeoutMs ?? 10_000;
  const app = Fastify({
    logger: false,
    return503OnClosing: true,
    connectionTimeout: idleMs,
    keepAliveTimeout: Math.min(5000, idleMs),
    requestTimeout: idleMs,
    bodyLimit: 16 * 1024,
    http: { headersTimeout: idleMs, connectionsCheckingInterval: Math.min(1000, idleMs) },
  });
  app.server.maxConnections = o.maxConnections ?? 512;
  boundJsonDepth(app);
  return app;
}

/** The probe listener, on the admin host unless it names its own. */
export function probeServer(
  probe: ProbeListenOptions,
  o: Pick<AdminServerOptions, 'host' | 'replica' | 'backend' | 'readyTimeoutMs'>,
): ProbeServer {
  const { replica, backend, readyTimeoutMs } = o;
  return new ProbeServer({ ...probe, host: probe.host ?? o.host, replica, backend, readyTimeoutMs });
}
