/**
 * Do the live replicas run the same code? During a rolling deploy they need not: the members
 * view says which versions are running and which replica lacks which job, so an operator sees
 * why a run was handed back ("job … is not defined on replica …") and when the roll is done.
 */
export interface MemberAgreement {
  /** Distinct versions among the live members, sorted. */
  versions: string[];
  /** True when every member that says its jobs defines the same set. */
  jobsAgree: boolean;
  /** Per member, the jobs other members define and it does not. */
  missing: Record<string, string[]>;
}

export function memberAgreement(
  members: readonly { replicaId: string; version: string; jobs: readonly string[] | null }[],
): MemberAgreement {
  const versions = [...new Set(members.map((m) => m.version))].sort();
  const known = members.filter((m): m is typeof m & { jobs: readonly string[] } => m.jobs !== null);
  const all = new Set(known.flatMap((m) => m.jobs));
  const missing: Record<string, string[]> = {};
  for (const m of known) {
    const lacks = [...all].filter((j) => !m.jobs.includes(j)).sort();
    if (lacks.length > 0) missing[m.replicaId] = lacks;
  }
  return { versions, jobsAgree: Object.keys(missing).length === 0, missing };
}
