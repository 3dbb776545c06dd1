-- A run's row gets two new versions (its claim and its completion), both HOT updates since 0019,
-- and a HOT update needs room on the row's own page until pruning frees the older versions: at 80
-- about one update in six found none and wrote the run's row and its six index entries again
-- (pg_walinspect over 5,000 runs: 1,247 B of WAL a run; at 60, 1,133 B and one in sixty). New
-- pages only; the table's pages are a third larger.
ALTER TABLE "cw_runs" SET (fillfactor = 60);
