/**
 * Before a replica campaigns, one read of its lease backend. A backend misconfigured in a way no
 * retry fixes (the PostgreSQL backend looking for cw_leases in a schema that has none, a refused
 * login) stops start-up with one clear error; before this, such a replica logged a warning, said
 * "replica started", and never led. A backend that does not answer yet is the elector's to retry.
 */
import type { Logger } from 'pino';
import { AccessDeniedError, InvalidConfigError } from '../errors.js';
import type { LeaseBackend } from '../locks/lease.js';
import { settlesWithin } from '../settles-within.js';

export interface LeaseBackendCheck {
  leaseName: string;
  /** The ledger's schema, named when a PostgreSQL backend looks elsewhere. */
  schema: string;
  timeoutMs: number;
  logger: Logger;
}

export async function checkLeaseBackend(backend: LeaseBackend, o: LeaseBackendCheck): Promise<void> {
  let failure: unknown;
  const read = backend.current(o.leaseName).then(
    () => undefined,
    (err: unknown) => {
      failure = err;
    },
  );
  if (!(await settlesWithin(read, o.timeoutMs))) {
    o.logger.warn({ timeoutMs: o.timeoutMs }, 'the lease backend did not answer at start-up; campaigning anyway');
    return;
  }
  if (failure instanceof InvalidConfigError) {
    const reason = failure.message.slice(failure.setting.length + 2);
    const where = backend.kind === 'postgres' ? `; this replica's ledger is in schema "${o.schema}"` : '';
    throw new InvalidConfigError(failure.setting, `${reason}${where}`);
  }
  if (failure instanceof AccessDeniedError) throw failure;
  if (failure !== undefined)
    o.logger.warn({ err: failure }, 'the lease backend could not be read at start-up; campaigning anyway');
}
