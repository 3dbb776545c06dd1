/**
 * The admin HTTP in a worker thread of its own (node:worker_threads): accepting and parsing
 * thousands of admin connections then costs that thread's event loop, not the one that fires,
 * renews the lease and runs handlers. The worker runs the same AdminServer over a copy of this
 * replica's view, which the main thread keeps fresh by message:
 * - state (role, lease, offsets) on every change and every HEARTBEAT_MS; /healthz in the worker
 *   fails when that heartbeat is older than `stallLimitMs`, so a wedged main loop still fails
 *   liveness;
 * - the replica's events, for the metrics;
 * - calls the worker cannot answer alone (trigger, pause, resign, runtime schedule changes, one-off
 *   runs and backfills, the lease backend, the ledger ping) are forwarded here and answered by
 *   message; admin-calls.ts lists them, once, for both sides.
 * The worker lowers its own CPU priority (`niceness`, thread-priority.ts) before it loads the
 * server (admin-thread-entry.ts), so its start and a flood's parsing yield the cores to this
 * thread; the probe listener, if any, is served here (probe-server.ts).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Lease, LeaseBackend } from '../locks/lease.js';
import type { ElectorRole } from '../scheduler/election/elector.js';
import type { DstPolicy } from '../cron/cron-schedule.js';
import { InvalidArgumentError, InvalidConfigError } from '../errors.js';
import type { MisfirePolicy, OverlapPolicy } from '../cron/scheduled-job.js';
import { answerCall, type AdminCall } from './admin-calls.js';
import type { ReplicaEvents, ReplicaView } from './replica-view.js';
import type { ProbeServer } from './probe-server.js';
import { probeServer, type AdminServerOptions } from './server.js';
import type { ThreadPriority } from './thread-priority.js';

/** How often the main thread tells the admin thread it is alive, with its state. */
export const HEARTBEAT_MS = 250;

/** The replica's events the metrics count, forwarded to the admin thread. */
export const forwardedEvents = [
  'role:changed',
  'lease:acquired',
  'lease:renewed',
  'lease:lost',
  'fire:committed',
  'fire:duplicate',
  'fire:refused',
  'fire:missed',
  'fire:skipped',
  'occurrences:missed',
  'enqueue:failed',
  'backend:error',
] as const satisfies readonly (keyof ReplicaEvents)[];

export interface ThreadJob {
  name: string;
  schedule: string;
  timezone: string;
  misfire: MisfirePolicy;
  overlap: OverlapPolicy;
  catchUpWindowMs: number;
  misfireGraceMs: number;
  maxCatchUp: number;
  overlapQueueMax: number;
  dst: DstPolicy;
  /** A workflow's steps. */
  workflowSteps?: { name: string; needs: string[]; mapped: boolean }[];
}

/** What the admin thread starts from (workerData). */
export interface AdminThreadInit {
  server: Omit<AdminServerOptions, 'replica' | 'backend' | 'databaseUrl' | 'probe'>;
  databaseUrl: string;
  identity: Pick<
    ReplicaView,
    | 'replicaId'
    | 'namespace'
    | 'schema'
    | 'leaseName'
    | 'shardLeases'
    | 'startedAt'
    | 'backendKind'
    | 'ttlMs'
    | 'retentionMs'
  >;
  jobs: ThreadJob[];
  /** Whether the replica serves runtime schedules (ReplicaView.runtime). */
  runtime: boolean;
  log: { level: string; bindings: Record<string, unknown> };
  stallLimitMs: number;
  /** Added to the worker's nice value; 0 leaves it. */
  niceness: number;
  state: ThreadState;
}

/** The replica's changing state, as of when it was posted. */
export interface ThreadState {
  role: ElectorRole;
  leadingSince: number | undefined;
  /** The lease while leading within its deadline, and how long it stays valid from now. */
  lease: (Omit<Lease, 'deadline'> & { validForMs: number }) | undefined;
  hostOffsetMs: number | undefined;
  /** The scheduler clock minus this host's wall clock. */
  clockOffsetMs: number;
}

/** An error as it crosses to the admin thread: its class by name, and its plain fields. */
export interface ThreadError {
  name: string;
  message: string;
  code?: string;
  fields?: Record<string, unknown>;
  /** An InvalidArgumentError (or subclass) the admin thread has no class for: still a 400. */
  invalidArgument?: boolean;
}

export type ToThread =
  | { type: 'state'; state: ThreadState }
  | { type: 'event'; name: (typeof forwardedEvents)[number]; args: unknown[] }
  | { type: 'reply'; id: number; ok: true; value: unknown }
  | { type: 'reply'; id: number; ok: false; error: ThreadError }
  | { type: 'close' };

export type FromThread =
  | { type: 'listening'; url: string; priority: ThreadPriority | undefined }
  | { type: 'failed'; error: { name: string; message: string } }
  | { type: 'call'; id: number; call: AdminCall }
  | { type: 'closed' };

export interface AdminThreadOptions extends Omit<AdminServerOptions, 'replica' | 'backend' | 'databaseUrl'> {
  replica: ReplicaView;
  backend: Pick<LeaseBackend, 'current'>;
  /** A connection URL: a pool's settings may hold functions, which cannot cross to a thread. */
  databaseUrl: string;
  /** /healthz fails when the main thread has posted nothing for this long (default 5 s). */
  stallLimitMs?: number;
  /**
   * Added to the worker thread's nice value (Linux; at most 19), so under a flood the scheduler's
   * thread wins the cores. Default 10; 0 leaves the thread at the process's priority.
   */
  niceness?: number;
}

export const DEFAULT_NICENESS = 10;

function workerEntry(): { code: string } {
  const js = fileURLToPath(new URL('./admin-thread-entry.js', import.meta.url));
  const url = new URL(existsSync(js) ? './admin-thread-entry.js' : './admin-thread-entry.ts', import.meta.url).href;
  // The source checkout runs TypeScript through tsx, which a worker registers for itself.
  const load = existsSync(js)
    ? `import(${JSON.stringify(url)})`
    : `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(url)}); })`;
  return { code: `${load}.catch((err) => { throw err; });` };
}

/** The main thread's side: starts the worker, feeds it, answers its calls. */
export class AdminThread {
  private readonly worker: Worker;
  private readonly beat: NodeJS.Timeout;
  private readonly listeners: [keyof ReplicaEvents, (...args: unknown[]) => void][] = [];
  private listening: Promise<{ url: string; priority: ThreadPriority | undefined }>;
  private started: Promise<string> | undefined;
  private closed: Promise<void> | undefined;
  private exited = false;
  private readonly probes: ProbeServer | undefined;
  /** Where the probe listener answers, once listening (undefined without one). */
  probeUrl: string | undefined;
  /** The worker's OS thread id and nice value, or why it kept the process's; once listening. */
  priority: ThreadPriority | undefined;

  constructor(private readonly o: AdminThreadOptions) {
    const r = o.replica;
    const { replica: _r, backend: _b, databaseUrl, stallLimitMs, niceness, probe, ...server } = o;
    if (niceness !== undefined && !(Number.isInteger(niceness) && niceness >= 0 && niceness <= 19))
      throw new InvalidConfigError('admin niceness', 'must be a whole number from 0 to 19');
    const init: AdminThreadInit = {
      server,
      databaseUrl,
      identity: {
        replicaId: r.replicaId,
        namespace: r.namespace,
        schema: r.schema,
        leaseName: r.leaseName,
        shardLeases: r.shardLeases,
        startedAt: r.startedAt,
        backendKind: r.backendKind,
        ttlMs: r.ttlMs,
        retentionMs: r.retentionMs,
      },
      jobs: r.jobs().map((j) => ({
        name: j.name,
        schedule: j.schedule.expression,
        timezone: j.schedule.timezone,
        misfire: j.misfire,
        overlap: j.overlap,
        catchUpWindowMs: j.catchUpWindowMs,
        misfireGraceMs: j.misfireGraceMs,
        maxCatchUp: j.maxCatchUp,
        overlapQueueMax: j.overlapQueueMax,
        dst: { ...j.schedule.dst },
        ...(j.workflowSteps ? { workflowSteps: j.workflowSteps.map((s) => ({ ...s, needs: [...s.needs] })) } : {}),
      })),
      runtime: r.runtime !== undefined,
      log: { level: r.logger.level, bindings: r.logger.bindings() },
      stallLimitMs: stallLimitMs ?? 5000,
      niceness: niceness ?? DEFAULT_NICENESS,
      state: this.state(),
    };
    this.worker = new Worker(workerEntry().code, { eval: true, workerData: init });
    this.listening = new Promise((resolve, reject) => {
      this.worker.on('message', (m: FromThread) => {
        if (m.type === 'listening') resolve(m);
        else if (m.type === 'failed') reject(Object.assign(new Error(m.error.message), { name: m.error.name }));
        else if (m.type === 'call') void this.answer(m.id, m.call);
      });
      this.worker.once('exit', (code) => {
        this.exited = true;
        reject(new Error(`the admin thread exited (${code}) before it listened`));
      });
    });
    this.listening.catch(() => {}); // listen() reports it
    this.worker.on('error', (err) => r.logger.error({ err }, 'admin thread failed'));
    this.forwardEvents();
    this.beat = setInterval(() => this.post({ type: 'state', state: this.state() }), HEARTBEAT_MS);
    this.probes = probe && probeServer(probe, o);
  }

  /** Resolves to the base URL once the worker listens (and the probe listener, if any). */
  listen(): Promise<string> {
    this.started ??= (async () => {
      const { url, priority } = await this.listening;
      this.priority = priority;
      this.probeUrl = await this.probes?.listen();
      return url;
    })();
    return this.started;
  }

  close(): Promise<void> {
    this.closed ??= (async () => {
      clearInterval(this.beat);
      await this.probes?.close();
      for (const [name, fn] of this.listeners) this.o.replica.off(name, fn);
      if (this.exited) return;
      const done = new Promise<void>((resolve) => {
        this.worker.on('message', (m: FromThread) => m.type === 'closed' && resolve());
        this.worker.once('exit', () => resolve());
      });
      this.post({ type: 'close' });
      // Closing waits for in-flight requests; a wedged one does not hold the replica's stop.
      const timer = setTimeout(() => void this.worker.terminate(), 10_000);
      await done;
      clearTimeout(timer);
      await this.worker.terminate();
    })();
    return this.closed;
  }

  private state(): ThreadState {
    const r = this.o.replica;
    const lease = r.lease();
    const now = r.clock.monotonic();
    return {
      role: r.role,
      leadingSince: r.leadingSince,
      lease: lease && {
        name: lease.name,
        holder: lease.holder,
        token: lease.token,
        ttlMs: lease.ttlMs,
        safetyMarginMs: lease.safetyMarginMs,
        validForMs: lease.deadline - now,
      },
      hostOffsetMs: r.hostOffsetMs(),
      clockOffsetMs: r.clock.now() - Date.now(),
    };
  }

  private post(message: ToThread): void {
    if (this.exited) return;
    try {
      this.worker.postMessage(message);
    } catch (err) {
      // A value that cannot be cloned (an event argument holding a function): the metrics miss it.
      this.o.replica.logger.debug({ err }, 'admin thread: message not sent');
    }
  }

  private forwardEvents(): void {
    for (const name of forwardedEvents) {
      const fn = (...args: unknown[]) => {
        // The state first, so a role change is seen by /healthz and /api/lease with its event.
        this.post({ type: 'state', state: this.state() });
        this.post({ type: 'event', name, args });
      };
      this.o.replica.on(name, fn);
      this.listeners.push([name, fn]);
    }
  }

  private async answer(id: number, call: AdminCall): Promise<void> {
    const r = this.o.replica;
    try {
      const value = await answerCall({ replica: r, runtime: r.runtime, lease: this.o.backend }, call);
      this.post({ type: 'reply', id, ok: true, value });
    } catch (err) {
      const e = err as Error & { code?: unknown };
      const code = typeof e.code === 'string' ? e.code : undefined;
      // Plain fields only (a run's state, a token): the routes answer with them.
      const fields = Object.fromEntries(
        Object.entries(e).filter(([, v]) => ['string', 'number', 'bigint', 'boolean'].includes(typeof v) || v === null),
      );
      const invalidArgument = err instanceof InvalidArgumentError;
      this.post({
        type: 'reply',
        id,
        ok: false,
        error: { name: e.name, message: e.message, code, fields, invalidArgument },
      });
    }
  }
}
