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
export const FINISHED_SQL = sqlStateList(finishedRunStates);
