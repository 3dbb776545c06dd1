/**
 * Statements sent as named prepared statements (graphile-worker's style): a connection parses and
 * plans each once, and later runs send only its parameters. A statement's text names its
 * deployment's schema, and one pool may serve two schemas while a connection refuses one name
 * for two texts: so the name carries a hash of the text (and stays within PostgreSQL's 63 bytes).
 */
import { createHash } from 'node:crypto';
import type { Tables } from '../db/tables.js';

export interface NamedStatement {
  readonly name: string;
  readonly text: string;
}

export function namedStatement(operation: string, text: string): NamedStatement {
  const hash = createHash('sha256').update(text).digest('hex').slice(0, 12);
  return { name: `cw_${operation}_${hash}`, text };
}

/** A module's statements, made once per schema (`tablesIn` hands out one Tables per schema). */
export function perSchema<S>(make: (t: Tables) => S): (t: Tables) => S {
  const made = new WeakMap<Tables, S>();
  return (t) => {
    let statements = made.get(t);
    if (statements === undefined) {
      statements = make(t);
      made.set(t, statements);
    }
    return statements;
  };
}
