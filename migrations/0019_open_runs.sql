CREATE TABLE "cw_open_runs" (
	"run_id" bigint PRIMARY KEY NOT NULL,
	"job" text NOT NULL
);
--> statement-breakpoint
DROP INDEX "cw_runs_limit_waiting";--> statement-breakpoint
DROP INDEX "cw_runs_workflow_finished";--> statement-breakpoint
DROP INDEX "cw_runs_active";--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "open_limit_key" text GENERATED ALWAYS AS (CASE WHEN "finished_at" IS NULL THEN "limit_key" END) STORED;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "workflow_finished_at" timestamp with time zone GENERATED ALWAYS AS (CASE WHEN "kind" = 'workflow' THEN "finished_at" END) STORED;--> statement-breakpoint
CREATE INDEX "cw_open_runs_job" ON "cw_open_runs" USING btree ("job");--> statement-breakpoint
CREATE INDEX "cw_runs_open_limit_key" ON "cw_runs" USING btree ("open_limit_key","priority" DESC NULLS LAST,"scheduled_at","id") WHERE "cw_runs"."open_limit_key" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "cw_runs_workflow_finished_at" ON "cw_runs" USING btree ("workflow_finished_at") WHERE "cw_runs"."workflow_finished_at" IS NOT NULL;--> statement-breakpoint
-- cw_open_runs holds the unfinished runs (finished_at NULL) and is kept by the database itself, in
-- the writer's own transaction, so every writer of cw_runs (an older replica's too, during a
-- rolling upgrade) keeps it true. Inserts and deletes go a statement at a time (a fire commits
-- hundreds of runs in one INSERT); an update only for the rows whose finished_at turns NULL or
-- not NULL (a completion, a retry reopened), row by row, which the trigger's WHEN tests before any
-- function call.
CREATE FUNCTION "public"."cw_open_runs_after_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "public"."cw_open_runs" (run_id, job) SELECT id, job FROM inserted WHERE finished_at IS NULL;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE FUNCTION "public"."cw_open_runs_after_update"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.finished_at IS NULL THEN
    INSERT INTO "public"."cw_open_runs" (run_id, job) VALUES (NEW.id, NEW.job)
    ON CONFLICT (run_id) DO UPDATE SET job = EXCLUDED.job;
  ELSE
    DELETE FROM "public"."cw_open_runs" WHERE run_id = OLD.id;
  END IF;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE FUNCTION "public"."cw_open_runs_after_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "public"."cw_open_runs" o USING deleted d WHERE o.run_id = d.id AND d.finished_at IS NULL;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE FUNCTION "public"."cw_open_runs_after_truncate"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "public"."cw_open_runs";
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE TRIGGER "cw_runs_open_insert" AFTER INSERT ON "public"."cw_runs"
  REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION "public"."cw_open_runs_after_insert"();--> statement-breakpoint
CREATE TRIGGER "cw_runs_open_update" AFTER UPDATE OF finished_at, job ON "public"."cw_runs" FOR EACH ROW
  WHEN ((OLD.finished_at IS NULL) <> (NEW.finished_at IS NULL) OR OLD.job <> NEW.job)
  EXECUTE FUNCTION "public"."cw_open_runs_after_update"();--> statement-breakpoint
CREATE TRIGGER "cw_runs_open_delete" AFTER DELETE ON "public"."cw_runs"
  REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION "public"."cw_open_runs_after_delete"();--> statement-breakpoint
CREATE TRIGGER "cw_runs_open_truncate" AFTER TRUNCATE ON "public"."cw_runs"
  FOR EACH STATEMENT EXECUTE FUNCTION "public"."cw_open_runs_after_truncate"();--> statement-breakpoint
INSERT INTO "public"."cw_open_runs" (run_id, job) SELECT id, job FROM "public"."cw_runs" WHERE finished_at IS NULL;
