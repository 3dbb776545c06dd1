import type { Logger } from 'pino';
import type { RuntimeAdmin } from '../admin/replica-view.js';
import type { Clock } from '../clock.js';
import { InvalidArgumentError, NotLeaderError } from '../errors.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import { validateSchedule } from '../jobs/schedule-input.js';
import { onceKeySchema, payloadProblem } from '../jobs/payload.js';
import type { Ledger } from '../ledger/ledger.js';
import type { OnceRun, StoredSchedule } from '../ledger/schedule-ledger.js';
import type { Backfiller, BackfillRequest, BackfillStep } from '../scheduler/firing/backfill.js';
import type { Leadership } from '../scheduler/firing/fire-loop.js';
import type { RuntimeSchedules } from '../scheduler/schedules/runtime-schedules.js';
import { scheduleIdOf } from '../cron/job-names.js';
import type { RunDelivery } from '../scheduler/firing/run-delivery.js';

export interface RuntimeOpsOptions {
  registry: JobRegistry;
  ledger: Ledger;
  delivery: Pick<RunDelivery, 'enqueue'>;
  leadership: Leadership;
  backfiller: Backfiller;
  /** The leader's runtime schedules (a backfill may come before the change's notification). */
  schedules: Pick<RuntimeSchedules, 'get' | 'refresh'>;
  clock: Clock;
  logger: Logger;
  replicaId: string;
  fenceResource: string;
}

/**
 * Runtime schedules, one-off runs and backfills as the admin API drives them. Schedule changes
 * work on any replica (the ledger serialises them and tells the leader); one-off runs and
 * backfills commit fires, so only the leader makes them, under its fence.
 */
export class RuntimeOps implements RuntimeAdmin {
  constructor(private readonly o: RuntimeOpsOptions) {}

  async create(id: string, input: unknown, actor: string): Promise<StoredSchedule> {
    const spec = validateSchedule(id, input, this.o.registry);
    const s = await this.o.ledger.schedules.create(id, spec, actor);
    this.o.logger.info({ schedule: id, version: s.version, actor }, 'runtime schedule created');
    return s;
  }

  async update(id: string, input: unknown, actor: string): Promise<StoredSchedule> {
    // The partial input is laid over the version read under the row lock, so a concurrent change
    // is not lost; anything invalid rolls the change back.
    const s = await this.o.ledger.schedules.change(
      id,
      'update',
      (current) => validateSchedule(id, input, this.o.registry, current),
      actor,
    );
    this.o.logger.info({ schedule: id, version: s.version, actor }, 'runtime schedule updated');
    return s;
  }

  async setPaused(id: string, paused: boolean, actor: string): Promise<StoredSchedule> {
    const s = await this.o.ledger.schedules.change(id, paused ? 'pause' : 'resume', (c) => ({ ...c, paused }), actor);
    this.o.logger.info(
      { schedule: id, version: s.version, actor },
      `runtime schedule ${paused ? 'paused' : 'resumed'}`,
    );
    return s;
  }

  async delete(id: string, actor: string): Promise<StoredSchedule> {
    const s = await this.o.ledger.schedules.delete(id, actor);
    this.o.logger.info({ schedule: id, version: s.version, actor }, 'runtime schedule deleted');
    return s;
  }

  async once(job: string, o: { at: Date; key: string; payload: unknown }): Promise<OnceRun> {
    this.o.registry.require(job);
    const key = onceKeySchema.safeParse(o.key);
    if (!key.success) throw new InvalidArgumentError(`key: ${key.error.issues[0]!.message}`);
    const payload = payloadProblem(o.payload);
    if (payload) throw new InvalidArgumentError(`payload: ${payload}`);
    const lease = this.o.leadership.lease();
    if (!lease) throw new NotLeaderError('only the leader can commit a one-off run');
    const run = await this.o.ledger.schedules.commitOnce(
      { job, ...o },
      {
        fenceResource: this.o.fenceResource,
        token: lease.token,
        replicaId: this.o.replicaId,
        stillLeading: () => this.o.leadership.lease()?.token === lease.token,
      },
    );
    if (!run) throw new NotLeaderError('leadership ended before the one-off run committed; try again');
    // Due now: hand it over at once. Later: the outbox hands it over once its instant comes.
    if (run.created && run.scheduledAt.getTime() <= this.o.clock.now()) {
      try {
        await this.o.delivery.enqueue([run]);
        await this.o.ledger.fires.markEnqueued([run.runId]);
      } catch (err) {
        this.o.logger.warn({ err, runId: run.runId.toString() }, 'one-off run: enqueue failed; the outbox will retry');
      }
    }
    return run;
  }

  async backfill(r: BackfillRequest): Promise<BackfillStep> {
    // A schedule created a moment ago may not have reached the leader yet: read it now.
    const id = scheduleIdOf(r.job);
    if (id !== undefined && !this.o.schedules.get(r.job)) await this.o.schedules.refresh([id]);
    return this.o.backfiller.step(r);
  }
}
