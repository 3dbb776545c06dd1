/**
 * The client pipelined ctx.transaction callbacks share (run-transactions.ts): one transaction, the
 * connection in node-postgres's pipeline mode, every callback of the group running at once, so their
 * statements go out without waiting for each other's answers. Their statements interleave inside the
 * one transaction, so a statement that counts on the transaction being its run's alone is refused
 * before it is sent: a row lock (FOR UPDATE / SHARE, LOCK, an advisory lock) does not block the
 * same transaction, so two runs' read-then-write of one row would both read the old value and one
 * update would be lost; a savepoint's ROLLBACK TO would undo other runs' statements; a SET would
 * change theirs; a cursor keeps a portal open, which pipeline mode cannot share.
 *
 * Written by hand: a look at the statement's words, not a parser. It errs towards refusing (a
 * string literal holding 'for update' is refused too), which costs a run its pipelining, never an
 * effect; a function that takes a lock inside PL/pgSQL is beyond it (the docs say so).
 */
import type pg from 'pg';
import { PipelinedStatementError } from '../errors.js';

/** Anywhere in a statement. */
const LOCKING = /\bfor\s+(?:no\s+key\s+update|update|key\s+share|share)\b|\bpg_(?:try_)?advisory_/i;
/** At the start of a statement (of any statement in a simple query of several). */
const OWN_TRANSACTION =
  /(?:^|;)\s*(savepoint|rollback|release|lock|set|reset|discard|begin|start|commit|end|abort|prepare\s+transaction|declare)\b/i;

/** Why `text` cannot share a pipelined transaction, or undefined when it can. */
export function refusalOf(text: string): string | undefined {
  const locking = LOCKING.exec(text);
  if (locking) return `a row or advisory lock (${locking[0].replace(/\s+/g, ' ')})`;
  const own = OWN_TRANSACTION.exec(text);
  if (own) return `a statement of the transaction's own (${own[1]!.replace(/\s+/g, ' ').toUpperCase()})`;
  return undefined;
}

/**
 * `client` as pipelined callbacks may use it: `query` refuses what `refusalOf` names, any query
 * object of its own (pg-cursor, pg-query-stream) and the `rows` option, calling `onRefused` too, so the group rolls back
 * even when the callback catches the error.
 */
export function pipelinedClient(
  client: pg.PoolClient,
  onRefused: (error: PipelinedStatementError) => void,
): pg.PoolClient {
  const query = (config: unknown, ...rest: unknown[]): unknown => {
    const refusal = refusalOfQuery(config);
    if (refusal) {
      const error = new PipelinedStatementError(refusal.statement, refusal.reason);
      onRefused(error);
      const callback = rest.find((r): r is (err: Error) => void => typeof r === 'function');
      if (callback) {
        process.nextTick(() => callback(error));
        return undefined;
      }
      return Promise.reject(error);
    }
    return (client.query as (...args: unknown[]) => unknown)(config, ...rest);
  };
  return new Proxy(client, {
    get(target, key, receiver) {
      if (key === 'query') return query;
      const value: unknown = Reflect.get(target, key, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * `call`, with what it sends on `client` meanwhile (synchronously) in one socket write: the socket
 * is corked around it (Node's Writable.cork, which nests under node-postgres's own per statement).
 * In pipeline mode node-postgres writes each statement as it is asked for, so a group's callbacks
 * made one write (one system call, one packet) each: run-path pipelined, 1.43 writes a run before
 * and 0.50 after (runs/s and CPU within the noise of four pairs on loopback).
 */
export function inOneWrite<T>(client: pg.PoolClient, call: () => T): T {
  // A pool's client is a pg.Client; pg-native's has no socket of its own to cork.
  const stream = (client as unknown as Partial<pg.Client>).connection?.stream;
  if (!stream) return call();
  stream.cork();
  try {
    return call();
  } finally {
    stream.uncork();
  }
}

/**
 * A pipelined callback for a transaction of its own (a group of one, a redo, group commit off):
 * the same statements refused, so a job behaves alike whether its group holds one run or ten, and
 * a refusal the callback caught still fails its run.
 */
export function refusingShared<T>(fn: (tx: pg.PoolClient) => Promise<T>): (tx: pg.PoolClient) => Promise<T> {
  return async (tx) => {
    let refused: PipelinedStatementError | undefined;
    const value = await fn(pipelinedClient(tx, (error) => (refused ??= error)));
    if (refused) throw refused;
    return value;
  };
}

function refusalOfQuery(config: unknown): { statement: string; reason: string } | undefined {
  if (typeof config === 'string') return withStatement(config);
  if (typeof config === 'object' && config !== null) {
    if (typeof (config as { submit?: unknown }).submit === 'function')
      return {
        statement: config.constructor.name,
        reason: 'a query object that keeps a portal open (a cursor or stream)',
      };
    if ((config as { rows?: unknown }).rows !== undefined)
      return {
        statement: String((config as { text?: unknown }).text),
        reason: 'a query fetching its rows a few at a time (rows)',
      };
    const text = (config as { text?: unknown }).text;
    if (typeof text === 'string') return withStatement(text);
  }
  return undefined;
}

function withStatement(text: string): { statement: string; reason: string } | undefined {
  const reason = refusalOf(text);
  return reason === undefined ? undefined : { statement: text.replace(/\s+/g, ' ').trim(), reason };
}
