import { BackendUnavailableError } from '../errors.js';
import { isPostgresUnavailable } from '../db/postgres-unavailable.js';

/** Run a ledger operation; PostgreSQL being unreachable becomes BackendUnavailableError (retryable). */
export async function ledgerCall<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof BackendUnavailableError || !isPostgresUnavailable(err)) throw err;
    throw new BackendUnavailableError('postgres', `${what}: ${(err as Error).message}`, { cause: err });
  }
}
