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
  constructor(message = 'this replica is not the leader') {
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

/** The failover drill could not set up or drive its throwaway servers, or a fault did not take effect. */
export class DrillSetupError extends CronwardenError {
  readonly retryable = false;
}
