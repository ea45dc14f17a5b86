// query: schema/neo4j/001_key_constraints
// params: none
// returns: none
// A unique constraint (which brings its own index) on the application key of every keyed label.
// One statement per line ending in ';'. IF NOT EXISTS makes re-running a no-op.
CREATE CONSTRAINT htam_global_key IF NOT EXISTS FOR (n:Global) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_local_key IF NOT EXISTS FOR (n:Local) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_task_key IF NOT EXISTS FOR (n:Task) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_run_key IF NOT EXISTS FOR (n:Run) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_attempt_key IF NOT EXISTS FOR (n:Attempt) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_kernel_key IF NOT EXISTS FOR (n:Kernel) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_gpu_key IF NOT EXISTS FOR (n:Gpu) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_seedinfo_key IF NOT EXISTS FOR (n:SeedInfo) REQUIRE n.key IS UNIQUE;
CREATE CONSTRAINT htam_schemaversion_key IF NOT EXISTS FOR (n:SchemaVersion) REQUIRE n.key IS UNIQUE;
