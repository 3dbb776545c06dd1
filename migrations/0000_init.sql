CREATE SEQUENCE "public"."cw_execution_token_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
CREATE TABLE "cw_elections" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"lease_name" text NOT NULL,
	"leader" text NOT NULL,
	"token" bigint NOT NULL,
	"backend" text NOT NULL,
	"elected_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "cw_fences" (
	"resource" text PRIMARY KEY NOT NULL,
	"token" bigint NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "cw_job_state" (
	"job" text PRIMARY KEY NOT NULL,
	"paused" boolean DEFAULT false NOT NULL,
	"last_scheduled_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "cw_leases" (
	"name" text PRIMARY KEY NOT NULL,
	"holder" text,
	"token" bigint DEFAULT 0 NOT NULL,
	"expires_at" timestamp with time zone,
	"acquired_at" timestamp with time zone,
	"renewed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "cw_members" (
	"replica_id" text PRIMARY KEY NOT NULL,
	"host" text NOT NULL,
	"pid" integer NOT NULL,
	"version" text NOT NULL,
	"role" text NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_seen" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "cw_run_attempts" (
	"run_id" bigint NOT NULL,
	"attempt" integer NOT NULL,
	"token" bigint NOT NULL,
	"worker" text NOT NULL,
	"state" text NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	"error" text,
	CONSTRAINT "cw_run_attempts_run_id_attempt_pk" PRIMARY KEY("run_id","attempt")
);
--> statement-breakpoint
CREATE TABLE "cw_runs" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"job" text NOT NULL,
	"scheduled_at" timestamp with time zone NOT NULL,
	"trigger" text DEFAULT 'schedule' NOT NULL,
	"leader_token" bigint NOT NULL,
	"leader_id" text NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"enqueued_at" timestamp with time zone,
	"claim_token" bigint,
	"attempts" integer DEFAULT 0 NOT NULL,
	"completed_attempt" integer,
	"skipped_attempts" integer DEFAULT 0 NOT NULL,
	"started_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "cw_run_attempts" ADD CONSTRAINT "cw_run_attempts_run_id_cw_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."cw_runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "cw_elections_lease_elected" ON "cw_elections" USING btree ("lease_name","elected_at");--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_job_scheduled_at" ON "cw_runs" USING btree ("job","scheduled_at");--> statement-breakpoint
CREATE INDEX "cw_runs_outbox" ON "cw_runs" USING btree ("created_at") WHERE "cw_runs"."enqueued_at" IS NULL;--> statement-breakpoint
CREATE INDEX "cw_runs_active" ON "cw_runs" USING btree ("job") WHERE "cw_runs"."state" IN ('pending', 'running', 'retrying');--> statement-breakpoint
CREATE INDEX "cw_runs_state_created" ON "cw_runs" USING btree ("state","created_at");