import { InvalidArgumentError, InvalidConfigError } from '../errors.js';
import type { JobDefinition } from './define-job.js';

/** Asked for a job that no replica defined (admin trigger of a typo, a run of a removed job). */
export class UnknownJobError extends InvalidArgumentError {
  constructor(readonly job: string) {
    super(`unknown job "${job}"`);
  }
}

/** The jobs this replica knows, by name. Every replica must define the same set. */
export class JobRegistry {
  private readonly jobs = new Map<string, JobDefinition>();
  /** list()'s answer, kept until the next add: the leader asks often, and copying a million is not free. */
  private listed: readonly JobDefinition[] | undefined;

  constructor(jobs: JobDefinition[] = []) {
    for (const job of jobs) this.add(job);
    // Listed now, while constructing blocks nothing yet: not in the first tick of a running replica.
    this.list();
  }

  add(job: JobDefinition): void {
    if (this.jobs.has(job.name)) throw new InvalidConfigError('name', `job "${job.name}" is defined twice`);
    this.jobs.set(job.name, job);
    this.listed = undefined;
  }

  get(name: string): JobDefinition | undefined {
    return this.jobs.get(name);
  }

  require(name: string): JobDefinition {
    const job = this.jobs.get(name);
    if (!job) throw new UnknownJobError(name);
    return job;
  }

  list(): readonly JobDefinition[] {
    this.listed ??= Object.freeze([...this.jobs.values()]);
    return this.listed;
  }

  get size(): number {
    return this.jobs.size;
  }
}
