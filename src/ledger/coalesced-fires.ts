/**
 * Overlap 'coalesce', inside a fire commit: a slot that came while a run of its job waits behind
 * the active one is recorded skipped, and the waiting run stands for it (its `coalesced` count and
 * the newest such instant, which its handler sees as ctx.coalesced); each skipped slot names the
 * run that stands for it. If no run of the job waits any more by the commit (the outbox handed it
 * over meanwhile), the oldest of the slots becomes the waiting run instead, standing for the rest:
 * every slot is either run or stood for, never dropped.
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import type { FireRequest, InsertedFire } from './fire-batch.js';
import { slotKey } from './fire-batch.js';
import { namedStatement, perSchema } from './named-statement.js';

const statements = perSchema((t) => ({
  /** Job $1's newest waiting run (held, not one of $4) stands for $2 more slots, the newest $3. */
  into: namedStatement(
    'coalesce_into_waiting_run',
    `UPDATE ${t.runs} SET coalesced = coalesced + $2, coalesced_until = GREATEST(coalesced_until, $3)
     WHERE id = (SELECT id FROM ${t.runs} WHERE job = $1 AND state = 'pending' AND enqueued_at IS NULL
                   AND id <> ALL($4::bigint[]) ORDER BY scheduled_at DESC LIMIT 1 FOR UPDATE)
     RETURNING id`,
  ),
  /** Skipped run $1 becomes the job's waiting run, standing for $2 later slots, the newest $3. */
  promote: namedStatement(
    'coalesce_promote',
    `UPDATE ${t.runs} SET state = 'pending', finished_at = NULL, enqueued_at = NULL, error = NULL,
       coalesced = $2, coalesced_until = $3
     WHERE id = $1`,
  ),
  /** The skipped runs $1 name the run $2 that stands for them. */
  name: namedStatement(
    'coalesce_name_standing_run',
    `UPDATE ${t.runs} SET error = 'overlap "coalesce": run ' || $2 || ' stands for it' WHERE id = ANY($1::bigint[])`,
  ),
}));

/**
 * Account for the coalesced slots of a commit (after its insert, in its transaction). Returns the
 * inserted rows with any slot that became the waiting run marked pending, and the slots' keys
 * that are now held.
 */
export async function coalesceSkipped(
  client: pg.PoolClient,
  t: Tables,
  fires: readonly FireRequest[],
  inserted: InsertedFire[],
): Promise<{ rows: InsertedFire[]; held: Set<string> }> {
  const held = new Set<string>();
  const coalesced = new Set(fires.filter((f) => f.coalesce).map(slotKey));
  if (coalesced.size === 0) return { rows: inserted, held };
  const byJob = new Map<string, InsertedFire[]>();
  for (const r of inserted)
    if (r.state === 'skipped' && coalesced.has(slotKey(r))) byJob.set(r.job, [...(byJob.get(r.job) ?? []), r]);
  const s = statements(t);
  const promoted = new Set<bigint>();
  for (const [job, skipped] of byJob) {
    skipped.sort((a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime());
    const ids = skipped.map((r) => r.runId.toString());
    const newest = skipped.at(-1)!.scheduledAt;
    const into = await client.query<{ id: string }>({ ...s.into, values: [job, skipped.length, newest, ids] });
    let standing = into.rows[0]?.id;
    let named = ids;
    if (standing === undefined) {
      const [first, ...rest] = skipped;
      await client.query({
        ...s.promote,
        values: [first!.runId.toString(), rest.length, rest.length > 0 ? newest : null],
      });
      promoted.add(first!.runId);
      held.add(slotKey(first!));
      standing = first!.runId.toString();
      named = rest.map((r) => r.runId.toString());
    }
    if (named.length > 0) await client.query({ ...s.name, values: [named, standing] });
  }
  return {
    rows: inserted.map((r) => (promoted.has(r.runId) ? { ...r, state: 'pending' as const } : r)),
    held,
  };
}
