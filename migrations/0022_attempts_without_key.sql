ALTER TABLE "cw_run_attempts" DROP CONSTRAINT "cw_run_attempts_run_id_cw_runs_id_fk";
--> statement-breakpoint
-- A deleted run's attempts go with it (what the key's ON DELETE CASCADE did), for every writer's
-- delete, an older replica's retention included; with its unfinished row, in one statement.
CREATE FUNCTION "public"."cw_runs_after_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "public"."cw_open_runs" o USING deleted d WHERE o.run_id = d.id AND d.finished_at IS NULL;
  DELETE FROM "public"."cw_run_attempts" a USING deleted d WHERE a.run_id = d.id;
  RETURN NULL;
END $$;--> statement-breakpoint
DROP TRIGGER "cw_runs_open_delete" ON "public"."cw_runs";--> statement-breakpoint
DROP FUNCTION "public"."cw_open_runs_after_delete"();--> statement-breakpoint
CREATE TRIGGER "cw_runs_delete" AFTER DELETE ON "public"."cw_runs"
  REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION "public"."cw_runs_after_delete"();--> statement-breakpoint
CREATE OR REPLACE FUNCTION "public"."cw_open_runs_after_truncate"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "public"."cw_open_runs";
  DELETE FROM "public"."cw_run_attempts";
  RETURN NULL;
END $$;--> statement-breakpoint
-- What the key let PostgreSQL do: attempt rows of runs already gone (none should be).
DELETE FROM "public"."cw_run_attempts" a WHERE NOT EXISTS (SELECT 1 FROM "public"."cw_runs" r WHERE r.id = a.run_id);
