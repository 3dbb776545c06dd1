CREATE TABLE "cw_limit_slots" (
	"key" text NOT NULL,
	"slot" integer NOT NULL,
	"run_id" bigint,
	"token" bigint,
	"worker" text,
	"taken_at" timestamp with time zone,
	CONSTRAINT "cw_limit_slots_key_slot_pk" PRIMARY KEY("key","slot")
);
--> statement-breakpoint
CREATE TABLE "cw_rate_starts" (
	"key" text NOT NULL,
	"at" timestamp with time zone NOT NULL,
	"run_id" bigint NOT NULL,
	"used" boolean NOT NULL,
	CONSTRAINT "cw_rate_starts_key_at_run_id_pk" PRIMARY KEY("key","at","run_id")
);
--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "limit_key" text;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "priority" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "coalesced" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "coalesced_until" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "cw_runs_limit_waiting" ON "cw_runs" USING btree ("limit_key","priority" DESC NULLS LAST,"scheduled_at","id") WHERE "cw_runs"."limit_key" IS NOT NULL AND "cw_runs"."state" IN ('pending', 'retrying');