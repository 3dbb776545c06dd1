CREATE TABLE "cw_missed_ranges" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"job" text NOT NULL,
	"first_at" timestamp with time zone NOT NULL,
	"last_at" timestamp with time zone NOT NULL,
	"count" bigint NOT NULL,
	"count_exact" boolean NOT NULL,
	"reason" text NOT NULL,
	"outage_start" timestamp with time zone,
	"outage_end" timestamp with time zone NOT NULL,
	"leader_token" bigint NOT NULL,
	"leader_id" text NOT NULL,
	"recorded_at" timestamp with time zone DEFAULT now() NOT NULL,
	"schedule_id" text GENERATED ALWAYS AS (CASE WHEN strpos(job, '/') > 0 AND job NOT LIKE 'node-cron:%' THEN substr(job, strpos(job, '/') + 1) END) STORED
);
--> statement-breakpoint
CREATE TABLE "cw_schedule_eras" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"job" text NOT NULL,
	"expression" text NOT NULL,
	"timezone" text NOT NULL,
	"dst" text NOT NULL,
	"from_at" timestamp with time zone NOT NULL,
	"to_at" timestamp with time zone,
	"leader_token" bigint NOT NULL,
	"leader_id" text NOT NULL,
	"recorded_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "cw_missed_ranges_job_reason_first" ON "cw_missed_ranges" USING btree ("job","reason","first_at");--> statement-breakpoint
CREATE INDEX "cw_missed_ranges_job_last" ON "cw_missed_ranges" USING btree ("job","last_at");--> statement-breakpoint
CREATE INDEX "cw_missed_ranges_schedule_id" ON "cw_missed_ranges" USING btree ("schedule_id");--> statement-breakpoint
CREATE UNIQUE INDEX "cw_schedule_eras_open" ON "cw_schedule_eras" USING btree ("job") WHERE "cw_schedule_eras"."to_at" IS NULL;--> statement-breakpoint
CREATE INDEX "cw_schedule_eras_job_from" ON "cw_schedule_eras" USING btree ("job","from_at");