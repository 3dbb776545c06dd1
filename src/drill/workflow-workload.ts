/**
 * The drill's workflow workload (with `--workflows`), loaded beside the jobs by every replica
 * process: a diamond every second, a fan-out of 50 items with a fan-in every 5 s, and a step that
 * waits for a signal (which never comes: its wait times out and the run goes on) every 5 s. Every
 * step writes one row to cw_drill_step_effects inside its ctx.transaction (with its result and its
 * completion), so the checker can count each step run's effect: exactly once, whatever the faults.
 * One step of each workflow works for a second first, so kills and pauses land inside steps.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { defineWorkflow, type StepContext } from '../jobs/define-workflow.js';

export const STEP_EFFECTS_TABLE = 'cw_drill_step_effects';
export const STEP_EFFECTS_DDL = `CREATE TABLE ${STEP_EFFECTS_TABLE} (step_run_id bigint NOT NULL, workflow_run_id bigint NOT NULL,
  step text NOT NULL, item int, token bigint NOT NULL, replica text NOT NULL)`;

const replica = process.env.CRONWARDEN_REPLICA_ID ?? String(process.pid);

/** The step's effect, its result and its completion in one transaction. */
function effect<T>(ctx: StepContext, result: T, workMs = 0): Promise<T> {
  return ctx.transaction(async (tx) => {
    if (workMs > 0) await sleep(workMs);
    await tx.query(
      `INSERT INTO ${STEP_EFFECTS_TABLE} (step_run_id, workflow_run_id, step, item, token, replica) VALUES ($1, $2, $3, $4, $5, $6)`,
      [ctx.runId, ctx.workflowRunId, ctx.step, ctx.item ?? null, ctx.fencingToken.toString(), replica],
    );
    return result;
  });
}

const diamond = defineWorkflow({ name: 'drill-diamond', schedule: '* * * * * *' })
  .step('a', (ctx) => effect(ctx, 1))
  .step('b', { needs: ['a'], run: (ctx, i) => effect(ctx, i.a + 1, 1000) })
  .step('c', { needs: ['a'], run: (ctx, i) => effect(ctx, i.a + 2) })
  .step('d', { needs: ['b', 'c'], run: (ctx, i) => effect(ctx, i.b + i.c) });

const fanOut = defineWorkflow({ name: 'drill-fanout', schedule: '*/5 * * * * *' })
  .step('list', (ctx) =>
    effect(
      ctx,
      Array.from({ length: 50 }, (_, k) => k),
    ),
  )
  .step('each', {
    needs: ['list'],
    map: (i) => i.list,
    run: (ctx, k) => effect(ctx, k * 2, k % 10 === 0 ? 1000 : 0),
  })
  .step('sum', {
    needs: ['each'],
    run: (ctx, i) =>
      effect(
        ctx,
        i.each.reduce((a, b) => a + b, 0),
      ),
  });

const wait = defineWorkflow({ name: 'drill-wait', schedule: '2-59/5 * * * * *' })
  .step('ask', (ctx) => effect(ctx, 'asked'))
  .step('answer', {
    needs: ['ask'],
    waitFor: { signal: 'answer', timeoutMs: 1500, onTimeout: 'continue' },
    run: (ctx) => effect(ctx, ctx.received?.timedOut ? 'timed out' : 'answered', 1000),
  })
  .step('done', { needs: ['answer'], run: (ctx, i) => effect(ctx, `${i.answer}, done`) });

export const drillWorkflows = [diamond, fanOut, wait];

/** Each workflow's slots in a window: every second, every 5 s at :00 and :05, every 5 s at :02 and :07. */
export function workflowSlots(from: number, to: number): Map<string, number[]> {
  const every = (step: number, offset: number) => {
    const out: number[] = [];
    for (let t = Math.ceil(from / 1000) * 1000; t <= to; t += 1000)
      if (Math.floor(t / 1000) % step === offset % step) out.push(t);
    return out;
  };
  return new Map([
    ['drill-diamond', every(1, 0)],
    ['drill-fanout', every(5, 0)],
    ['drill-wait', every(5, 2)],
  ]);
}
