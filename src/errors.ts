/**
 * One error family for the whole project. Every error says what went wrong in one line and whether
 * trying again can help, so callers (the elector, the CLI, the admin API) can decide without
 * parsing messages.
 */
export abstract class CronwardenError extends Error {
  /** True when the same call may succeed later (a backend blip), false when it never will. */
  abstract readonly retryable: boolean;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A value given by the caller or the configuration is not acceptable. Never retryable. */
export class InvalidArgumentError extends CronwardenError {
  readonly retryable = false;
}

/** Configuration (environment, file, job definition) is wrong; names the setting. */
export class InvalidConfigError extends InvalidArgumentError {
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(`${setting}: ${message}`);
  }
}

/**
 * A cron expression outside the supported dialect (README, "Cron expressions"), or one that can
 * never fire. `setting` names where it came from (`schedule`, or `job "x": schedule`).
 */
export class InvalidScheduleError extends InvalidConfigError {
  constructor(
    readonly expression: string,
    readonly reason: string,
    setting = 'schedule',
  ) {
    super(setting, `invalid cron expression ${quoteExpression(expression)}: ${reason}`);
  }
}

/** The expression as typed, JSON-quoted (no raw control characters) and cut at 80 characters. */
function quoteExpression(expression: string): string {
  const shown = expression.length > 80 ? `${expression.slice(0, 80)}…` : expression;
  return JSON.stringify(shown);
}

/** The lease is no longer ours: expired, taken by someone else, or our local deadline passed. */
export class LeaseLostError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly leaseName: string,
    reason: string,
  ) {
    super(`lease "${leaseName}" lost: ${reason}`);
  }
}

/** Renew or release by someone who does not hold the lease (or holds an older token). */
export class NotHolderError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly leaseName: string,
    holder: string,
    token: bigint,
  ) {
    super(`"${holder}" with token ${token} does not hold lease "${leaseName}"`);
  }
}

/** The backend (etcd, Redis, PostgreSQL) could not be reached or did not answer in time. */
export class BackendUnavailableError extends CronwardenError {
  readonly retryable = true;
  constructor(
    readonly backend: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${backend} unavailable: ${message}`, options);
  }
}

/**
 * A `ctx.transaction(fn, { pipelined: true })` callback sent a statement that needs the
 * transaction to itself (a row lock, a savepoint, a setting, a cursor): pipelined callbacks share
 * one transaction with other runs' and their statements interleave, so such a statement could
 * lose another run's update. Nothing of the run committed; drop `pipelined` for this job.
 */
export class PipelinedStatementError extends InvalidArgumentError {
  constructor(
    readonly statement: string,
    readonly reason: string,
  ) {
    super(
      `ctx.transaction({ pipelined: true }) refused ${reason} (${statement.slice(0, 80)}): pipelined callbacks share their ` +
        'transaction with other runs, so a statement that locks or changes the transaction itself is not allowed; ' +
        'call ctx.transaction without pipelined for this job',
    );
  }
}

/** A write carried a fencing token lower than one already accepted for the same resource. */
export class StaleTokenError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest: bigint | null,
  ) {
    super(
      `stale fencing token ${token} for "${resource}"` +
        (highest === null ? '' : `: token ${highest} was already accepted`),
    );
  }
}

/** An action that only the leader may take was asked of a replica that is not leading. */
export class NotLeaderError extends CronwardenError {
  readonly retryable = true;
  /**
   * @param leaseName the lease whose leader may do it (with sharded leadership, the job's shard's),
   *   so the admin API can name that leader; undefined: the scheduler's lease.
   */
  constructor(
    message = 'this replica is not the leader',
    readonly leaseName?: string,
  ) {
    super(message);
  }
}

/** A lease or lock wait was aborted through its AbortSignal. */
export class AbortedError extends CronwardenError {
  readonly retryable = false;
  constructor(what: string, options?: { cause?: unknown }) {
    super(`${what} aborted`, options);
  }
}

/** cronwarden's tables are missing or empty: the database was never migrated. */
export class NotMigratedError extends CronwardenError {
  readonly retryable = false;
  constructor(detail: string) {
    super(`the ledger is not migrated (${detail}): run \`cronwarden migrate\``);
  }
}

/** A schema already holds another namespace's ledger: two deployments would share runs and fences. */
export class NamespaceMismatchError extends InvalidArgumentError {
  constructor(
    readonly schema: string,
    readonly boundNamespace: string,
    readonly namespace: string,
  ) {
    super(
      `schema "${schema}" holds the ledger of namespace "${boundNamespace}", not "${namespace}": give this deployment a schema of its own (--schema / CRONWARDEN_SCHEMA) and run \`cronwarden migrate\` for it`,
    );
  }
}

/**
 * A fenced write was refused because a later slot of the same resource had already written: the
 * run is not stale but late (a catch-up fire that lost the race). The executor settles such a run
 * as 'superseded', without its effect, and does not retry it. Handlers that guard a store of
 * their own with ctx.slotToken throw it themselves when their guard refuses.
 */
export class SupersededError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly resource: string,
    readonly scheduledAt: Date,
    readonly newerScheduledAt: Date | null,
  ) {
    super(
      `"${resource}" was already written by the run of a later slot` +
        (newerScheduledAt ? ` (${newerScheduledAt.toISOString()})` : '') +
        `: the run of ${scheduledAt.toISOString()} is superseded`,
    );
  }
}

/** A call got no answer within its time limit; the same call may answer later. */
export class TimedOutError extends CronwardenError {
  readonly retryable = true;
  constructor(
    readonly what: string,
    readonly ms: number,
  ) {
    super(`${what}: no answer within ${ms} ms`);
  }
}

/** A connection or stream to a backend closed before it answered; a new one may work. */
export class ConnectionClosedError extends CronwardenError {
  readonly retryable = true;
}

/**
 * A backend answered something this code does not know (a Lua script's return code outside its
 * documented set): the script and the code are out of step, which no retry mends.
 */
export class UnexpectedReplyError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly source: string,
    reply: string,
  ) {
    super(`${source} returned ${reply}, which this version of cronwarden does not know`);
  }
}

/** Work stopped because this replica is shutting down; another replica (or a restart) can redo it. */
export class ShuttingDownError extends CronwardenError {
  readonly retryable = true;
  constructor(detail?: string) {
    super(detail ? `replica shutting down: ${detail}` : 'replica shutting down');
  }
}

/** A throwaway server the drill (or a test) starts did not answer as ready yet. */
export class ServerNotReadyError extends CronwardenError {
  readonly retryable = true;
  constructor(
    readonly server: string,
    detail: string,
  ) {
    super(`${server} not ready: ${detail}`);
  }
}

/** The drill could not set up or carry out a step (a fault did not take effect, no fire came). */
export class DrillError extends CronwardenError {
  readonly retryable = false;
}

/**
 * A server refused our credentials or the database named does not exist: the configuration is
 * wrong, and retrying (a restart loop) cannot help.
 */
export class AccessDeniedError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly service: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`${service} refused access: ${reason}`, options);
  }
}

/** A runtime schedule that does not exist (or was deleted). */
export class ScheduleNotFoundError extends InvalidArgumentError {
  constructor(readonly scheduleId: string) {
    super(`no runtime schedule "${scheduleId}"`);
  }
}

/** A runtime schedule created under an id that is already in use. */
export class ScheduleExistsError extends InvalidArgumentError {
  constructor(readonly scheduleId: string) {
    super(`runtime schedule "${scheduleId}" already exists; update it instead`);
  }
}
/** A run id the ledger does not hold (never fired, or deleted by retention). */
export class RunNotFoundError extends CronwardenError {
  readonly retryable = false;
  constructor(readonly runId: bigint) {
    super(`no run ${runId} in the ledger (never fired, or removed by retention)`);
  }
}

/**
 * A workflow run cannot do what was asked: resume while it is not failed or cancelled, go on with a
 * definition this replica does not have (its code changed since it started), or it is no workflow run.
 */
export class WorkflowRunError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly runId: bigint,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Thrown by a workflow step's ctx.transaction when an earlier attempt already completed the step
 * (its result is stored): the attempt ends there, recorded skipped; do not catch it.
 */
export class StepAlreadyCompletedError extends CronwardenError {
  readonly retryable = false;
}

/** A retry asked of a run that may not be retried in its state (completed, still active, …). */
export class RunNotRetryableError extends CronwardenError {
  readonly retryable = false;
  constructor(
    readonly runId: bigint,
    readonly state: string,
  ) {
    super(`run ${runId} is ${state}: ${retryRefusal(state)}`);
  }
}

function retryRefusal(state: string): string {
  if (state === 'completed') return 'it completed, so retrying it would repeat its effect; trigger the job instead';
  if (state === 'pending' || state === 'running' || state === 'retrying') return 'it has not settled yet';
  return 'only a failed or cancelled run can be retried';
}
