package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/migrations"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// fixture is release 0.1.0's schema as pg_dump wrote it.
const fixture = "../testdata/schema-0.1.0.sql"

// TestUpgradeFrom010 installs release 0.1.0 from its fixture, fills it as
// that release's code did (jobs queued for tenants of several weights,
// running under live leases and under one that expired, retrying and past
// their deadline; outcomes, pending ledger corrections, a quota row, a
// unique key), migrates up, and checks that nothing was lost, that the
// schema is a fresh install's, and that the new code carries on where the
// old one left: the same claim order, the old leases honoured, the lost one
// rescued. Then it goes down to 0.1.0, which is the fixture again and runs
// the old code, and up again.
func TestUpgradeFrom010(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// The released migrations still make the fixture.
	fromMigrations := pgtest.EmptyURL(t)
	upTo(t, fromMigrations, 5)
	url := pgtest.EmptyURL(t)
	install(t, url, fixture)
	want010 := schemaDump(t, url)
	require.Equal(t, want010, schemaDump(t, fromMigrations), "migrations 00001-00005 no longer make release 0.1.0's schema")
	fresh := pgtest.EmptyURL(t)
	freshRes, err := migrations.Up(ctx, openDB(t, fresh))
	require.NoError(t, err)
	wantFresh := schemaDump(t, fresh)

	pool := pgtest.Connect(t, url)
	old := fill010(t, pool)
	before := contents(t, pool)
	oldOrder := claimOrder010(t, pool)
	require.Len(t, oldOrder, old.queued-1, "the old code claims every queued job but the expired one")

	res, err := migrations.Up(ctx, openDB(t, url))
	require.NoError(t, err)
	require.Equal(t, freshRes.Version, res.Version, "the upgrade reaches the latest version")
	require.GreaterOrEqual(t, res.Version, int64(8))
	require.NotEmpty(t, res.Functions)
	require.Equal(t, wantFresh, schemaDump(t, url), "an upgraded schema differs from a fresh install's")
	require.Equal(t, before, contents(t, pool), "the upgrade changed what the tables hold")

	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	// The unique key still holds.
	dup, err := client.Enqueue(ctx, queue.NewJob{Queue: "imports", Tenant: "a", Cost: 1, UniqueKey: "order-42"})
	require.NoError(t, err)
	require.Equal(t, queue.Enqueued{ID: old.keyed, Duplicate: true}, dup)
	// The runs the old code started finish under the leases it gave them.
	for _, r := range old.live {
		var lost int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM batchq.complete('imports', ARRAY[$1::bigint], ARRAY[$2::uuid], NULL, NULL)`,
			r.id, r.token).Scan(&lost))
		require.Zero(t, lost, "job %d's lease from 0.1.0 was refused", r.id)
	}
	// The new code claims the queued jobs in the order the old one would
	// have, one at a time, and drops the expired one.
	var newOrder []int64
	for {
		jobs, err := client.Claim(ctx, "imports", nil)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		newOrder = append(newOrder, jobs[0].ID)
		require.NoError(t, client.Complete(ctx, jobs[0], queue.Result{}))
	}
	require.Equal(t, oldOrder, newOrder)
	require.Equal(t, int64(1), scalar(t, pool, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND outcome = 'expired'`, old.expired))
	// The run whose lease expired is rescued, and comes back with the one
	// that was waiting to retry; the pending corrections are folded.
	st, err := client.Maintain(ctx, "imports")
	require.NoError(t, err)
	require.Equal(t, 1, st.Rescued)
	require.Equal(t, 2, st.Requeued)
	for {
		jobs, err := client.Claim(ctx, "imports", &queue.ClaimOpts{Limit: 10})
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			require.NoError(t, client.Complete(ctx, j, queue.Result{}))
		}
	}
	require.Zero(t, scalar(t, pool, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(old.enqueued), scalar(t, pool, `SELECT count(*) FROM batchq.outcomes`), "one outcome per job")

	// Jobs to run later, on the queue 0.1.0 made: not claimed before their
	// time, then claimed. The second waits across the round trip below.
	runAt := time.Now().Add(time.Hour)
	for range 2 {
		_, err = client.Enqueue(ctx, queue.NewJob{Queue: "imports", Tenant: "a", Cost: 5, RunAt: runAt})
		require.NoError(t, err)
	}
	jobs, err := client.Claim(ctx, "imports", nil)
	require.NoError(t, err)
	require.Empty(t, jobs, "a scheduled job is not claimed before its run-at")
	execSQL(t, pool, `UPDATE batchq.jobs SET run_after = now() WHERE id = (SELECT min(id) FROM batchq.jobs)`)
	st, err = client.Maintain(ctx, "imports")
	require.NoError(t, err)
	require.Equal(t, 1, st.Requeued)
	jobs, err = client.Claim(ctx, "imports", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, client.Complete(ctx, jobs[0], queue.Result{}))
	scheduled := scalar(t, pool, `SELECT id FROM batchq.jobs WHERE state = 'scheduled'`)
	require.Zero(t, scalar(t, pool, `SELECT count(*) FROM batchq.ledger_adjustments`))
	// The quota reads as it was saved, and saves.
	got, err := client.QuotaStore().Load(ctx, "openai/gpt")
	require.NoError(t, err)
	require.Equal(t, old.quota.Tokens.Remaining, got.Tokens.Remaining)
	require.NoError(t, client.QuotaStore().Update(ctx, "openai/gpt", func(s *throttle.State) error {
		s.Tokens.Remaining--
		return nil
	}))

	// Down to 0.1.0: its schema, and its code runs.
	pool.Close()
	res, err = migrations.DownTo(ctx, openDB(t, url), 5)
	require.NoError(t, err)
	require.Equal(t, int64(5), res.Version)
	require.Equal(t, want010, schemaDump(t, url), "down to 0.1.0 is not release 0.1.0's schema")
	pool = pgtest.Connect(t, url)
	enqueue010(t, pool, []string{"x", "y"}, []int64{5, 7}, "")
	require.Len(t, claimOrder010(t, pool), 2, "0.1.0's code claims after the round trip")
	// The scheduled job waits as a retrying one, which 0.1.0's requeue moves
	// to its queue once due.
	require.Equal(t, int64(1), scalar(t, pool, `SELECT count(*) FROM batchq.jobs
		WHERE id = $1 AND state = 'retrying' AND run_after > now()`, scheduled))
	require.Zero(t, scalar(t, pool, `SELECT batchq.requeue('imports', 10)`))
	execSQL(t, pool, `UPDATE batchq.jobs SET run_after = now() WHERE id = $1`, scheduled)
	require.Equal(t, int64(1), scalar(t, pool, `SELECT batchq.requeue('imports', 10)`))

	// And up again.
	_, err = migrations.Up(ctx, openDB(t, url))
	require.NoError(t, err)
	require.Equal(t, wantFresh, schemaDump(t, url))
}

// old is what fill010 left.
type old struct {
	enqueued int // jobs enqueued
	queued   int // of them, queued when it returned
	live     []run
	expired  int64
	keyed    int64 // the job holding unique key order-42
	quota    throttle.State
}

type run struct {
	id    int64
	token pgtype.UUID
}

// fill010 writes what release 0.1.0's code wrote, with its statements.
func fill010(t *testing.T, pool *pgxpool.Pool) old {
	t.Helper()
	ctx := context.Background()
	execSQL(t, pool, `INSERT INTO batchq.queues (name, quantum) VALUES ('imports', 100)`)
	execSQL(t, pool, `INSERT INTO batchq.queue_cursors (queue) VALUES ('imports')`)
	execSQL(t, pool, `INSERT INTO batchq.tenants (name, weight) VALUES ('heavy', 3), ('light', 0.5)`)
	var o old
	tenants := []string{"a", "heavy", "light", "b", "a", "a", "heavy", "c"}
	for round := range 4 {
		var ts []string
		var costs []int64
		for i, tn := range tenants {
			ts = append(ts, tn)
			costs = append(costs, int64(1+(i*37+round*53)%250))
		}
		o.enqueued += enqueue010(t, pool, ts, costs, "")
	}
	o.enqueued += enqueue010(t, pool, []string{"a"}, []int64{10}, "order-42")
	o.keyed = scalar(t, pool, `SELECT id FROM batchq.jobs WHERE unique_key = 'order-42'`)

	// Claims of 0.1.0: six jobs run.
	rows, err := pool.Query(ctx, `SELECT id, lease_token FROM batchq.claim('imports', 6, 'old-worker', 9223372036854775807)`)
	require.NoError(t, err)
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (run, error) {
		var x run
		return x, r.Scan(&x.id, &x.token)
	})
	require.NoError(t, err)
	require.Len(t, runs, 6)
	// Two finish with their actual costs, one of them with a result: their
	// corrections wait in the ledger.
	var lost int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM batchq.complete($1, $2, $3, $4)`,
		[]int64{runs[0].id, runs[1].id}, []pgtype.UUID{runs[0].token, runs[1].token}, []int64{400, 1}, []string{`{"ok":1}`, ""}).Scan(&lost))
	require.Zero(t, lost)
	// One failed and waits to retry, due now (0.1.0's Fail).
	execSQL(t, pool, `UPDATE batchq.jobs SET state = 'retrying', run_after = now() - interval '1 second', last_error = 'flaky',
		lease_token = NULL, lease_expires_at = NULL, worker = NULL WHERE id = $1`, runs[2].id)
	// One's worker died: its lease ran out.
	execSQL(t, pool, `UPDATE batchq.jobs SET lease_expires_at = now() - interval '1 minute' WHERE id = $1`, runs[3].id)
	o.live = runs[4:]
	// A queued job whose deadline passed, not swept yet.
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM batchq.jobs WHERE state = 'queued' AND tenant = 'c' ORDER BY id DESC LIMIT 1`).Scan(&o.expired))
	execSQL(t, pool, `UPDATE batchq.jobs SET deadline = now() - interval '1 second' WHERE id = $1`, o.expired)
	o.queued = int(scalar(t, pool, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))

	// A quota key's shared state, saved as 0.1.0's store saved it.
	now := time.Now().UTC().Truncate(time.Microsecond)
	o.quota = throttle.State{Tokens: throttle.Quota{Observed: true, Limit: 60000, HasLimit: true, Remaining: 4200,
		SentAt: now, ReceivedAt: now, HasReset: true, ResetFrom: now, ResetAt: now.Add(time.Second)}}
	state, err := json.Marshal(&o.quota)
	require.NoError(t, err)
	execSQL(t, pool, `INSERT INTO batchq.quota (key, state, tokens_limit, tokens_remaining, tokens_reset_at, observed_at)
		VALUES ('openai/gpt', $1, 60000, 4200, $2, $3)`, state, now.Add(time.Second), now)
	return o
}

// enqueue010 enqueues with release 0.1.0's function and returns how many
// jobs it inserted.
func enqueue010(t *testing.T, pool *pgxpool.Pool, tenants []string, costs []int64, key string) int {
	t.Helper()
	n := len(tenants)
	kinds, keys := make([]string, n), make([]string, n)
	deadlines, attempts, payloads := make([]time.Time, n), make([]int32, n), make([][]byte, n)
	for i := range n {
		kinds[i], keys[i], payloads[i] = "summarize", key, []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	rows, err := pool.Query(context.Background(), `SELECT status FROM batchq.enqueue('imports', $1, $2, $3, $4, $5, $6, $7)`,
		tenants, kinds, costs, deadlines, attempts, payloads, keys)
	require.NoError(t, err)
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, slicesRepeat("inserted", n), statuses)
	return n
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// claimOrder010 is the order in which release 0.1.0's claim and complete,
// one job at a time, take the queued jobs of 'imports', found in a
// transaction that is rolled back, so the database is left as it was.
func claimOrder010(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var order []int64
	for {
		var id int64
		var token pgtype.UUID
		var expired bool
		err := tx.QueryRow(ctx, `SELECT id, lease_token, expired FROM batchq.claim('imports', 1, 'old', 9223372036854775807)
			ORDER BY expired`).Scan(&id, &token, &expired)
		if err == pgx.ErrNoRows {
			return order
		}
		require.NoError(t, err)
		if expired {
			continue
		}
		order = append(order, id)
		_, err = tx.Exec(ctx, `SELECT * FROM batchq.complete(ARRAY[$1::bigint], ARRAY[$2::uuid], NULL, NULL)`, id, token)
		require.NoError(t, err)
	}
}

// contents is every row of batchq's tables, as JSON, in a stable order.
//
// The columns the upgrade adds to 0.1.0's tables (upgradeAdds) must be NULL
// in every row, and are left out, so that the rows read the same before and
// after.
func contents(t *testing.T, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range []string{"jobs", "outcomes", "ledger_adjustments", "tenant_ring", "queue_cursors", "queues", "tenants", "quota"} {
		added := append([]string{}, upgradeAdds[table]...)
		var set int
		require.NoError(t, pool.QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM batchq.%s t, unnest($1::text[]) c WHERE to_jsonb(t)->>c IS NOT NULL`, table), added).Scan(&set))
		require.Zero(t, set, "the upgrade set %s's new columns %v", table, added)
		rows, err := pool.Query(context.Background(), fmt.Sprintf(`SELECT (to_jsonb(t) - $1::text[])::text FROM batchq.%s t ORDER BY 1`, table), added)
		require.NoError(t, err)
		out[table], err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
	}
	return out
}

// upgradeAdds lists the columns the upgrade from 0.1.0 adds to its tables.
var upgradeAdds = map[string][]string{
	"jobs":        {"cancel_requested_at"},
	"outcomes":    {"run_at"},
	"queues":      {"paused_at"},
	"tenant_ring": {"scheduled"},
}

// install runs a SQL file on url's database, as psql would.
func install(t *testing.T, url, path string) {
	t.Helper()
	script, err := os.ReadFile(path)
	require.NoError(t, err)
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), string(script))
	require.NoError(t, err)
}

// upTo applies the migrations up to version with goose alone, as release
// 0.1.0 did.
func upTo(t *testing.T, url string, version int64) {
	t.Helper()
	p, err := migrations.NewProvider(openDB(t, url))
	require.NoError(t, err)
	_, err = p.UpTo(context.Background(), version)
	require.NoError(t, err)
	v, err := p.GetDBVersion(context.Background())
	require.NoError(t, err)
	require.Equal(t, version, v)
}

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// schemaDump is pg_dump's view of the batchq schema, without what differs
// between databases that hold the same schema (comments, the \restrict key,
// session settings).
func schemaDump(t *testing.T, url string) string {
	t.Helper()
	pgDump, err := exec.LookPath("pg_dump")
	require.NoError(t, err, "the upgrade test compares schemas with pg_dump: install PostgreSQL's client (Debian: postgresql-client)")
	out, err := exec.Command(pgDump, "--schema-only", "--no-owner", "-n", "batchq", url).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || strings.HasPrefix(line, "--") || strings.HasPrefix(line, `\restrict`) || strings.HasPrefix(line, `\unrestrict`) {
			continue
		}
		keep = append(keep, line)
	}
	return dumpNoise.ReplaceAllString(strings.Join(keep, "\n"), "")
}

var dumpNoise = regexp.MustCompile(`(?m)^SET .*$`)

func execSQL(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// An upgrade that drops a function to change its arguments (00008 drops
// batchq.enqueue) keeps the roles that could call it able to call the new
// one, and grants nothing else: a 0.1.0 application keeps enqueueing after
// `batchq migrate up`, before anyone runs the grants script again.
func TestUpgradeKeepsWhoMayCallWhat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	upTo(t, url, 5) // release 0.1.0
	pool := superuser(t, url)
	role := newRole(t, pool, "upgrade_app")
	execSQL(t, pool, fmt.Sprintf(`DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT oid::regprocedure FROM pg_proc WHERE pronamespace = 'batchq'::regnamespace AND proname = 'enqueue' LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %%s TO %s', f);
    END LOOP;
END $$`, role))
	may := func(name string) (n, allowed int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE has_function_privilege($2, oid, 'EXECUTE'))
			FROM pg_proc WHERE pronamespace = 'batchq'::regnamespace AND proname = $1`, name, role).Scan(&n, &allowed))
		return n, allowed
	}
	n, allowed := may("enqueue")
	require.Positive(t, n)
	require.Equal(t, n, allowed, "the role may enqueue on 0.1.0")

	_, err := migrations.Up(ctx, openDB(t, url))
	require.NoError(t, err)
	n, allowed = may("enqueue")
	require.Positive(t, n)
	require.Equal(t, n, allowed, "the upgrade took away the role's right to enqueue")
	for _, other := range []string{"claim", "requeue", "enqueue_job"} {
		n, allowed = may(other)
		require.Positive(t, n, other)
		require.Zero(t, allowed, "the upgrade granted the role %s, which it could not call before", other)
	}
}

// superuser returns a pool on url's database as the server's superuser, who
// makes roles: they are the server's, not the database's.
func superuser(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	su, err := neturl.Parse(pgtest.ServerURL(t))
	require.NoError(t, err)
	db, err := neturl.Parse(url)
	require.NoError(t, err)
	su.Path = db.Path
	return pgtest.Connect(t, su.String())
}

// newRole creates a role of its own for the test, named from prefix, and
// drops it, with what it was granted in pool's database, when the test ends.
func newRole(t *testing.T, pool *pgxpool.Pool, prefix string) string {
	t.Helper()
	role := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	execSQL(t, pool, fmt.Sprintf(`CREATE ROLE %s`, role))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s`, role))
		_, _ = pool.Exec(context.Background(), fmt.Sprintf(`DROP ROLE %s`, role))
	})
	return role
}

// Migration 00014 adds outcomes.run_at to batchq.audit, last, and keeps who
// may read the view; going down makes the view as 00013 had it again: its
// columns, its comment, and its grants, which dropping it to lose a column
// would otherwise take away from the roles that read reports.
func TestAuditRunAtUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	upTo(t, url, 13)
	pool := superuser(t, url)
	reader := newRole(t, pool, "audit_reader")
	granter := newRole(t, pool, "audit_granter")
	execSQL(t, pool, fmt.Sprintf(`GRANT SELECT ON batchq.audit TO %s`, reader))
	execSQL(t, pool, fmt.Sprintf(`GRANT SELECT, REFERENCES ON batchq.audit TO %s WITH GRANT OPTION`, granter))
	columnReader := newRole(t, pool, "audit_column_reader")
	execSQL(t, pool, fmt.Sprintf(`GRANT SELECT (job_id, outcome) ON batchq.audit TO %s`, columnReader))
	type view struct{ def, comment, acl, owner, columnACL string }
	audit := func() (v view) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_viewdef('batchq.audit'::regclass),
			coalesce(obj_description('batchq.audit'::regclass, 'pg_class'), ''),
			(SELECT coalesce(c.relacl::text, '') FROM pg_class c WHERE c.oid = 'batchq.audit'::regclass),
			(SELECT c.relowner::regrole::text FROM pg_class c WHERE c.oid = 'batchq.audit'::regclass),
			(SELECT coalesce(string_agg(a.attname || '=' || a.attacl::text, ' ' ORDER BY a.attnum), '')
			 FROM pg_attribute a WHERE a.attrelid = 'batchq.audit'::regclass AND a.attacl IS NOT NULL)`).Scan(
			&v.def, &v.comment, &v.acl, &v.owner, &v.columnACL))
		return v
	}
	columns := func() []string {
		rows, err := pool.Query(ctx, `SELECT attname::text FROM pg_attribute
			WHERE attrelid = 'batchq.audit'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	before, beforeColumns := audit(), columns()
	require.NotContains(t, beforeColumns, "run_at")
	require.Contains(t, before.acl, reader)
	require.Contains(t, before.columnACL, columnReader)

	_, err := migrations.Up(ctx, openDB(t, url))
	require.NoError(t, err)
	require.Equal(t, append(beforeColumns, "run_at"), columns(), "run_at comes last, the columns before it as they were")
	require.Equal(t, before.comment, audit().comment)
	require.Equal(t, before.acl, audit().acl, "the upgrade kept who may read the view")
	require.Equal(t, before.columnACL, audit().columnACL, "and its columns")

	// Down run by a superuser, not the schema's owner, as an operator may:
	// the view made anew is still the owner's.
	res, err := migrations.DownTo(ctx, openDB(t, pool.Config().ConnString()), 13)
	require.NoError(t, err)
	require.Equal(t, int64(13), res.Version)
	require.Equal(t, before, audit(), "down is the view 00013 had, owner, grants and comment included")
	require.Equal(t, beforeColumns, columns())
}
