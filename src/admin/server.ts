import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { NotLeaderError } from '../errors.js';
import type { LeaseBackend } from '../locks/lease.js';
import { Ledger } from '../ledger/ledger.js';
import { jobLease, type ReplicaView } from './replica-view.js';
import { createAdminPool, isDatabaseBusy, type AdminPoolOptions } from './admin-pool.js';
import { bearerMatches } from './auth.js';
import { memberAgreement } from './member-agreement.js';
import { OncePerKind } from '../once-per-kind.js';
import { health, readiness, readinessCheck, type Readiness } from './probes.js';
import { ProbeServer, type ProbeListenOptions } from './probe-server.js';
import {
  ConcurrencyCap,
  SharedCheck,
  apiPolicy,
  boundText,
  hostAllowed,
  hostPolicy,
  pagePolicy,
  sameOrigin,
  type HostPolicy,
} from './guards.js';
import { ReplicaMetrics } from './metrics.js';
import { HttpError, parse } from './http-error.js';
import { runtimeRoutes } from './runtime-routes.js';
import { electedAt, lastRuns, listElections, listMembers, memberAdminUrl } from '../ledger/admin-reads.js';
import { jobStats, type JobStats } from '../ledger/job-stats.js';
import { runRoutes } from './run-routes.js';
import { jobOverview } from './job-overview.js';
import { pauseFields, pauseRequest, policyFields, previewBody } from './job-policies-view.js';

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

const jobName = z.string().regex(/^[A-Za-z0-9_.:@/-]{1,200}$/, 'must be 1-200 letters, digits or _ . : @ / -');
const STATS_REUSE_MS = 10_000;
const limitQuery = z.object({
  limit: z.coerce
    .number()
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(500, 'must be at most 500')
    .default(20),
});

/** GET /api/elections: the limit, and with sharded leadership the shard (default 0). */
const electionsQuery = limitQuery.extend({
  shard: z.coerce.number().int('must be a whole number').min(0, 'must be at least 0').optional(),
});

const pageCandidates = [
  new URL('./console.html', import.meta.url),
  new URL('../../src/admin/console.html', import.meta.url),
].map((u) => fileURLToPath(u));

/**
 * The admin HTTP server of one replica. Reads are open (bind to loopback unless you mean it);
 * mutations need `Authorization: Bearer <token>`. Trigger and resign are leader-only: a follower
 * answers 409 with the leader's id and admin URL (from cw_members), and the CLI follows it.
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
   * Wraps a database-reading handler in the read cap: 503 with Retry-After when it is full. A GET
   * of a URL already being read shares that read (its answer would be the same), so a dashboard
   * open in many tabs, or a flood of one URL, costs one query at a time, not one per request.
   * Handlers return their data and never touch `reply`, so one answer can serve many.
   */
  private capped<T>(handler: (req: FastifyRequest) => Promise<T>) {
    return async (req: FastifyRequest): Promise<T> => {
      const key = req.method === 'GET' ? req.url : undefined;
      let read = key === undefined ? undefined : (this.sharedReads.get(key) as Promise<{ value: T } | undefined>);
      if (!read) {
        read = this.cap.run(() => handler(req));
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
    };
  }

  private statusPage(): Promise<{ html: string; csp: string }> {
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

  private job(params: unknown) {
    const { name } = parse(z.object({ name: jobName }), params);
    const job = this.o.replica.job(name);
    if (!job) throw new HttpError(404, 'unknown_job', `unknown job "${name}"`);
    return job;
  }

  /** 409 naming the leader of `leaseName` (sharded: the job's shard's), the scheduler's lease by default. */
  private async notLeader(leaseName?: string): Promise<never> {
    const r = this.o.replica;
    const cur = await this.o.backend.current(leaseName ?? r.leaseName).catch(() => null);
    const leaderAdminUrl = cur
      ? await memberAdminUrl(this.pool, this.reads.tables, cur.holder).catch(() => null)
      : null;
    throw new HttpError(409, 'not_leader', `replica "${r.replicaId}" is not the leader`, {
      leader: cur?.holder ?? null,
      leaderAdminUrl,
    });
  }

  async leaseStatus() {
    const r = this.o.replica;
    const cur = await this.o.backend.current(r.leaseName);
    return {
      backend: r.backendKind,
      leaseName: r.leaseName,
      holder: cur?.holder ?? null,
      token: cur?.token.toString() ?? null,
      ttlMs: r.ttlMs,
      expiresInMs: cur ? Math.max(0, Math.round(cur.expiresInMs)) : null,
      leaderSince: cur ? await electedAt(this.pool, this.reads.tables, r.leaseName, cur.holder, cur.token) : null,
      leaderAdminUrl: cur ? await memberAdminUrl(this.pool, this.reads.tables, cur.holder) : null,
      replicaId: r.replicaId,
      role: r.role,
      leadingSince: r.leadingSince === undefined ? null : new Date(r.leadingSince).toISOString(),
      shards: r.shardLeases ? await this.shardStatus(r.shardLeases) : undefined,
    };
  }

  /** Sharded leadership: who leads which shard, with its token and admin URL. */
  private async shardStatus(leases: readonly string[]) {
    const holders = await Promise.all(leases.map((name) => this.o.backend.current(name).catch(() => null)));
    const urls = new Map<string, string | null>();
    for (const h of new Set(holders.map((c) => c?.holder).filter((h): h is string => h !== undefined)))
      urls.set(h, await memberAdminUrl(this.pool, this.reads.tables, h));
    return leases.map((leaseName, shard) => {
      const cur = holders[shard];
      return {
        shard,
        leaseName,
        holder: cur?.holder ?? null,
        token: cur?.token.toString() ?? null,
        expiresInMs: cur ? Math.max(0, Math.round(cur.expiresInMs)) : null,
        leaderAdminUrl: cur ? (urls.get(cur.holder) ?? null) : null,
      };
    });
  }

  private routes(): void {
    this.pageAndHealthRoutes();
    this.readRoutes();
    this.jobRoutes();
    this.leaderRoutes();
    runRoutes({
      app: this.app,
      pool: this.pool,
      tables: this.reads.tables,
      replica: this.o.replica,
      capped: (handler) => this.capped(handler),
      requireToken: this.requireToken,
      notLeader: (leaseName) => this.notLeader(leaseName),
    });
    runtimeRoutes({
      app: this.app,
      replica: this.o.replica,
      reads: this.reads,
      requireToken: this.requireToken,
      notLeader: (leaseName) => this.notLeader(leaseName),
      capped: (h) => this.capped(h),
    });
  }

  /** The console page and the probes: /healthz reads no database, /readyz shares one check. */
  private pageAndHealthRoutes(): void {
    const app = this.app;
    const r = this.o.replica;

    app.get('/', async (_req, reply) => {
      const page = await this.statusPage();
      return reply
        .type('text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .header('content-security-policy', page.csp)
        .send(page.html);
    });

    app.get('/healthz', async (_req, reply) => {
      // Served from the admin thread: a scheduler thread that stopped answering is not healthy.
      const answer = health(r, r.stalled?.());
      return reply.code(answer.status).send(answer.body);
    });

    app.get('/readyz', async (_req, reply) => {
      const answer = await readiness(this.ready);
      return reply.code(answer.status).send(answer.body);
    });
  }

  /** Open reads of the database, each under the read cap. */
  private readRoutes(): void {
    const app = this.app;
    const r = this.o.replica;

    const exposition = this.capped(() => this.metrics.exposition());
    app.get('/metrics', async (req, reply) => reply.type(this.metrics.contentType).send(await exposition(req)));

    app.get(
      '/api/lease',
      this.capped(async () => this.leaseStatus()),
    );

    app.get(
      '/api/members',
      this.capped(async () => {
        const members = await listMembers(this.pool, this.reads.tables);
        return { members, agreement: memberAgreement(members) };
      }),
    );

    app.get(
      '/api/jobs',
      this.capped(async () => this.jobsStatus()),
    );

    app.get(
      '/api/elections',
      this.capped(async (req) => {
        const q = parse(electionsQuery, req.query);
        const leases = r.shardLeases ?? [r.leaseName];
        const leaseName = leases[q.shard ?? 0];
        if (leaseName === undefined)
          throw new HttpError(400, 'bad_request', `shard: must be below ${leases.length} (the shard count)`);
        return { leaseName, elections: await listElections(this.pool, this.reads.tables, leaseName, q.limit) };
      }),
    );
  }

  /** The body of GET /api/jobs: each defined job with its pause flag, next fire and last run. */
  private async jobsStatus() {
    const r = this.o.replica;
    const jobs = r.jobs();
    const names = jobs.map((j) => j.name);
    const [pauses, last, stats] = await Promise.all([
      this.reads.fires.pauses(),
      lastRuns(this.pool, this.reads.tables, names),
      this.stats.get(),
    ]);
    const now = r.clock.now(); // the scheduler's (ledger's) clock, not this host's
    return {
      jobs: jobs.map((j) => {
        const next = j.schedule.nextAfter(now);
        return {
          name: j.name,
          schedule: j.schedule.expression,
          timezone: j.schedule.timezone,
          misfire: j.misfire,
          overlap: j.overlap,
          ...policyFields(j),
          ...pauseFields(pauses.get(j.name), now),
          nextFireAt: next === null ? null : new Date(next).toISOString(),
          lastRun: boundRun(last.get(j.name) ?? null),
          ...jobOverview(j, now, stats.get(j.name)),
        };
      }),
    };
  }

  /** Job mutations (token required): trigger is leader-only, pause and resume work on any replica. */
  private jobRoutes(): void {
    const app = this.app;
    const r = this.o.replica;

    app.post('/api/jobs/:name/trigger', { onRequest: this.requireToken }, async (req) => {
      const job = this.job(req.params);
      if (r.role !== 'leader') return this.notLeader(jobLease(r, job.name));
      try {
        const fire = await r.trigger(job.name);
        r.logger.info({ job: job.name, runId: fire.runId.toString() }, 'admin: job triggered');
        return {
          triggered: true,
          job: job.name,
          runId: fire.runId.toString(),
          scheduledAt: fire.scheduledAt.toISOString(),
          leader: r.replicaId,
        };
      } catch (err) {
        if (err instanceof NotLeaderError) return this.notLeader(err.leaseName);
        throw err;
      }
    });

    // Pause: optional JSON body {"reason", "until"} (see job-policies-view.ts); resume clears both.
    app.post('/api/jobs/:name/pause', { onRequest: this.requireToken }, async (req) => {
      const job = this.job(req.params);
      const request = pauseRequest(req.body, req.headers['x-cronwarden-user'], r.clock.now());
      const pause = await r.pause(job.name, request);
      r.logger.info(
        { job: job.name, reason: pause.reason, pausedBy: pause.by, until: pause.until?.toISOString() },
        'admin: job paused',
      );
      return { job: job.name, ...pauseFields(pause, r.clock.now()) };
    });
    app.post('/api/jobs/:name/resume', { onRequest: this.requireToken }, async (req) => {
      const job = this.job(req.params);
      await r.setPaused(job.name, false);
      r.logger.info({ job: job.name }, 'admin: job resumed');
      return { job: job.name, paused: false };
    });

    app.get(
      '/api/jobs/:name/next',
      this.capped(async (req) => {
        const job = this.job(req.params);
        const pauses = await this.reads.fires.pauses();
        return previewBody(job, req.query, r.clock.now(), pauses.get(job.name));
      }),
    );
  }

  /** Leadership changes (token required, leader-only). */
  private leaderRoutes(): void {
    const r = this.o.replica;
    this.app.post('/api/resign', { onRequest: this.requireToken }, async () => {
      const lease = r.lease();
      if (r.role !== 'leader' || !lease) return this.notLeader();
      const resigned = await r.resign();
      if (!resigned) return this.notLeader();
      r.logger.info({ token: lease.token.toString() }, 'admin: resigned leadership');
      return { resigned: true, replicaId: r.replicaId, token: lease.token.toString() };
    });
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
  return app;
}

/** A row with its handler text (error) cut to MAX_SERVED_TEXT. */
function boundRun<T extends { error: string | null } | null>(row: T): T {
  return row === null ? row : { ...row, error: boundText(row.error) };
}

/** The probe listener, on the admin host unless it names its own. */
export function probeServer(
  probe: ProbeListenOptions,
  o: Pick<AdminServerOptions, 'host' | 'replica' | 'backend' | 'readyTimeoutMs'>,
): ProbeServer {
  const { replica, backend, readyTimeoutMs } = o;
  return new ProbeServer({ ...probe, host: probe.host ?? o.host, replica, backend, readyTimeoutMs });
}
