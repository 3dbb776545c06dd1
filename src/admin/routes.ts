/**
 * Every route of the admin HTTP, in the order the route table lists them; the server registers
 * exactly these (server.ts), and docs/reference/admin-api.md shows routesTable() between its
 * routes-table markers (scripts/routes-table.ts writes it, a unit test compares it).
 */
import type { AdminRoute } from './admin-route.js';
import { jobRoutes } from './job-routes.js';
import { leadershipRoutes } from './leadership-routes.js';
import { ledgerCheckRoutes } from './ledger-check-routes.js';
import { occurrenceRoutes } from './occurrence-routes.js';
import { runRoutes } from './run-routes.js';
import { runtimeRoutes } from './runtime-routes.js';
import { serviceRoutes } from './service-routes.js';
import { workflowRoutes } from './workflow-routes.js';

export const adminRoutes: readonly AdminRoute[] = [
  ...serviceRoutes,
  ...leadershipRoutes,
  ...jobRoutes,
  ...occurrenceRoutes,
  ...runRoutes,
  ...workflowRoutes,
  ...runtimeRoutes,
  ...ledgerCheckRoutes,
];

/** The Markdown table of the routes: method, path, who may call it, what it does. */
export function routesTable(routes: readonly AdminRoute[] = adminRoutes): string {
  const rows = routes.map((r) => `| ${r.method} | \`${r.path}\` | ${r.access} | ${r.summary} |`);
  return ['| method | path | who may call it | what it does |', '| --- | --- | --- | --- |', ...rows].join('\n');
}
