import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { CommitWitness } from '../ledger/commit-witness.js';
import {
  deleteMember,
  findLostClaims,
  liveMembers,
  MEMBER_BEAT_MS,
  touchMember,
  upsertMember,
  type JoinedJobNames,
  type LiveMember,
} from '../ledger/members.js';
import { forEachSliced } from '../scheduler/firing/yielding.js';
import type { Tables } from '../db/tables.js';

/**
 * Sharded leadership's beat: the shard balancer needs to see a dead replica gone within a TTL, so
 * a replica beats thrice a TTL (never more often than every 100 ms, never less than the default).
 */
export function shardedBeatMs(ttlMs: number): number {
  return Math.min(MEMBER_BEAT_MS, Math.max(100, Math.floor(ttlMs / 3)));
}

export interface MemberHeartbeatOptions {
  pool: Pick<pg.Pool, 'query'>;
  /** The deployment's tables (replica.ledger.tables). */
  tables: Tables;
  replicaId: string;
  /** Current role, read on every beat. */
  role: () => string;
  version: string;
  /** The jobs this replica defines (read once, in slices: a million names must not block renewals). */
  jobs: () => Iterable<{ name: string }>;
  /** This replica's admin base URL (http://host:port), if it serves one. */
  adminUrl?: string;
  intervalMs?: number;
  /**
   * Sharded leadership: every replica leads some shard, and a shard's own leader rests its stand-in
   * for that shard only, so every live member counts as a follower for the stand-ins.
   */
  everyoneStandsIn?: boolean;
  /** The claims this replica saw commit (ledger.runs.witness): each beat asks the ledger whether it still has them. */
  witness?: Pick<CommitWitness, 'recent' | 'forget'>;
  /** After each beat that read the members (the shard balancer runs here). */
  onBeat?: (members: readonly LiveMember[]) => void;
  logger?: Logger;
}

/**
 * Upserts this replica into cw_members every few seconds (host, pid, version, role, admin URL,
 * last_seen on the database clock). The admin API lists members seen recently; a replica that
 * stops cleanly deletes its row.
 */
export class MemberHeartbeat {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> = Promise.resolve();
  private stopped = false;
  private fullRowWritten = false;
  private jobNames: Promise<readonly string[] | JoinedJobNames> | undefined;
  private seenFollowers: readonly string[] | undefined;
  readonly intervalMs: number;

  constructor(private readonly o: MemberHeartbeatOptions) {
    this.intervalMs = o.intervalMs ?? MEMBER_BEAT_MS;
  }

  /** Write the row now, then every intervalMs. Resolves after the first write (or its failure, logged). */
  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), this.intervalMs);
    this.timer.unref();
  }

  /** Write the row now (a role change need not wait for the next beat). */
  beat(): Promise<void> {
    if (this.stopped) return this.beating; // a role change during shutdown must not re-insert the row
    this.beating = this.beating
      .then(() => this.write())
      .catch((err: Error) => {
        this.o.logger?.warn({ err: err.message }, 'member heartbeat failed');
      });
    return this.beating;
  }

  /**
   * The replicas that did not lead at their last beat and beat within three intervals (this one
   * included once it has written its row), as read at this replica's last beat; undefined before.
   */
  get followers(): readonly string[] | undefined {
    return this.seenFollowers;
  }

  /** Stop beating and remove this replica's row. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.beating;
    await deleteMember(this.o.pool, this.o.tables, this.o.replicaId).catch((err: Error) => {
      this.o.logger?.warn({ err: err.message }, 'could not remove the member row');
    });
  }

  private async write(): Promise<void> {
    const row = { replicaId: this.o.replicaId, role: this.o.role(), adminUrl: this.o.adminUrl ?? null };
    // The job list goes with the first write (or when the row went missing), not every beat.
    if (!this.fullRowWritten || !(await touchMember(this.o.pool, this.o.tables, row))) {
      await upsertMember(this.o.pool, this.o.tables, {
        ...row,
        host: hostname(),
        pid: process.pid,
        version: this.o.version,
        jobs: await (this.jobNames ??= this.joinJobNames()),
      });
      this.fullRowWritten = true;
    }
    await this.holdLedgerToClaims();
    const members = await liveMembers(this.o.pool, this.o.tables, 3 * this.intervalMs);
    this.seenFollowers = members.filter((m) => this.o.everyoneStandsIn || m.role !== 'leader').map((m) => m.replicaId);
    this.o.onBeat?.(members);
  }

  /** Count on the member row the claims this replica saw commit that the ledger lost (commit-witness.ts). */
  private async holdLedgerToClaims(): Promise<void> {
    const witness = this.o.witness;
    if (!witness) return;
    const lost = await findLostClaims(this.o.pool, this.o.tables, this.o.replicaId, witness.recent());
    if (lost.length === 0) return;
    witness.forget(lost);
    this.o.logger?.error(
      {
        lost: lost.length,
        examples: lost
          .slice(0, 3)
          .map((c) => ({ runId: c.runId.toString(), attempt: c.attempt, token: c.token.toString() })),
      },
      'the ledger lost claims this replica saw commit (a failover to a standby that had not received them?)',
    );
  }

  /** The job names joined by newlines, 10,000 at a time between turns of the event loop. */
  private async joinJobNames(): Promise<readonly string[] | JoinedJobNames> {
    const chunks: string[] = [];
    let chunk: string[] = [];
    let newline = false;
    await forEachSliced(this.o.jobs(), ({ name }) => {
      newline ||= name.includes('\n');
      chunk.push(name);
      if (chunk.length === 10_000) {
        chunks.push(chunk.join('\n'));
        chunk = [];
      }
    });
    chunks.push(chunk.join('\n'));
    // defineJob's names never hold a newline; if some did, joining would merge them: send a list.
    if (newline) return [...this.o.jobs()].map((j) => j.name);
    return { joined: chunks.filter((c) => c.length > 0).join('\n') };
  }
}
