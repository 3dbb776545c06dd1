import type { Command } from 'commander';
import type { MemberAgreement } from '../admin/member-agreement.js';
import { adminOptions, clientFrom } from './control-command.js';
import { oneLineSafe, print } from './terminal-text.js';

interface Lease {
  backend: string;
  leaseName: string;
  holder: string | null;
  token: string | null;
  ttlMs: number;
  expiresInMs: number | null;
  leaderSince: string | null;
  replicaId: string;
  role: string;
  /** Sharded leadership: who leads each shard. */
  shards?: { shard: number; holder: string | null; token: string | null; expiresInMs: number | null }[];
}
interface Member {
  replicaId: string;
  /** From the lease: leader or follower. */
  role: string;
  /** Sharded: the shards it leads. */
  leads?: number[];
  /** Missed three beats (killed, frozen, cut off); absent from replicas older than this field. */
  stoppedBeating?: boolean;
  host: string;
  pid: number;
  version: string;
  lastSeenAgoMs: number;
  adminUrl: string | null;
}
interface Job {
  name: string;
  schedule: string;
  timezone: string;
  paused: boolean;
  pausedReason?: string | null;
  pausedBy?: string | null;
  pausedUntil?: string | null;
  nextFireAt: string | null;
  lastRun: { scheduledAt: string; state: string; trigger: string } | null;
}

interface Schedule {
  id: string;
  job: string;
  schedule: string;
  timezone: string;
  version: number;
  paused: boolean;
  nextFireAt: string | null;
}

export function registerStatus(program: Command): void {
  adminOptions(
    program
      .command('status')
      .description('show the leader, its token and TTL left, members and jobs (reads the admin endpoint)'),
  )
    .option('--json', 'print the raw JSON')
    .action(async (opts: { url: string; timeoutMs: string; json?: boolean }) => {
      const client = clientFrom(opts);
      const [lease, members, jobs, schedules] = await Promise.all([
        client.get<Lease>('/api/lease'),
        client.get<{ members: Member[]; agreement?: MemberAgreement }>('/api/members'),
        client.get<{ jobs: Job[] }>('/api/jobs'),
        // A replica older than runtime schedules has no such route: show none rather than fail.
        client
          .get<{ schedules: Schedule[] }>(`/api/schedules?limit=${SCHEDULES_SHOWN}`)
          .catch(() => ({ schedules: [] })),
      ]);
      if (opts.json) {
        const all = { lease, ...members, jobs: jobs.jobs, schedules: schedules.schedules };
        print(`${JSON.stringify(all, null, 2)}\n`);
        return;
      }
      const out: string[] = [];
      out.push(`lease     ${lease.leaseName} (${lease.backend}, TTL ${lease.ttlMs} ms)`);
      out.push(
        `leader    ${lease.holder ?? 'none'}${lease.holder ? `  token ${lease.token}  expires in ${lease.expiresInMs} ms  since ${lease.leaderSince ?? '?'}` : ''}`,
      );
      // Its role as the lease says (a follower waiting for the lease calls itself a candidate).
      const role = lease.holder === lease.replicaId ? 'leader' : 'follower';
      out.push(`asked     ${lease.replicaId} (${role}) at ${client.baseUrl}`);
      if (lease.shards) {
        out.push('', 'SHARDS');
        out.push(
          ...table(
            ['SHARD', 'LEADER', 'TOKEN', 'EXPIRES IN'],
            lease.shards.map((s) => [
              String(s.shard),
              s.holder ?? 'none',
              s.token ?? '-',
              s.expiresInMs === null ? '-' : `${s.expiresInMs} ms`,
            ]),
          ),
        );
      }
      out.push('', 'MEMBERS');
      out.push(
        ...table(
          ['REPLICA', 'ROLE', 'HOST', 'PID', 'VERSION', 'LAST SEEN', 'ADMIN'],
          members.members.map((m) => [
            m.replicaId,
            m.leads?.length ? `${m.role} (shards ${m.leads.join(',')})` : m.role,
            m.host,
            String(m.pid),
            m.version,
            `${(m.lastSeenAgoMs / 1000).toFixed(1)}s ago${m.stoppedBeating ? ' (stopped beating)' : ''}`,
            m.adminUrl ?? '-',
          ]),
        ),
      );
      out.push(...disagreement(members.agreement));
      out.push(...jobLines(jobs.jobs));
      out.push(...pauses(jobs.jobs));
      out.push(...scheduleLines(schedules.schedules));
      print(`${out.join('\n')}\n`);
    });
}

function jobLines(jobs: Job[]): string[] {
  return [
    '',
    'JOBS',
    ...table(
      ['JOB', 'SCHEDULE', 'TZ', 'NEXT FIRE', 'LAST RUN', 'OUTCOME', 'PAUSED'],
      jobs.map((j) => [
        j.name,
        j.schedule,
        j.timezone,
        j.nextFireAt ?? '-',
        j.lastRun?.scheduledAt ?? '-',
        j.lastRun ? `${j.lastRun.state} (${j.lastRun.trigger})` : '-',
        j.paused ? 'yes' : 'no',
      ]),
    ),
  ];
}

const SCHEDULES_SHOWN = 50;

/** Runtime schedules (the first 50 by id; `cronwarden schedule list` shows them all). */
function scheduleLines(schedules: Schedule[]): string[] {
  if (schedules.length === 0) return [];
  const more = schedules.length === SCHEDULES_SHOWN ? ` (first ${SCHEDULES_SHOWN}; see cronwarden schedule list)` : '';
  return [
    '',
    `RUNTIME SCHEDULES${more}`,
    ...table(
      ['ID', 'JOB', 'SCHEDULE', 'TZ', 'VERSION', 'NEXT FIRE', 'PAUSED'],
      schedules.map((s) => [
        s.id,
        s.job,
        s.schedule,
        s.timezone,
        String(s.version),
        s.nextFireAt ?? '-',
        s.paused ? 'yes' : 'no',
      ]),
    ),
  ];
}

/** Who paused which job, why and until when. */
function pauses(jobs: Job[]): string[] {
  const paused = jobs.filter((j) => j.paused);
  if (paused.length === 0) return [];
  return [
    '',
    'PAUSED',
    ...table(
      ['JOB', 'BY', 'UNTIL', 'REASON'],
      paused.map((j) => [j.name, j.pausedBy ?? '-', j.pausedUntil ?? 'resumed by hand', j.pausedReason ?? '-']),
    ),
  ];
}

/** During a rolling deploy: which versions run, and which replica lacks which job. */
function disagreement(a: MemberAgreement | undefined): string[] {
  if (!a) return [];
  const lines: string[] = [];
  if (a.versions.length > 1) lines.push(`versions  replicas disagree: ${a.versions.join(', ')}`);
  for (const [replica, jobs] of Object.entries(a.missing))
    lines.push(`jobs      ${replica} does not define ${jobs.join(', ')}`);
  return lines;
}

/** Columns padded to their widest cell; each cell on one line, control characters escaped. */
export function table(head: string[], rawRows: string[][]): string[] {
  const rows = rawRows.map((r) => r.map(oneLineSafe));
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  return [head, ...rows].map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd(),
  );
}
