package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/metrics"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

func TestMigrateGrantsPrintsQuotedSQL(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "migrate", "grants", "--app-role", `shop"; DROP ROLE postgres; --`, "--worker-role", "O'Brien",
		"--operator-role", `op\s`)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `GRANT USAGE ON SCHEMA batchq TO "shop""; DROP ROLE postgres; --", "O'Brien";`)
	require.Contains(t, r.stdout, `set_config('batchq.app_role', 'shop"; DROP ROLE postgres; --', true)`)
	require.Contains(t, r.stdout, `set_config('batchq.worker_role', 'O''Brien', true)`)
	require.Contains(t, r.stdout, `set_config('batchq.operator_role', E'op\\s', true)`)
	require.Contains(t, r.stdout, `GRANT USAGE ON SCHEMA batchq TO "op\s";`)
	// What only psql reads is gone: its variables, and the \if around the
	// operator's grants, which the CLI always includes.
	for _, psqlOnly := range []string{`:'`, `:"`, `:{`, `\if`, `\endif`} {
		require.NotContains(t, r.stdout, psqlOnly)
	}

	r = runCLI(t, "", "migrate", "grants")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `TO "batchq_app"`)
	require.Contains(t, r.stdout, `TO "batchq_worker"`)
	require.Contains(t, r.stdout, `TO "batchq_operator"`)

	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"same role", []string{"--app-role", "x", "--worker-role", "x"}, `batchq: migrate grants: --worker-role "x": must differ from --app-role, which names the same role`},
		{"operator is the app", []string{"--operator-role", "batchq_app"}, `batchq: migrate grants: --operator-role "batchq_app": must differ from --app-role, which names the same role`},
		{"operator is the worker", []string{"--worker-role", "w", "--operator-role", "w"}, `batchq: migrate grants: --operator-role "w": must differ from --worker-role, which names the same role`},
		{"empty operator role", []string{"--operator-role", ""}, "batchq: migrate grants: --operator-role: must not be empty"},
		{"reserved operator role", []string{"--operator-role", "session_user"}, `batchq: migrate grants: --operator-role: "session_user" is reserved`},
		{"empty role", []string{"--app-role", ""}, "batchq: migrate grants: --app-role: must not be empty"},
		{"long role", []string{"--worker-role", strings.Repeat("w", 64)}, "batchq: migrate grants: --worker-role: must be at most 63 bytes (got 64)"},
		{"reserved role", []string{"--app-role", "pg_monitor"}, "names starting with pg_ are reserved"},
		{"public", []string{"--worker-role", "public"}, `batchq: migrate grants: --worker-role: "public" is reserved`},
		{"control character", []string{"--app-role", "a\nb"}, "must not contain control characters"},
		{"password without apply", []string{"--app-password-env", "HOME"}, "batchq: --app-password-env goes with --apply"},
		{"password unset", []string{"--apply", "--worker-password-env", "BATCHQ_TEST_GRANTS_UNSET"}, `batchq: --worker-password-env: environment variable "BATCHQ_TEST_GRANTS_UNSET" is not set`},
		{"operator password without apply", []string{"--operator-password-env", "HOME"}, "batchq: --operator-password-env goes with --apply"},
		{"argument", []string{"extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", append([]string{"migrate", "grants"}, tc.args...)...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
			require.Empty(t, r.stdout)
		})
	}
}

// A role name set in the environment and forgotten is refused in the words
// of its flag, naming the variable that set it.
func TestGrantsRoleFromTheEnvironment(t *testing.T) {
	t.Setenv("BATCHQ_WORKER_ROLE", "batchq_app")
	r := runCLI(t, "", "migrate", "grants")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: migrate grants: --worker-role \"batchq_app\": must differ from --app-role, which names the same role "+
		"(set by BATCHQ_WORKER_ROLE)\n", r.stderr)
	require.Empty(t, r.stdout)

	// The other way round: the app role from the environment names the
	// worker role's default.
	t.Setenv("BATCHQ_WORKER_ROLE", "")
	os.Unsetenv("BATCHQ_WORKER_ROLE")
	t.Setenv("BATCHQ_APP_ROLE", "batchq_worker")
	r = runCLI(t, "", "migrate", "grants", "--worker-role", "batchq_worker")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: migrate grants: --app-role \"batchq_worker\": must differ from --worker-role, which names the same role "+
		"(set by BATCHQ_APP_ROLE)\n", r.stderr)
	os.Unsetenv("BATCHQ_APP_ROLE")

	t.Setenv("BATCHQ_WORKER_ROLE", "pg_w")
	r = runCLI(t, "", "migrate", "grants")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: migrate grants: --worker-role: names starting with pg_ are reserved (got \"pg_w\") (set by BATCHQ_WORKER_ROLE)\n", r.stderr)
}

func TestScramVerifier(t *testing.T) {
	t.Parallel()
	// Computed independently (Python's hashlib and hmac) for this salt.
	salt := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	v, err := scramVerifierWith("correct horse battery staple", salt, 4096)
	require.NoError(t, err)
	require.Equal(t, "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$ONYbSJBXtKl6bP6PVqw8pm9e7EiacprLnoUQPFS80Hw=:IPOtHuGJ2HifEQg74W2XXqqCrCyQG55GbPRHa6g6n9w=", v)
	a, err := scramVerifier("same")
	require.NoError(t, err)
	b, err := scramVerifier("same")
	require.NoError(t, err)
	require.NotEqual(t, a, b, "a fresh salt each time")
}

// TestLeastPrivilegeRoles creates the app, worker and operator roles with
// `batchq migrate grants --apply` and runs the application (enqueue,
// reports, the shared quota), a worker pool (claims, heartbeats,
// completions, failures, releases, maintenance, the shared throttle,
// metrics) and an operator (pause, resume, cancel, delete, inspect) under
// them: what each role is for works, and everything else is refused with
// permission denied.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	owner := pgtest.Connect(t, dbURL)
	super := withDatabase(t, pgtest.ServerURL(t), dbURL)
	app, worker, operator := uniqueRole(t, "app"), uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, app, worker, operator)

	// The schema's owner sets up a queue; the app role will enqueue into it.
	admin, err := queue.NewClient(owner, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, admin.CreateQueue(ctx, queue.QueueConfig{Name: "docs", Lease: 2 * time.Second}))
	require.NoError(t, admin.SetTenant(ctx, queue.Tenant{Name: "small", Weight: 1, MaxQueued: 2}))

	passwords := map[string]string{app: randomHex(t, 16), worker: randomHex(t, 16), operator: randomHex(t, 16)}
	env := func(role string) string { return "BATCHQ_TEST_PW_" + strings.ToUpper(role) }
	for role, pw := range passwords {
		require.NoError(t, os.Setenv(env(role), pw))
		t.Cleanup(func() { os.Unsetenv(env(role)) })
	}
	for range 2 { // a second run changes nothing and fails on nothing
		r := runCLI(t, super, "migrate", "grants", "--app-role", app, "--worker-role", worker, "--operator-role", operator,
			"--apply", "--app-password-env", env(app), "--worker-password-env", env(worker), "--operator-password-env", env(operator))
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "granted: role "+app+" may enqueue and read reports; role "+worker+" may claim and finish jobs; "+
			"role "+operator+" may pause, resume and delete queues, cancel jobs and read them")
		for _, pw := range passwords {
			require.NotContains(t, r.stdout+r.stderr, pw, "a password was printed")
		}
	}
	superPool := pgtest.Connect(t, super)
	var verifiers int64
	require.NoError(t, superPool.QueryRow(ctx, `SELECT count(*) FROM pg_authid
		WHERE rolname IN ($1, $2, $3) AND rolpassword LIKE 'SCRAM-SHA-256$4096:%' AND rolcanlogin AND NOT rolsuper
		  AND NOT rolcreaterole AND NOT rolcreatedb`, app, worker, operator).Scan(&verifiers))
	require.Equal(t, int64(3), verifiers, "the roles log in with a SCRAM verifier and no other right")

	// The application.
	appPool := pgtest.Connect(t, withUser(t, dbURL, app, passwords[app]))
	appClient, err := queue.NewClient(appPool, queue.Config{})
	require.NoError(t, err)
	var jobs []queue.NewJob
	for i := range 20 {
		jobs = append(jobs, queue.NewJob{Queue: "docs", Tenant: fmt.Sprint("tenant-", i%4), Cost: 10, Payload: []byte(`{"tokens":10}`)})
	}
	_, err = appClient.EnqueueMany(ctx, jobs)
	require.NoError(t, err)
	_, err = appClient.Enqueue(ctx, queue.NewJob{Queue: "docs", Tenant: "small", Cost: 10, Payload: []byte(`{"tokens":10}`), UniqueKey: "k"})
	require.NoError(t, err)
	dup, err := appClient.Enqueue(ctx, queue.NewJob{Queue: "docs", Tenant: "small", Cost: 10, UniqueKey: "k"})
	require.NoError(t, err)
	require.True(t, dup.Duplicate, "unique keys are checked for the app role too")
	tx, err := appPool.Begin(ctx)
	require.NoError(t, err)
	_, err = appClient.EnqueueTx(ctx, tx, queue.NewJob{Queue: "docs", Tenant: "small", Cost: 10, Payload: []byte(`{"tokens":10}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	// A tenant that joins while claims move on joins in the round current at
	// its commit: the trigger that moves its job runs with the owner's
	// rights, though the app role commits.
	tx, err = appPool.Begin(ctx)
	require.NoError(t, err)
	_, err = appClient.EnqueueTx(ctx, tx, queue.NewJob{Queue: "docs", Tenant: "newcomer", Cost: 10, Payload: []byte(`{"tokens":10}`)})
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `UPDATE batchq.queue_cursors SET round = round + 5 WHERE queue = 'docs'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(5), scalar(t, owner, `SELECT round FROM batchq.jobs WHERE tenant = 'newcomer'`))
	_, err = appClient.Enqueue(ctx, queue.NewJob{Queue: "docs", Tenant: "small", Cost: 10})
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full, "the bound holds for the app role")
	_, err = appClient.Enqueue(ctx, queue.NewJob{Queue: "nope", Tenant: "small", Cost: 10})
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	backlog, err := appClient.Backlog(ctx, "docs")
	require.NoError(t, err)
	require.Len(t, backlog, 6)
	_, err = appClient.Queues(ctx)
	require.NoError(t, err)
	require.NoError(t, appClient.QuotaStore().Update(ctx, "app/interactive", func(*throttle.State) error { return nil }))
	_, err = appClient.Quota(ctx)
	require.NoError(t, err)
	for i, forbidden := range []func() error{
		func() error { return execSQL(appPool, `DELETE FROM batchq.jobs`) },
		func() error { return execSQL(appPool, `UPDATE batchq.jobs SET round = 0`) },
		func() error {
			return execSQL(appPool, `INSERT INTO batchq.jobs (queue, tenant, kind, cost, deadline, payload, state, max_attempts, round, pos, cum, seq)
				VALUES ('docs', 'cheat', 'k', 1, now() + interval '1 hour', '{}', 'queued', 1, 0, 0, 0, 0)`)
		},
		func() error { return execSQL(appPool, `SELECT payload FROM batchq.jobs`) },
		func() error { return execSQL(appPool, `SELECT payload FROM batchq.outcomes`) },
		func() error { return execSQL(appPool, `SELECT result FROM batchq.outcomes`) },
		func() error { return execSQL(appPool, `SELECT * FROM batchq.tenant_ring`) },
		func() error { return execSQL(appPool, `UPDATE batchq.tenants SET weight = 100`) },
		func() error { return execSQL(appPool, `INSERT INTO batchq.queues (name) VALUES ('mine')`) },
		func() error { return execSQL(appPool, `DELETE FROM batchq.outcomes`) },
		func() error {
			return execSQL(appPool, `SELECT batchq.ring_join('docs', ARRAY['x'], ARRAY[1::bigint], false)`)
		},
		func() error {
			return execSQL(appPool, `SELECT batchq.insert_jobs('docs', ARRAY['x'], NULL, ARRAY[1::bigint], NULL, NULL, NULL, NULL, NULL)`)
		},
		func() error { return execSQL(appPool, `UPDATE batchq.quota SET paused_until = '9999-01-01'`) },
		func() error { return execSQL(appPool, `UPDATE batchq.quota SET state = '"garbage"'`) },
		func() error { return execSQL(appPool, `INSERT INTO batchq.quota (key) VALUES ('mine')`) },
		func() error { return execSQL(appPool, `SELECT batchq.requeue('docs', 10)`) },
		func() error { return execSQL(appPool, `CREATE TABLE batchq.mine (id int)`) },
		func() error { return execSQL(appPool, `TRUNCATE batchq.quota`) },
		func() error { return execSQL(appPool, `SELECT batchq.pause_queue('docs')`) },
		func() error { return execSQL(appPool, `SELECT batchq.resume_queue('docs')`) },
		func() error { return execSQL(appPool, `SELECT * FROM batchq.matching_jobs('docs')`) },
		func() error { return execSQL(appPool, `SELECT * FROM batchq.cancel_jobs('docs')`) },
		func() error { return execSQL(appPool, `SELECT batchq.delete_queue('docs')`) },
		func() error { return execSQL(appPool, `SELECT batchq.cancel(1, 'app')`) },
		func() error { return execSQL(appPool, `UPDATE batchq.queue_tenants SET weight = 100`) },
		func() error { _, err := appClient.Claim(ctx, "docs", nil); return err },
		func() error { return appClient.SetTenant(ctx, queue.Tenant{Name: "tenant-0", Weight: 50}) },
		func() error { return appClient.Cancel(ctx, 1, "app") },
		func() error { _, err := appClient.Maintain(ctx, "docs"); return err },
		func() error { return execSQL(appPool, `SELECT * FROM batchq.due_schedules('docs', NULL, 10)`) },
		func() error {
			return execSQL(appPool, `SELECT batchq.fire_schedule('s', now(), now(), true, now() + interval '1 hour')`)
		},
		func() error { return execSQL(appPool, `DELETE FROM batchq.schedules`) },
		func() error {
			return appClient.CreateSchedule(ctx, queue.Schedule{Name: "s", Queue: "docs", Tenant: "a", Cost: 1, Cron: "@daily"})
		},
		func() error { _, err := appClient.JobInfo(ctx, 1); return err },
	} {
		requireDenied(t, forbidden(), i)
	}

	// The workers, against a simulated provider, pacing from the shared
	// throttle and exporting metrics.
	sim, err := provider.New(provider.Config{RequestsPerWindow: 1000, TokensPerWindow: 100_000})
	require.NoError(t, err)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	workerPool := pgtest.Connect(t, withUser(t, dbURL, worker, passwords[worker]))
	workerClient, err := queue.NewClient(workerPool, queue.Config{})
	require.NoError(t, err)

	// A worker that dies holding a job, one that fails a job and one that
	// hands a job back: maintenance under the worker role puts them back.
	held, err := workerClient.Claim(ctx, "docs", &queue.ClaimOpts{Limit: 3, Worker: "dies"})
	require.NoError(t, err)
	require.Len(t, held, 3)
	require.NoError(t, workerClient.Heartbeat(ctx, held[0]))
	retrying, err := workerClient.Fail(ctx, held[1], errors.New("flaky"), &queue.FailOpts{RetryIn: time.Millisecond})
	require.NoError(t, err)
	require.True(t, retrying)
	require.NoError(t, workerClient.Release(ctx, held[2], 0))
	_, err = owner.Exec(ctx, `UPDATE batchq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, held[0].ID)
	require.NoError(t, err)
	// A schedule whose tick is due: the worker role's maintenance fires it.
	// The tick is the hour's, on the schedule's grid: on time or missed,
	// one job, with the next tick an hour on.
	_, err = owner.Exec(ctx, `INSERT INTO batchq.schedules (name, queue, tenant, cron, cost, payload, next_run_at)
		VALUES ('nightly', 'docs', 'scheduler', '@hourly', 10, '{"tokens":10}', date_trunc('hour', now()))`)
	require.NoError(t, err)
	st, err := workerClient.Maintain(ctx, "docs")
	require.NoError(t, err)
	require.Equal(t, 1, st.Rescued)
	require.Equal(t, 3, st.Requeued)
	require.Equal(t, 1, st.Fired)

	handler, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL})
	require.NoError(t, err)
	th, err := workerClient.Throttle("sim/model", throttle.Config{})
	require.NoError(t, err)
	col, err := metrics.New(metrics.Config{Client: workerClient, Queues: []string{"docs"}, Throttles: map[string]*throttle.Throttle{"sim/model": th}})
	require.NoError(t, err)
	require.NoError(t, workerClient.Work(ctx, queue.WorkerConfig{
		Queue: "docs", Handler: handler, Throttle: th, Concurrency: 4, Drain: true,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond, OnEvent: col.OnEvent("sim/model"),
	}))
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Equal(t, 1.0, gauge(families, "batchq_database_up"), "metrics read the database under the worker role")

	require.Equal(t, int64(24), scalar(t, owner, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`),
		"23 enqueued, and the schedule's tick")
	require.Zero(t, scalar(t, owner, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(1), scalar(t, owner, `SELECT count(*) FROM batchq.quota WHERE key = 'sim/model' AND tokens_limit = 100000`))
	// held[0]'s old lease is refused.
	require.ErrorIs(t, workerClient.Complete(ctx, held[0], queue.Result{}), queue.ErrLeaseLost)

	for i, forbidden := range []func() error{
		func() error { return execSQL(workerPool, `INSERT INTO batchq.queues (name) VALUES ('mine')`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.queues SET quantum = 1`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.jobs SET round = 0, seq = 0`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.jobs SET payload = '{}'`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.outcomes SET outcome = 'failed'`) },
		func() error { return execSQL(workerPool, `DELETE FROM batchq.outcomes`) },
		func() error { return execSQL(workerPool, `SELECT * FROM batchq.outcomes`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.tenants SET weight = 100`) },
		func() error { return execSQL(workerPool, `SELECT * FROM batchq.tenant_ring`) },
		func() error { return execSQL(workerPool, `SELECT batchq.rekey('docs', ARRAY['tenant-0'])`) },
		func() error { return execSQL(workerPool, `DELETE FROM batchq.jobs`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.jobs SET state = 'queued'`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.schedules SET next_run_at = now()`) },
		func() error {
			return execSQL(workerPool, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
				max_attempts, deadline, enqueued_at) VALUES (999, 'docs', 't', 'k', 'succeeded', 1, 1, 1, now(), now())`)
		},
		func() error { return execSQL(workerPool, `UPDATE batchq.quota SET paused_until = '9999-01-01'`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.queue_cursors SET round = 0`) },
		func() error { return execSQL(workerPool, `SELECT batchq.cancel(1, 'worker')`) },
		func() error { return execSQL(workerPool, `SELECT batchq.pause_queue('docs')`) },
		func() error { return execSQL(workerPool, `SELECT batchq.resume_queue('docs')`) },
		func() error { return execSQL(workerPool, `SELECT * FROM batchq.matching_jobs('docs')`) },
		func() error { return execSQL(workerPool, `SELECT * FROM batchq.cancel_jobs('docs')`) },
		func() error { return execSQL(workerPool, `SELECT batchq.delete_queue('docs')`) },
		func() error {
			return execSQL(workerPool, `SELECT * FROM batchq.cancel_waiting('docs', ARRAY[1::bigint], 'x')`)
		},
		func() error { return execSQL(workerPool, `UPDATE batchq.queues SET paused_at = now()`) },
		func() error { return execSQL(workerPool, `UPDATE batchq.jobs SET cancel_requested_at = now()`) },
		func() error {
			return execSQL(workerPool, `INSERT INTO batchq.queue_tenants (queue, tenant, weight) VALUES ('docs', 'tenant-0', 100)`)
		},
		func() error {
			return execSQL(workerPool, `SELECT * FROM batchq.finish_jobs('docs', 'succeeded', ARRAY[1::bigint])`)
		},
		func() error { return execSQL(workerPool, `CREATE TABLE batchq.mine (id int)`) },
		func() error { return execSQL(workerPool, `DELETE FROM batchq.ledger_adjustments`) },
		func() error {
			_, err := workerClient.Enqueue(ctx, queue.NewJob{Queue: "docs", Tenant: "t", Cost: 1})
			return err
		},
		func() error { return workerClient.CreateQueue(ctx, queue.QueueConfig{Name: "mine"}) },
		func() error { return workerClient.SetTenant(ctx, queue.Tenant{Name: "tenant-0", Weight: 50}) },
	} {
		requireDenied(t, forbidden(), i)
	}

	// The application reads what the workers did.
	usage, err := appClient.TenantUsage(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute), "docs")
	require.NoError(t, err)
	var done int64
	for _, u := range usage {
		done += u.Succeeded
	}
	require.Equal(t, int64(24), done)
	// A window that holds no time is refused by its rule, not for want of
	// a right the application role does not have.
	_, err = appClient.TenantUsage(ctx, time.Now(), time.Now().Add(-time.Hour), "docs")
	var badWindow *queue.InvalidJobError
	require.ErrorAs(t, err, &badWindow)
	require.Equal(t, "since", badWindow.Field)
	audit, err := appClient.Outcomes(ctx, &queue.OutcomesOpts{Queue: "docs"})
	require.NoError(t, err)
	require.Len(t, audit, 24)
	// It cannot erase them.
	_, err = appClient.Prune(ctx, 0)
	requireDenied(t, err, 0)
	require.Equal(t, int64(24), scalar(t, owner, `SELECT count(*) FROM batchq.outcomes`))

	testOperatorRole(t, owner, appClient, workerClient, withUser(t, dbURL, operator, passwords[operator]))
}

// testOperatorRole runs what the operator role is for, as the operator
// commands do, on a queue of its own: reading everything the app reads and
// the jobs whole, pausing and resuming, counting and cancelling jobs in bulk
// and one at a time (a waiting one and a running one), deleting an empty
// queue. Everything else, above all any write to a table, enqueueing,
// claiming and finishing, is refused.
func testOperatorRole(t *testing.T, owner *pgxpool.Pool, appClient, workerClient *queue.Client, operatorURL string) {
	ctx := context.Background()
	admin, err := queue.NewClient(owner, queue.Config{})
	require.NoError(t, err)
	for _, name := range []string{"ops", "spare"} {
		require.NoError(t, admin.CreateQueue(ctx, queue.QueueConfig{Name: name}))
	}
	var jobs []queue.NewJob
	for i := range 5 {
		jobs = append(jobs, queue.NewJob{Queue: "ops", Tenant: []string{"a", "b"}[i%2], Kind: "k", Cost: 10,
			Payload: []byte(fmt.Sprintf(`{"doc":%d}`, i))})
	}
	enqueued, err := appClient.EnqueueMany(ctx, jobs)
	require.NoError(t, err)
	var aIDs []int64 // tenant a's jobs: 0, 2 and 4
	for i := 0; i < len(enqueued); i += 2 {
		aIDs = append(aIDs, enqueued[i].ID)
	}

	opPool := pgtest.Connect(t, operatorURL)
	op, err := queue.NewClient(opPool, queue.Config{})
	require.NoError(t, err)

	// Reads: the reports, the settings, and a job with its payload.
	_, err = op.Queues(ctx)
	require.NoError(t, err)
	_, err = op.Queue(ctx, "ops")
	require.NoError(t, err)
	_, err = op.Tenants(ctx)
	require.NoError(t, err)
	_, err = op.QueueTenants(ctx)
	require.NoError(t, err)
	backlog, err := op.Backlog(ctx, "ops")
	require.NoError(t, err)
	require.Len(t, backlog, 2)
	_, err = op.TenantUsage(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute), "")
	require.NoError(t, err)
	_, err = op.Outcomes(ctx, nil)
	require.NoError(t, err)
	_, err = op.Quota(ctx)
	require.NoError(t, err)
	info, err := op.JobInfo(ctx, aIDs[0])
	require.NoError(t, err)
	require.False(t, info.Finished)
	require.JSONEq(t, `{"doc":0}`, string(info.Payload))

	// Pause and resume.
	changed, err := op.PauseQueue(ctx, "ops")
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = op.PauseQueue(ctx, "ops")
	require.NoError(t, err)
	require.False(t, changed)
	claimed, err := workerClient.Claim(ctx, "ops", nil)
	require.NoError(t, err)
	require.Empty(t, claimed, "the operator's pause holds")
	changed, err = op.ResumeQueue(ctx, "ops")
	require.NoError(t, err)
	require.True(t, changed)

	// Count and cancel in bulk.
	n, err := op.CountJobs(ctx, queue.JobFilter{Queue: "ops"})
	require.NoError(t, err)
	require.Equal(t, queue.JobCount{Queued: 5, Tokens: 50}, n)
	st, err := op.CancelJobs(ctx, queue.JobFilter{Queue: "ops", Tenant: "b"}, "bulk")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 2}, st)

	// Cancel one waiting job, and read its outcome, payload included.
	st, err = op.CancelJob(ctx, aIDs[0], "one")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 1}, st)
	info, err = op.JobInfo(ctx, aIDs[0])
	require.NoError(t, err)
	require.True(t, info.Finished)
	require.Equal(t, "cancelled", info.State)
	require.JSONEq(t, `{"doc":0}`, string(info.Payload))

	// Ask a running job to stop.
	running, err := workerClient.Claim(ctx, "ops", &queue.ClaimOpts{Limit: 1, Worker: "w"})
	require.NoError(t, err)
	require.Len(t, running, 1)
	st, err = op.CancelJob(ctx, running[0].ID, "stop")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Stopping: 1}, st)

	// Delete: refused while jobs are left, done for an empty queue.
	var notEmpty *queue.QueueNotEmptyError
	_, err = op.DeleteQueue(ctx, "ops")
	require.ErrorAs(t, err, &notEmpty)
	require.Equal(t, queue.QueueNotEmptyError{Queue: "ops", Queued: 1, Running: 1}, *notEmpty)
	_, err = op.DeleteQueue(ctx, "spare")
	require.NoError(t, err)
	_, err = op.Queue(ctx, "spare")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)

	forbidden := []func() error{
		func() error { return execSQL(opPool, `SELECT * FROM batchq.tenant_ring`) },
		func() error { return execSQL(opPool, `SELECT * FROM batchq.ledger_adjustments`) },
		func() error { return execSQL(opPool, `SELECT nextval('batchq.settings_version')`) },
		func() error { return execSQL(opPool, `SELECT * FROM batchq.claim('ops', 1, 'x', NULL)`) },
		func() error {
			return execSQL(opPool, `SELECT * FROM batchq.complete('ops', ARRAY[1::bigint], ARRAY[gen_random_uuid()], ARRAY[1::bigint], ARRAY[NULL::text])`)
		},
		func() error {
			return execSQL(opPool, `SELECT * FROM batchq.fail('ops', ARRAY[1::bigint], ARRAY[gen_random_uuid()], ARRAY['x'], ARRAY[now()], ARRAY[false])`)
		},
		func() error {
			return execSQL(opPool, `SELECT * FROM batchq.release('ops', ARRAY[1::bigint], ARRAY[gen_random_uuid()], ARRAY[0::bigint])`)
		},
		func() error { return execSQL(opPool, `SELECT * FROM batchq.enqueue_job('ops', 'a', 1)`) },
		func() error { return execSQL(opPool, `SELECT * FROM batchq.enqueue_jobs('ops', '[]')`) },
		func() error { return execSQL(opPool, `SELECT batchq.requeue('ops', 10)`) },
		func() error { return execSQL(opPool, `SELECT batchq.apply_adjustments('ops')`) },
		func() error {
			return execSQL(opPool, `SELECT * FROM batchq.cancel_waiting('ops', ARRAY[1::bigint], 'x')`)
		},
		func() error { return execSQL(opPool, `SELECT * FROM batchq.save_quota('k', 0, '{}')`) },
		func() error { return execSQL(opPool, `CREATE TABLE batchq.mine (id int)`) },
		func() error {
			_, err := op.Enqueue(ctx, queue.NewJob{Queue: "ops", Tenant: "a", Cost: 1})
			return err
		},
		func() error { _, err := op.Claim(ctx, "ops", nil); return err },
		func() error { _, err := op.Maintain(ctx, "ops"); return err },
		func() error { _, err := op.Resubmit(ctx, aIDs[0]); return err },
		func() error { return op.RetryNow(ctx, aIDs[1]) },
		func() error { return op.CreateQueue(ctx, queue.QueueConfig{Name: "mine"}) },
		func() error {
			q := int64(5)
			_, err := op.UpdateQueue(ctx, "ops", queue.QueueUpdate{Quantum: &q})
			return err
		},
		func() error { return op.SetTenant(ctx, queue.Tenant{Name: "a", Weight: 50}) },
		func() error {
			w := 50.0
			_, err := op.UpdateQueueTenant(ctx, "ops", "a", queue.TenantUpdate{Weight: &w})
			return err
		},
		func() error { _, err := op.ClearQueueTenant(ctx, "ops", "a"); return err },
		func() error { _, err := op.Prune(ctx, 0); return err },
		// Refused with nothing old enough to delete too.
		func() error { _, err := op.Prune(ctx, 30*24*time.Hour); return err },
	}
	// No table of batchq's may be written, whatever the statement.
	rows, err := owner.Query(ctx, `SELECT c.relname::text, a.attname::text FROM pg_class c
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = 1
		WHERE c.relnamespace = 'batchq'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Table, Column string }])
	require.NoError(t, err)
	require.Greater(t, len(tables), 5)
	for _, tc := range tables {
		table, column := pgx.Identifier{"batchq", tc.Table}.Sanitize(), pgx.Identifier{tc.Column}.Sanitize()
		for _, sql := range []string{
			`INSERT INTO ` + table + ` DEFAULT VALUES`,
			`UPDATE ` + table + ` SET ` + column + ` = DEFAULT WHERE false`,
			`DELETE FROM ` + table + ` WHERE false`,
			`TRUNCATE ` + table,
		} {
			forbidden = append(forbidden, func() error { return execSQL(opPool, sql) })
		}
	}
	for i, f := range forbidden {
		requireDenied(t, f(), i)
	}
	require.Equal(t, int64(2), scalar(t, owner, `SELECT count(*) FROM batchq.jobs WHERE queue = 'ops'`), "the refused calls changed nothing")
}

// TestGrantsScriptRunsInPsql runs migrations/grants/grants.sql with psql,
// as the docs show, first with the app and worker roles only (operator_role
// is optional there), then with the operator role too, and checks that each
// grants exactly what `batchq migrate grants --apply` grants those roles, and
// that a second run changes nothing.
func TestGrantsScriptRunsInPsql(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "this test runs psql: install PostgreSQL's client (Debian: postgresql-client)")
	dbURL := pgtest.URL(t)
	super := withDatabase(t, pgtest.ServerURL(t), dbURL)
	superPool := pgtest.Connect(t, super)
	app, worker, operator := uniqueRole(t, "app"), uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, app, worker, operator)
	runPsql := func(vars ...string) (string, error) {
		args := []string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", super, "-f", "../../migrations/grants/grants.sql"}
		for _, v := range vars {
			args = append(args, "-v", v)
		}
		out, err := exec.Command(psql, args...).CombinedOutput()
		return string(out), err
	}

	for range 2 {
		out, err := runPsql("app_role="+app, "worker_role="+worker)
		require.NoError(t, err, out)
	}
	twoRoles := privileges(t, superPool, app, worker, operator)
	require.Contains(t, twoRoles, "function batchq.enqueue_jobs(text,jsonb) "+app+" EXECUTE")
	require.Contains(t, twoRoles, "function batchq.claim(text,integer,text,bigint) "+worker+" EXECUTE")
	require.Zero(t, scalar(t, superPool, `SELECT count(*) FROM pg_roles WHERE rolname = $1`, operator),
		"psql without operator_role made the operator role")

	r := runCLI(t, super, "migrate", "grants", "--app-role", app, "--worker-role", worker, "--operator-role", operator, "--apply")
	require.Equal(t, 0, r.code, r.stderr)
	threeRoles := privileges(t, superPool, app, worker, operator)
	require.Equal(t, twoRoles, privileges(t, superPool, app, worker), "the operator's grants changed the app's or the worker's")
	require.Contains(t, threeRoles, "function batchq.pause_queue(text) "+operator+" EXECUTE")
	require.Contains(t, threeRoles, "relation jobs "+operator+" SELECT")

	for range 2 {
		out, err := runPsql("app_role="+app, "worker_role="+worker, "operator_role="+operator)
		require.NoError(t, err, out)
		require.Equal(t, threeRoles, privileges(t, superPool, app, worker, operator), "psql and the CLI grant differently")
	}

	for _, vars := range [][]string{
		{"app_role=" + app, "worker_role=" + app},
		{"app_role=" + app, "worker_role=" + worker, "operator_role=" + worker},
	} {
		out, err := runPsql(vars...)
		require.Error(t, err, out)
		require.Contains(t, out, "batchq: grants: the app, worker and operator roles must differ")
	}
	require.Equal(t, threeRoles, privileges(t, superPool, app, worker, operator), "a refused run changed something")
}

// privileges lists what roles may do in the batchq schema: on the schema,
// its tables, views and sequences, their columns and its functions, one
// "kind object role PRIVILEGE" a line, sorted.
func privileges(t *testing.T, pool *pgxpool.Pool, roles ...string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT format('%s %s %s %s', p.kind, p.object, r.rolname, p.privilege)
		FROM (SELECT 'schema' AS kind, n.nspname::text AS object, a.grantee, a.privilege_type AS privilege
		      FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname = 'batchq'
		      UNION ALL
		      SELECT 'relation', c.relname::text, a.grantee, a.privilege_type
		      FROM pg_class c, aclexplode(c.relacl) a WHERE c.relnamespace = 'batchq'::regnamespace
		      UNION ALL
		      SELECT 'column', c.relname || '.' || att.attname, a.grantee, a.privilege_type
		      FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid, aclexplode(att.attacl) a
		      WHERE c.relnamespace = 'batchq'::regnamespace
		      UNION ALL
		      SELECT 'function', p.oid::regprocedure::text, a.grantee, a.privilege_type
		      FROM pg_proc p, aclexplode(p.proacl) a WHERE p.pronamespace = 'batchq'::regnamespace) p
		JOIN pg_roles r ON r.oid = p.grantee
		WHERE r.rolname = ANY ($1)
		ORDER BY 1`, roles)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// execSQL runs sql and returns its error.
func execSQL(pool *pgxpool.Pool, sql string) error {
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// requireDenied checks that err, of the i-th forbidden call, is
// PostgreSQL's permission denied.
func requireDenied(t *testing.T, err error, i int) {
	t.Helper()
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "forbidden call %d was allowed, or failed otherwise: %v", i, err)
	require.Equal(t, "42501", pe.Code, "forbidden call %d: %v", i, err)
}

func gauge(families []*dto.MetricFamily, name string) float64 {
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// uniqueRole names a role no parallel test (or earlier run) uses.
// The roles may not be the schema's owner, whose rights the script would
// take away, or a superuser, whom no grant limits: the script refuses them
// and changes nothing, and the owner still enqueues and changes queues.
func TestGrantsRefuseTheSchemaOwnerAndSuperusers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	owner := pgtest.Connect(t, dbURL)
	super := withDatabase(t, pgtest.ServerURL(t), dbURL)
	superPool := pgtest.Connect(t, super)
	var ownerRole, superRole string
	require.NoError(t, superPool.QueryRow(ctx, `SELECT nspowner::regrole::text, current_user FROM pg_namespace
		WHERE nspname = 'batchq'`).Scan(&ownerRole, &superRole))
	worker, operator := uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, worker, operator)

	// A usage error (exit 2) that names the flag, in the script's words,
	// without the server's "ERROR: ... (SQLSTATE P0001)" around them.
	for _, c := range []struct{ args []string }{
		{[]string{"--app-role", ownerRole, "--worker-role", worker, "--operator-role", operator}},
		{[]string{"--app-role", worker, "--worker-role", operator, "--operator-role", superRole}},
	} {
		r := runCLI(t, super, append([]string{"migrate", "grants", "--apply"}, c.args...)...)
		require.Equal(t, 2, r.code, r.stderr)
		if c.args[1] == ownerRole {
			require.Equal(t, "batchq: migrate grants: --app-role "+ownerRole+": owns the batchq schema (migrations ran as it): name roles of their own\n", r.stderr)
		} else {
			require.Equal(t, "batchq: migrate grants: --operator-role "+superRole+": is a superuser, which no grant limits: name roles of their own\n", r.stderr)
		}
	}
	var made int64
	require.NoError(t, superPool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)`, worker, operator).Scan(&made))
	require.Zero(t, made, "nothing was created")
	admin, err := queue.NewClient(owner, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, admin.CreateQueue(ctx, queue.QueueConfig{Name: "q"}))
	_, err = admin.Enqueue(ctx, queue.NewJob{Queue: "q", Tenant: "t", Cost: 1})
	require.NoError(t, err)
}

func uniqueRole(t *testing.T, what string) string {
	return fmt.Sprintf("batchq_test_%s_%s", what, randomHex(t, 6))
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// dropRolesAtEnd drops the roles when the test ends, after the pools that
// use them closed: first what they were granted in the test's database.
func dropRolesAtEnd(t *testing.T, super string, roles ...string) {
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, super)
		require.NoError(t, err)
		defer conn.Close(ctx)
		for _, r := range roles {
			ident := pgx.Identifier{r}.Sanitize()
			_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, r)
			require.NoError(t, err)
			if _, err := conn.Exec(ctx, `DROP OWNED BY `+ident); err != nil && !isUndefinedRole(err) {
				t.Errorf("drop owned by %s: %v", r, err)
			}
			if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+ident); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
}

func isUndefinedRole(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42704"
}

// withDatabase is server's URL (its user) naming the database of dbURL.
func withDatabase(t *testing.T, server, dbURL string) string {
	t.Helper()
	s, err := url.Parse(server)
	require.NoError(t, err)
	d, err := url.Parse(dbURL)
	require.NoError(t, err)
	s.Path = d.Path
	return s.String()
}

// withUser is dbURL as user with password.
func withUser(t *testing.T, dbURL, user, password string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.UserPassword(user, password)
	return u.String()
}

// With --apply, migrate grants writes --format json as other commands do:
// the roles, and the ones whose password it set.
func TestGrantsApplyWritesJSON(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	super := withDatabase(t, pgtest.ServerURL(t), dbURL)
	app, worker, operator := uniqueRole(t, "app"), uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, app, worker, operator)
	env := "BATCHQ_TEST_PW_JSON_" + strings.ToUpper(app)
	require.NoError(t, os.Setenv(env, randomHex(t, 16)))
	t.Cleanup(func() { os.Unsetenv(env) })

	r := runCLI(t, super, "--format", "json", "migrate", "grants", "--app-role", app, "--worker-role", worker,
		"--operator-role", operator, "--apply", "--worker-password-env", env)
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, fmt.Sprintf(`{"app_role":%q,"worker_role":%q,"operator_role":%q,"passwords_set":[%q]}`,
		app, worker, operator, worker), r.stdout)

	r = runCLI(t, super, "migrate", "grants", "--app-role", app, "--worker-role", worker,
		"--operator-role", operator, "--apply", "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("app_role,worker_role,operator_role,passwords_set\n%s,%s,%s,[]\n", app, worker, operator), r.stdout)
}

// Re-run after an upgrade, the grants leave each role the table rights the
// Roles table of docs/sql-api.md lists, and nothing that release 0.1.0's
// grants gave: its worker read and moved the cursors itself, and its app
// and worker wrote the quota and the jobs directly.
func TestGrantsTakeBackWhatAnEarlierReleaseGave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	super := withDatabase(t, pgtest.ServerURL(t), dbURL)
	app, worker, operator := uniqueRole(t, "app"), uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, app, worker, operator)
	superPool := pgtest.Connect(t, super)
	a, w := pgx.Identifier{app}.Sanitize(), pgx.Identifier{worker}.Sanitize()
	for _, sql := range []string{ // 0.1.0's grants, and a read it did not give
		`CREATE ROLE ` + a, `CREATE ROLE ` + w,
		`GRANT USAGE ON SCHEMA batchq TO ` + a + `, ` + w,
		`GRANT INSERT, UPDATE ON batchq.quota TO ` + a,
		`GRANT SELECT, DELETE ON batchq.jobs TO ` + w,
		`GRANT UPDATE (state, attempt) ON batchq.jobs TO ` + w,
		`GRANT INSERT ON batchq.outcomes, batchq.ledger_adjustments TO ` + w,
		`GRANT SELECT, UPDATE (round) ON batchq.queue_cursors TO ` + w,
		`GRANT SELECT, INSERT, UPDATE ON batchq.quota TO ` + w,
		`GRANT SELECT ON batchq.tenant_ring TO ` + a,
	} {
		_, err := superPool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	r := runCLI(t, super, "migrate", "grants", "--app-role", app, "--worker-role", worker, "--operator-role", operator, "--apply")
	require.Equal(t, 0, r.code, r.stderr)

	rights := func(role string) []string {
		rows, err := superPool.Query(ctx, `
			SELECT c.relname || ':' || p.priv
			FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'batchq'
			CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p (priv)
			WHERE c.relkind IN ('r', 'v', 'm', 'p', 'u') AND has_table_privilege($1, c.oid, p.priv)
			UNION ALL
			SELECT DISTINCT c.relname || '(columns):' || p.priv
			FROM pg_attribute at
			JOIN pg_class c ON c.oid = at.attrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'batchq'
			CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) p (priv)
			WHERE at.attnum > 0 AND NOT at.attisdropped AND c.relkind IN ('r', 'v', 'm', 'p', 'u')
			  AND NOT has_table_privilege($1, c.oid, p.priv) AND has_column_privilege($1, c.oid, at.attnum, p.priv)
			ORDER BY 1`, role)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []string{"audit:SELECT", "backlog:SELECT", "outcomes(columns):SELECT", "queue_tenants:SELECT",
		"queues:SELECT", "quota:SELECT", "quota_pauses:SELECT", "tenants:SELECT", "unfinished:SELECT"}, rights(app))
	require.Equal(t, []string{"jobs:SELECT", "queues:SELECT", "quota:SELECT", "unfinished:SELECT"}, rights(worker))
	require.Equal(t, []string{"audit:SELECT", "backlog:SELECT", "jobs:SELECT", "outcomes:SELECT", "queue_tenants:SELECT",
		"queues:SELECT", "quota:SELECT", "quota_pauses:SELECT", "schedules:SELECT", "tenants:SELECT", "unfinished:SELECT"},
		rights(operator))
}
