/** Redis names one cronwarden deployment (namespace) uses. BullMQ queue names may not contain ':'. */
export function queueName(namespace: string): string {
  return `cronwarden-${namespace}`;
}

export function controlChannel(namespace: string): string {
  return `cronwarden:${namespace}:control`;
}

/**
 * BullMQ job id of a run. Derived from the ledger's run id, which the unique (job, scheduled_at)
 * key makes one-to-one with the fire, so a second enqueue of the same fire is a no-op; and from
 * the ledger's identity, because run ids restart in a new ledger while BullMQ may still retain the
 * old ledger's finished jobs under the same ids (they would swallow the new runs).
 */
export function bullmqJobId(ledgerId: string, runId: bigint | string): string {
  return `run-${ledgerId.replace(/-/g, '').slice(0, 12)}-${runId}`;
}

/** BullMQ job id of a batch of runs handed over together (ids in ascending order). */
export function batchJobId(ledgerId: string, runIds: readonly (bigint | string)[]): string {
  if (runIds.length === 1) return bullmqJobId(ledgerId, runIds[0]!);
  return `runs-${ledgerId.replace(/-/g, '').slice(0, 12)}-${runIds[0]}-${runIds.length}`;
}

/**
 * BullMQ job id of a run handed over again after its `attempt`-th claim (a retry, a hand-back, a
 * rescue from a dead worker): one id per attempt, so the entry BullMQ still keeps of an earlier
 * delivery does not swallow it, and two hand-overs of one attempt are one delivery.
 */
export function redeliveryJobId(ledgerId: string, runId: bigint | string, attempt: number): string {
  return `${bullmqJobId(ledgerId, runId)}-r${attempt}`;
}
