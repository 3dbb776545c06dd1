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
