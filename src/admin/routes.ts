/** Every route of the admin HTTP; the server registers exactly these (server.ts). */
import type { AdminRoute } from './admin-route.js';
import { jobRoutes } from './job-routes.js';
import { leadershipRoutes } from './leadership-routes.js';
import { runRoutes } from './run-routes.js';
import { runtimeRoutes } from './runtime-routes.js';
import { serviceRoutes } from './service-routes.js';

export const adminRoutes: readonly AdminRoute[] = [
  ...serviceRoutes,
  ...leadershipRoutes,
  ...jobRoutes,
  ...runRoutes,
  ...runtimeRoutes,
];
