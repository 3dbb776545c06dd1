import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { NotLeaderError } from '../errors.js';
import { runStates } from '../db/schema.js';
import type { LeaseBackend } from '../locks/lease.js';
import type { Replica } from '../replica/replica.js';
import { bearerMatches } from './auth.js';
import { ReplicaMetrics } from './metrics.js';
import { electedAt, lastRuns, listElections, listMembers, listRuns, memberAdminUrl } from '../ledger/admin-reads.js';

export interface AdminServerOptions {
  replica: Replica;
  /** The replica's lease backend, to read who holds the lease. */
  backend: LeaseBackend;
  /** Bearer token for mutations; without one every mutation is refused (401). */
  token?: string;
  host?: string;
  port?: number;
  /** How long /readyz waits for the backend and the database. Default 2 s. */
  readyTimeoutMs?: number;
}

const jobName = z.string().regex(/^[A-Za-z0-9_.:@/-]{1,200}$/, 'must be 1-200 letters, digits or _ . : @ / -');
const runsQuery = z.object({
  job: jobName.optional(),
  state: z.enum(runStates, `must be one of ${runStates.join(', ')}`).optional(),
  limit: z.coerce.number().int('must be a whole number').min(1, 'must be at least 1').max(500, 'must be at most 500').default(50),
  before: z.string().regex(/^[1-9][0-9]{0,18}$/, 'must be a run id').optional(),
});
const limitQuery = z.object({ limit: z.coerce.number().int('must be a whole number').min(1, 'must be at least 1').max(500, 'must be at most 500').default(20) });

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  throw new HttpError(400, 'bad_request', `${issue.path.join('.') || 'value'}: ${issue.message}`);
}

const pageCandidates = [new URL('./status.html', import.meta.url), new URL('../../src/admin/status.html', import.meta.url)].map((u) => fileURLToPath(u));

/**
 * The admin HTTP server of one replica. Reads are open (bind to loopback unless you mean it);
 * mutations need `Authorization: Bearer <token>`. Trigger and resign are leader-only: a follower
 * answers 409 with the leader's id and admin URL (from cw_members), and the CLI follows it.
 */
export class AdminServer {
  readonly app: FastifyInstance;
  readonly metrics: ReplicaMetrics;
  private readonly pool: pg.Pool;

  constructor(private readonly o: AdminServerOptions) {
    this.pool = o.replica.ledger.pool;
    this.metrics = new ReplicaMetrics(o.replica, this.pool);
    this.app = Fastify({ logger: false, return503OnClosing: true });
    this.app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, _req, reply) => {
      if (err instanceof HttpError) return reply.code(err.status).send({ error: err.message, code: err.code, ...err.extra });
      if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
        return reply.code(err.statusCode).send({ error: err.message, code: 'bad_request' });
      }
      o.replica.logger.error({ err }, 'admin request failed');
      return reply.code(500).send({ error: err.message, code: 'internal' });
    });
    this.app.setNotFoundHandler((req, reply) => reply.code(404).send({ error: `no route ${req.method} ${req.url.split('?')[0]}`, code: 'not_found' }));
    this.routes();
  }

  /** Listen; resolves to the base URL (http://host:port). */
  async listen(): Promise<string> {
    const host = this.o.host ?? '127.0.0.1';
    await this.app.listen({ host, port: this.o.port ?? 8080 });
    const addr = this.app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : this.o.port;
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  }

  async close(): Promise<void> {
    await this.app.close();
  }

  private requireToken = async (req: FastifyRequest): Promise<void> => {
    if (!bearerMatches(req.headers.authorization, this.o.token)) {
      throw new HttpError(401, 'unauthorized', this.o.token ? 'missing or wrong bearer token' : 'mutations are disabled: no admin token configured');
    }
  };

  private job(params: unknown) {
    const { name } = parse(z.object({ name: jobName }), params);
    const job = this.o.replica.registry.get(name);
    if (!job) throw new HttpError(404, 'unknown_job', `unknown job "${name}"`);
    return job;
  }

  private async notLeader(): Promise<never> {
    const r = this.o.replica;
    const cur = await this.o.backend.current(r.leaseName).catch(() => null);
    const leaderAdminUrl = cur ? await memberAdminUrl(this.pool, cur.holder).catch(() => null) : null;
    throw new HttpError(409, 'not_leader', `replica "${r.replicaId}" is not the leader`, { leader: cur?.holder ?? null, leaderAdminUrl });
  }

  async leaseStatus() {
    const r = this.o.replica;
    const cur = await this.o.backend.current(r.leaseName);
    return {
      backend: r.elector.backendKind,
      leaseName: r.leaseName,
      holder: cur?.holder ?? null,
      token: cur?.token.toString() ?? null,
      ttlMs: r.elector.options.ttlMs,
      expiresInMs: cur ? Math.max(0, Math.round(cur.expiresInMs)) : null,
      leaderSince: cur ? await electedAt(this.pool, r.leaseName, cur.holder, cur.token) : null,
      leaderAdminUrl: cur ? await memberAdminUrl(this.pool, cur.holder) : null,
      replicaId: r.replicaId,
      role: r.role,
      leadingSince: r.elector.leadingSince === undefined ? null : new Date(r.elector.leadingSince).toISOString(),
    };
  }

  private routes(): void {
    const app = this.app;
    const r = this.o.replica;

    app.get('/', async (_req, reply) => {
      const path = pageCandidates.find((p) => existsSync(p));
      if (!path) throw new HttpError(500, 'internal', 'status.html not found');
      return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(await readFile(path, 'utf8'));
    });

    app.get('/healthz', async (_req, reply) => {
      // client-go's healthz adaptor: unhealthy when we believe we lead but our lease deadline passed.
      if (r.role === 'leader' && !r.elector.lease()) {
        return reply.code(503).send({ ok: false, error: 'leading past the lease deadline without a renew', role: r.role });
      }
      return { ok: true, role: r.role, replicaId: r.replicaId };
    });

    app.get('/readyz', async (_req, reply) => {
      const ms = this.o.readyTimeoutMs ?? 2000;
      const [backend, database] = await Promise.all([
        check(() => this.o.backend.current(r.leaseName), ms),
        check(() => this.pool.query('SELECT 1'), ms),
      ]);
      const ok = backend === 'ok' && database === 'ok';
      return reply.code(ok ? 200 : 503).send({ ok, backend, database });
    });

    app.get('/metrics', async (_req, reply) => reply.type(this.metrics.contentType).send(await this.metrics.exposition()));

    app.get('/api/lease', async () => this.leaseStatus());

    app.get('/api/members', async () => ({ members: await listMembers(this.pool) }));

    app.get('/api/jobs', async () => {
      const jobs = r.registry.list();
      const names = jobs.map((j) => j.name);
      const [paused, last] = await Promise.all([r.ledger.fires.pausedJobs(), lastRuns(this.pool, names)]);
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
            paused: paused.has(j.name),
            nextFireAt: next === null ? null : new Date(next).toISOString(),
            lastRun: last.get(j.name) ?? null,
          };
        }),
      };
    });

    app.get('/api/runs', async (req) => {
      const q = parse(runsQuery, req.query);
      if (q.job && !r.registry.get(q.job)) throw new HttpError(404, 'unknown_job', `unknown job "${q.job}"`);
      return listRuns(this.pool, { job: q.job, state: q.state, limit: q.limit, before: q.before === undefined ? undefined : BigInt(q.before) });
    });

    app.get('/api/elections', async (req) => {
      const q = parse(limitQuery, req.query);
      return { elections: await listElections(this.pool, r.leaseName, q.limit) };
    });

    app.post('/api/jobs/:name/trigger', { onRequest: this.requireToken }, async (req) => {
      const job = this.job(req.params);
      if (r.role !== 'leader') return this.notLeader();
      try {
        const fire = await r.fireLoop.trigger(job.name);
        r.logger.info({ job: job.name, runId: fire.runId.toString() }, 'admin: job triggered');
        return { triggered: true, job: job.name, runId: fire.runId.toString(), scheduledAt: fire.scheduledAt.toISOString(), leader: r.replicaId };
      } catch (err) {
        if (err instanceof NotLeaderError) return this.notLeader();
        throw err;
      }
    });

    for (const action of ['pause', 'resume'] as const) {
      app.post(`/api/jobs/:name/${action}`, { onRequest: this.requireToken }, async (req) => {
        const job = this.job(req.params);
        await r.ledger.fires.setPaused(job.name, action === 'pause');
        r.logger.info({ job: job.name }, `admin: job ${action}d`);
        return { job: job.name, paused: action === 'pause' };
      });
    }

    app.post('/api/resign', { onRequest: this.requireToken }, async () => {
      const lease = r.elector.lease();
      if (r.role !== 'leader' || !lease) return this.notLeader();
      const resigned = await r.elector.resign();
      if (!resigned) return this.notLeader();
      r.logger.info({ token: lease.token.toString() }, 'admin: resigned leadership');
      return { resigned: true, replicaId: r.replicaId, token: lease.token.toString() };
    });
  }
}

async function check(fn: () => Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
      }),
    ]);
    return 'ok';
  } catch (err) {
    return (err as Error).message;
  } finally {
    clearTimeout(timer);
  }
}

