-- The outcome statements delete their closed runs' cw_open_runs rows themselves, in one statement,
-- and say so with a setting LOCAL to their transaction: the row trigger, one PL/pgSQL call a run
-- (about a quarter of a finish's time in PostgreSQL), then stands aside. Every other writer (an
-- older replica's too) leaves the setting unset and the trigger keeps the table as before.
DROP TRIGGER "cw_runs_open_update" ON "public"."cw_runs";--> statement-breakpoint
CREATE TRIGGER "cw_runs_open_update" AFTER UPDATE OF finished_at, job ON "public"."cw_runs" FOR EACH ROW
  WHEN (((OLD.finished_at IS NULL) <> (NEW.finished_at IS NULL) OR OLD.job <> NEW.job)
    AND current_setting('cronwarden.open_runs_kept', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION "public"."cw_open_runs_after_update"();
