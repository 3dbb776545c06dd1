CREATE TABLE "cw_signals" (
	"workflow_run_id" bigint NOT NULL,
	"name" text NOT NULL,
	"payload" jsonb,
	"sent_by" text NOT NULL,
	"sent_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "cw_signals_workflow_run_id_name_pk" PRIMARY KEY("workflow_run_id","name")
);
--> statement-breakpoint
CREATE TABLE "cw_workflow_steps" (
	"workflow_run_id" bigint NOT NULL,
	"step" text NOT NULL,
	"state" text NOT NULL,
	"needs_left" integer NOT NULL,
	"items_total" integer,
	"items_left" integer,
	"waits_for" text,
	"timeout_at" timestamp with time zone,
	"reason" text,
	"ready_at" timestamp with time zone,
	"completed_at" timestamp with time zone,
	CONSTRAINT "cw_workflow_steps_workflow_run_id_step_pk" PRIMARY KEY("workflow_run_id","step")
);
--> statement-breakpoint
DROP INDEX "cw_runs_job_scheduled_at";--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "kind" text DEFAULT 'job' NOT NULL;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "workflow_run_id" bigint;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "step" text;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "item" integer;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "result" jsonb;--> statement-breakpoint
ALTER TABLE "cw_signals" ADD CONSTRAINT "cw_signals_workflow_run_id_cw_runs_id_fk" FOREIGN KEY ("workflow_run_id") REFERENCES "public"."cw_runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "cw_workflow_steps" ADD CONSTRAINT "cw_workflow_steps_workflow_run_id_cw_runs_id_fk" FOREIGN KEY ("workflow_run_id") REFERENCES "public"."cw_runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "cw_workflow_steps_timeout" ON "cw_workflow_steps" USING btree ("timeout_at") WHERE "cw_workflow_steps"."state" = 'waiting' AND "cw_workflow_steps"."timeout_at" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "cw_runs_workflow_finished" ON "cw_runs" USING btree ("finished_at") WHERE "cw_runs"."kind" = 'workflow';--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_workflow_step_item" ON "cw_runs" USING btree ("workflow_run_id","step",COALESCE("item", -1)) WHERE "cw_runs"."workflow_run_id" IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_job_scheduled_at" ON "cw_runs" USING btree ("job","scheduled_at") WHERE "trigger" NOT IN ('manual', 'once', 'step');