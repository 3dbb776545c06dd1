/** The live ledger check's last report (scheduler/chores/ledger-check.ts), the same on every replica. */
import { lastLedgerCheck } from '../ledger/ledger-check.js';
import type { AdminRoute } from './admin-route.js';

export const ledgerCheckRoutes: AdminRoute[] = [
  {
    method: 'GET',
    path: '/api/ledger-check',
    access: 'read',
    summary: "the live ledger check's last report: when, its window, the count per check, the first examples",
    handle: (c, req) =>
      c.read(req, async () => {
        const last = await lastLedgerCheck(c.pool, c.reads.tables);
        return { report: last ? { ...(last.report as object), savedAt: last.checkedAt.toISOString() } : null };
      }),
  },
];
