/**
 * The admin thread's calls to the main thread, written once. The admin server calls the replica
 * (ReplicaView's actions and runtime schedules) and reads the lease backend; run in a thread of
 * its own (admin-thread.ts) it cannot, so each call is a message the main thread answers. This map
 * gives, for each object the main thread answers with, each method's arguments and result; all
 * else derives from it: ReplicaActions and RuntimeAdmin (replica-view.ts), the worker's callers
 * (remoteCalls: one function per entry, each posting a message) and the main thread's dispatch
 * (answerCall: by object and method name, no casts).
 */
import type { LeaseRecord } from '../locks/lease.js';
import type { CommittedFire } from '../ledger/fire-ledger.js';
import type { JobPause, PauseRequest } from '../ledger/pauses.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import type { SentSignal } from '../ledger/workflow-ledger.js';
import type { OnceRun, StoredSchedule } from '../ledger/schedule-ledger.js';
import type { BackfillRequest, BackfillStep } from '../scheduler/firing/backfill.js';

/** A method's arguments and result, as a value: the types are for the compiler, the names for run time. */
interface Signature<A extends unknown[], R> {
  readonly args?: A;
  readonly result?: R;
}
const signature = <A extends unknown[], R>(): Signature<A, R> => ({});

export const adminCalls = {
  replica: {
    /** Answers when the ledger's own pool can run a query (for /readyz). */
    pingLedger: signature<[], void>(),
    /** The run-attempt metrics this replica's worker counted, as Prometheus text (for /metrics). */
    attemptMetrics: signature<[], string>(),
    /** Fire a job now (leader only). */
    trigger: signature<[job: string], CommittedFire>(),
    setPaused: signature<[job: string, paused: boolean], void>(),
    /** Pause with a reason, who and an optional expiry (slots at or after `until` fire). */
    pause: signature<[job: string, request: PauseRequest], JobPause>(),
    /** Give up leadership; false when not leading. */
    resign: signature<[], boolean>(),
    /** Retry a failed or cancelled run (leader only, fenced like a fire); a workflow run resumes from its failed steps. */
    retry: signature<[runId: bigint], RetriedRun>(),
    /** Cancel an active run (a workflow run with its steps); false when it was not active. */
    cancel: signature<[runId: bigint, reason: string], boolean>(),
    /** Send a workflow run a signal (a step may wait for it). */
    signal: signature<[runId: bigint, name: string, data: unknown, by: string], SentSignal>(),
  },
  /** Runtime schedules, one-off runs and backfills. */
  runtime: {
    create: signature<[id: string, input: unknown, actor: string], StoredSchedule>(),
    /** A partial input laid over the current version. */
    update: signature<[id: string, input: unknown, actor: string], StoredSchedule>(),
    setPaused: signature<[id: string, paused: boolean, actor: string], StoredSchedule>(),
    delete: signature<[id: string, actor: string], StoredSchedule>(),
    /** Leader only (NotLeaderError otherwise). */
    once: signature<[job: string, o: { at: Date; key: string; payload: unknown }], OnceRun>(),
    /** Leader only (NotLeaderError otherwise). */
    backfill: signature<[r: BackfillRequest], BackfillStep>(),
  },
  /** The replica's lease backend. */
  lease: {
    /** Who holds lease `name` now. */
    current: signature<[name: string], LeaseRecord | null>(),
  },
};

type Map = typeof adminCalls;
export type CallTarget = keyof Map;

/** The methods a group of the map stands for. */
export type Methods<M> = {
  [K in keyof M]: M[K] extends Signature<infer A, infer R> ? (...args: A) => Promise<R> : never;
};

/** Every object the main thread answers with, by name: the map as methods. */
export type AdminCalls = { [T in CallTarget]: Methods<Map[T]> };

type CallTo<T extends CallTarget> = {
  [K in keyof Map[T]]: { to: T; op: K; args: Parameters<AdminCalls[T][K]> };
}[keyof Map[T]];

/** One call as it crosses to the main thread: which object, which method, its arguments. */
export type AdminCall = { [T in CallTarget]: CallTo<T> }[CallTarget];

/**
 * The worker's side: each method of the map a function that posts its call and resolves with the
 * main thread's answer. The one place a call's types are taken on trust: `post` answers the call
 * it is given, and answerCall made that answer with the map's own types.
 */
export function remoteCalls(post: (call: AdminCall) => Promise<unknown>): AdminCalls {
  const group = <T extends CallTarget>(to: T) =>
    Object.fromEntries(
      Object.keys(adminCalls[to]).map((op) => [op, (...args: unknown[]) => post({ to, op, args } as AdminCall)]),
    ) as AdminCalls[T];
  return { replica: group('replica'), runtime: group('runtime'), lease: group('lease') };
}

/** What the main thread answers with; a replica without runtime schedules has none. */
export type CallTargets = Omit<AdminCalls, 'runtime'> & { runtime: AdminCalls['runtime'] | undefined };

/** The main thread's side: the call's method on the object it names, by key. */
export function answerCall(targets: CallTargets, call: AdminCall): Promise<unknown> {
  switch (call.to) {
    case 'replica':
      return invoke(targets.replica, call);
    case 'runtime':
      if (!targets.runtime) return Promise.reject(new Error('runtime schedules are not served here'));
      return invoke(targets.runtime, call);
    case 'lease':
      return invoke(targets.lease, call);
  }
}

/** `target[op](...args)`, typed for whichever method `op` names (a correlated union). */
function invoke<F extends Record<K, (...args: never[]) => Promise<unknown>>, K extends keyof F>(
  target: F,
  call: { [P in K]: { op: P; args: Parameters<F[P]> } }[K],
): Promise<unknown> {
  return target[call.op](...call.args);
}
