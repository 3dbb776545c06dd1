/** The states of a run, written out once: the schema, the ledger's SQL and the admin API use these. */
import { runStates, type RunState } from '../db/schema.js';

export { runStates, type RunState };

/** A run someone still has to work on: not yet claimed, running, or waiting for its next attempt. */
export const activeRunStates = ['pending', 'running', 'retrying'] as const satisfies readonly RunState[];
export type ActiveRunState = (typeof activeRunStates)[number];

/** A run that is settled for good; retention may delete it. */
export const finishedRunStates = [
  'completed',
  'failed',
  'skipped',
  'cancelled',
  'superseded',
] as const satisfies readonly RunState[];

/** `('a', 'b')` for an IN clause; the values are the constants above, never user input. */
export function sqlStateList(states: readonly RunState[]): string {
  return `(${states.map((s) => `'${s}'`).join(', ')})`;
}

export const ACTIVE_SQL = sqlStateList(activeRunStates);

/**
 * The predicate of the partial indexes of unfinished runs (cw_runs_active, cw_runs_limit_waiting):
 * a run is active exactly when its finished_at is NULL (every writer of `state` keeps the two
 * together; test/integration/ledger-contract.test.ts checks it). Not `state` itself: a column an
 * index names, in its key or its predicate, makes every update of it a non-HOT update that writes
 * an entry into each of the table's indexes, and the claim (pending → running) changes `state`.
 * A query that wants those indexes says `finished_at IS NULL` beside its state test.
 */
export const UNFINISHED = 'finished_at IS NULL';
export const FINISHED_SQL = sqlStateList(finishedRunStates);
