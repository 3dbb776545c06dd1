DROP INDEX "cw_runs_state_created";--> statement-breakpoint
DROP INDEX "cw_runs_limit_waiting";--> statement-breakpoint
DROP INDEX "cw_runs_active";--> statement-breakpoint
CREATE INDEX "cw_runs_created" ON "cw_runs" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "cw_runs_limit_waiting" ON "cw_runs" USING btree ("limit_key","priority" DESC NULLS LAST,"scheduled_at","id") WHERE "cw_runs"."limit_key" IS NOT NULL AND "cw_runs"."finished_at" IS NULL;--> statement-breakpoint
CREATE INDEX "cw_runs_active" ON "cw_runs" USING btree ("job") WHERE "cw_runs"."finished_at" IS NULL;--> statement-breakpoint
-- Room on each page for a run's next version: a claim is a HOT update (no index names what it
-- changes), and a HOT update needs space on the row's own page. New pages only; old ones as they fill.
ALTER TABLE "cw_runs" SET (fillfactor = 80);
