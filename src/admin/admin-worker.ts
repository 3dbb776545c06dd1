/**
 * The admin thread's server (see admin-thread.ts), loaded by admin-thread-entry.ts: the
 * AdminServer over a view of the replica that the main thread keeps fresh by message.
 */
import { EventEmitter } from 'node:events';
import { parentPort, workerData } from 'node:worker_threads';
import { pino, type Logger } from 'pino';
import { systemClock, type Clock } from '../clock.js';
import {
  InvalidArgumentError,
  NotLeaderError,
  RunNotFoundError,
  RunNotRetryableError,
  ScheduleExistsError,
  ScheduleNotFoundError,
  StaleTokenError,
  WorkflowRunError,
} from '../errors.js';
import type { Lease } from '../locks/lease.js';
import { CronSchedule } from '../cron/cron-schedule.js';
import type { CodeJob } from '../cron/scheduled-job.js';
import { remoteCalls, type AdminCall } from './admin-calls.js';
import type { AdminThreadInit, FromThread, ThreadError, ThreadState, ToThread } from './admin-thread.js';
import type { ReplicaActions, ReplicaEvents, ReplicaView } from './replica-view.js';
import { AdminServer } from './server.js';
import type { ThreadPriority } from './thread-priority.js';

const port = parentPort!;
const init = workerData as AdminThreadInit;
const send = (m: FromThread) => port.postMessage(m);

/**
 * The replica as the main thread last described it. What it cannot answer alone (ReplicaActions,
 * the runtime schedules, the lease backend) it asks for: see remoteCalls in main().
 */
class RemoteState extends EventEmitter<ReplicaEvents> implements Omit<ReplicaView, keyof ReplicaActions | 'runtime'> {
  readonly replicaId = init.identity.replicaId;
  readonly namespace = init.identity.namespace;
  readonly schema = init.identity.schema;
  readonly leaseName = init.identity.leaseName;
  readonly shardLeases = init.identity.shardLeases;
  readonly startedAt = init.identity.startedAt;
  readonly backendKind = init.identity.backendKind;
  readonly ttlMs = init.identity.ttlMs;
  readonly retentionMs = init.identity.retentionMs;
  readonly logger: Logger = pino({ name: 'cronwarden', level: init.log.level }).child(init.log.bindings);
  readonly clock: Clock = { ...systemClock, now: () => Date.now() + this.current.clockOffsetMs };
  private readonly jobList: CodeJob[] = init.jobs.map((j) => ({
    ...j,
    schedule: CronSchedule.parse(j.schedule, j.timezone, j.dst),
  }));
  private current: ThreadState = init.state;
  /** Monotonic time (this thread's) of the last state received, and the lease deadline on it. */
  private heardAt = performance.now();
  private leaseDeadline = 0;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private nextId = 1;

  constructor() {
    super();
    this.update(init.state);
  }

  update(state: ThreadState): void {
    this.current = state;
    this.heardAt = performance.now();
    this.leaseDeadline = state.lease ? this.heardAt + state.lease.validForMs : 0;
  }

  settle(m: Extract<ToThread, { type: 'reply' }>): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) return p.resolve(m.value);
    p.reject(reviveError(m.error));
  }

  /** Post `call` to the main thread; resolves with its answer. */
  call(call: AdminCall): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      send({ type: 'call', id, call });
    });
  }

  get role() {
    return this.current.role;
  }
  get leadingSince() {
    return this.current.leadingSince;
  }
  lease(): Lease | undefined {
    const l = this.current.lease;
    if (!l || performance.now() >= this.leaseDeadline) return undefined;
    const { validForMs: _v, ...rest } = l;
    return { ...rest, deadline: this.leaseDeadline };
  }
  stalled(): string | undefined {
    const silentMs = performance.now() - this.heardAt;
    if (silentMs <= init.stallLimitMs) return undefined;
    return `the scheduler's event loop has not answered for ${Math.round(silentMs)} ms`;
  }
  jobs(): readonly CodeJob[] {
    return this.jobList;
  }
  job(name: string): CodeJob | undefined {
    return this.jobList.find((j) => j.name === name);
  }
  hostOffsetMs() {
    return this.current.hostOffsetMs;
  }
}

/** The errors the routes tell apart by class, rebuilt with their fields so `instanceof` holds here too. */
const errorClasses: Record<string, { prototype: Error }> = {
  NotLeaderError,
  RunNotFoundError,
  RunNotRetryableError,
  StaleTokenError,
  WorkflowRunError,
  ScheduleNotFoundError,
  ScheduleExistsError,
  InvalidArgumentError,
};

function reviveError(e: ThreadError): Error {
  const known = errorClasses[e.name] ?? (e.invalidArgument ? InvalidArgumentError : undefined);
  const proto = known?.prototype ?? Error.prototype;
  const err = Object.create(proto) as Error;
  return Object.assign(err, e.fields, { name: e.name, message: e.message, code: e.code });
}

/** Serve the admin API; `priority`: what admin-thread-entry.ts did to the thread's priority first. */
export async function runAdminThread(priority: ThreadPriority | undefined): Promise<void> {
  const state = new RemoteState();
  const remote = remoteCalls((call) => state.call(call));
  const view: ReplicaView = Object.assign(state, remote.replica, {
    runtime: init.runtime ? remote.runtime : undefined,
  });
  if (priority && 'unavailable' in priority) {
    view.logger.info(
      { reason: priority.unavailable },
      'admin thread: CPU priority not lowered; it shares the cores with the scheduler at the same priority',
    );
  }
  const server = new AdminServer({
    ...init.server,
    replica: view,
    backend: remote.lease,
    databaseUrl: init.databaseUrl,
  });
  // Started while the replica already leads (its events passed): the metrics start from its state.
  const lease = view.lease();
  if (view.role === 'leader') state.emit('role:changed', 'leader');
  if (lease) state.emit('lease:acquired', lease);
  port.on('message', (m: ToThread) => {
    if (m.type === 'state') state.update(m.state);
    else if (m.type === 'event') (state.emit as (n: string, ...a: unknown[]) => boolean)(m.name, ...m.args);
    else if (m.type === 'reply') state.settle(m);
    else if (m.type === 'close') void server.close().finally(() => send({ type: 'closed' }));
  });
  try {
    send({ type: 'listening', url: await server.listen(), priority });
  } catch (err) {
    const e = err as Error;
    send({ type: 'failed', error: { name: e.name, message: e.message } });
  }
}
