/**
 * An admin route, defined once: the server registers it (server.ts) and the docs' route table is
 * made from it (routes.ts, scripts/routes-table.ts). Each module of routes (service-routes.ts,
 * leadership-routes.ts, job-routes.ts, run-routes.ts, runtime-routes.ts) exports a list of these.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { z } from 'zod';
import type { LeaseBackend } from '../locks/lease.js';
import type { Ledger } from '../ledger/ledger.js';
import type { JobStats } from '../ledger/job-stats.js';
import type { ReplicaMetrics } from './metrics.js';
import type { Readiness } from './probes.js';
import type { ReplicaView } from './replica-view.js';

/**
 * open: anyone who reaches the port (the page, the probes, the metrics: no handler text);
 * read: the same, unless the server's reads need the token (adminReadsNeedToken);
 * token: `Authorization: Bearer <admin token>` (else 401).
 */
export type RouteAccess = 'open' | 'read' | 'token';

export interface AdminRoute<P = unknown> {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  /** Fastify's form: `:name` is a path parameter. */
  path: string;
  access: RouteAccess;
  /** One line for the route table (docs/reference/admin-api.md). */
  summary: string;
  /**
   * The path parameters (route-params.ts), required when the path has any: the server parses
   * them before `handle` and answers 400 naming the parameter when they do not parse.
   */
  params?: z.ZodType<P>;
  /** Answers with the body to send, or with `reply` once it has sent; `params` as parsed. */
  handle(c: RouteContext, req: FastifyRequest, reply: FastifyReply, params: P): Promise<unknown>;
}

/** A route whose handler is typed by its `params`, for a list of routes of any parameters. */
export const defineRoute = <P>(route: AdminRoute<P>): AdminRoute => route;

/** What a route's handler is given: the replica, the admin reads' own pool, and the server's shared checks. */
export interface RouteContext {
  replica: ReplicaView;
  /** The replica's lease backend, to read who holds a lease. */
  backend: Pick<LeaseBackend, 'current'>;
  /** The admin reads' own pool (never the ledger's), and the ledger's statements on it. */
  pool: pg.Pool;
  reads: Ledger;
  metrics: ReplicaMetrics;
  /**
   * Runs a database read under the server's read cap (503 + Retry-After when full), shared with
   * any GET of the same URL already in flight: `work` returns data and never touches the reply.
   */
  read<T>(req: FastifyRequest, work: () => Promise<T>): Promise<T>;
  /** The jobs' 24 h numbers, computed at most every 10 s and shared by every caller. */
  jobStats(): Promise<Map<string, JobStats>>;
  readiness: Readiness;
  /** The console page and its Content-Security-Policy. */
  consolePage(): Promise<{ html: string; csp: string }>;
}
