-- Room on a run's page for both of its new versions (its claim and its completion) without counting
-- on pruning, which needs a cleanup lock that claims and finishes of the page's other runs, side by
-- side, deny (and which an open snapshot, a pg_dump's say, stops altogether). At 60 about three
-- updates in ten on the empty run path found no room and wrote the row and its twelve index entries
-- again (claims: 5 WAL records a run); at 25, one in thirty. Measured (run-path empty, pairs in
-- turn): 1,173-1,219 B of WAL a run -> 744-758, PostgreSQL's CPU a run down a quarter, runs/s
-- 1.08-1.29x; 30 and 25 alike there, but with pruning stopped only 25 keeps every update of a
-- 200-byte run HOT (30: 345 of 400, 60: 167). New pages only; they hold fewer runs.
ALTER TABLE "cw_runs" SET (fillfactor = 25);
