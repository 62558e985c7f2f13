package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// The SQL API's edges, as a caller that skips the Go client meets them.
func TestSQLAPIEdges(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	sqlErr := func(t *testing.T, sql string, args ...any) string {
		t.Helper()
		_, err := b.pool.Exec(b.ctx, sql, args...)
		require.Error(t, err)
		return err.Error()
	}

	t.Run("an array of another length than the tenants' is refused by name, and nothing is written", func(t *testing.T) {
		for _, c := range []struct{ args, field, got string }{
			{`NULL, ARRAY[1,2,3]::bigint[], NULL, NULL, NULL, ARRAY['uk1']`, "unique_keys", "got 1 for 3"},
			{`NULL, ARRAY[1,2,3]::bigint[], NULL, NULL, ARRAY['{"a": 1}']::jsonb[], NULL`, "payloads", "got 1 for 3"},
			{`ARRAY['k','k','k','k'], ARRAY[1,2,3]::bigint[], NULL, NULL, NULL, NULL`, "kinds", "got 4 for 3"},
			{`NULL, ARRAY[1,2]::bigint[], NULL, NULL, NULL, NULL`, "costs", "got 2 for 3"},
			{`NULL, ARRAY[1,2,3]::bigint[], ARRAY[now() + interval '1 day']::timestamptz[], NULL, NULL, NULL`, "deadlines", "got 1 for 3"},
			{`NULL, ARRAY[1,2,3]::bigint[], NULL, ARRAY[]::integer[], NULL, NULL`, "max_attempts", "got 0 for 3"},
			{`NULL, ARRAY[1,2,3]::bigint[], NULL, NULL, NULL, NULL, ARRAY[now() + interval '1 hour']`, "run_ats", "got 1 for 3"},
		} {
			msg := sqlErr(t, `SELECT * FROM batchq.enqueue('q', ARRAY['sa','sb','sc'], `+c.args+`)`)
			require.Contains(t, msg, "batchq: enqueue: "+c.field+": must hold one element per tenant, or be NULL ("+c.got+")", c.field)
			require.Contains(t, msg, "SQLSTATE BQ101", c.field)
		}
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue('q', NULL, NULL, ARRAY[1]::bigint[], NULL, NULL, NULL, NULL)`)
		require.Contains(t, msg, "costs: must hold one element per tenant, or be NULL (got 1 for 0)")
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant IN ('sa', 'sb', 'sc')`))
		// NULL arrays, and NULL elements, are the defaults.
		rows, err := b.pool.Query(b.ctx, `SELECT status FROM batchq.enqueue('q', ARRAY['sa','sb','sc'], NULL, ARRAY[1,2,3]::bigint[], NULL, NULL,
			ARRAY[NULL, '{"a": 1}', NULL]::jsonb[], ARRAY['uk1', NULL, NULL])`)
		require.NoError(t, err)
		statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"inserted", "inserted", "inserted"}, statuses)
		require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant IN ('sa', 'sb', 'sc')`))
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'sb' AND payload = '{"a": 1}'`))
	})

	// A queue of their own: a claim of the subtests below takes q's first jobs.
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "arr"}))
	t.Run("arrays are read by position whatever their first index, and of one dimension", func(t *testing.T) {
		// One job: every field kept, the unique key too.
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT job_id FROM batchq.enqueue('arr', '[0:0]={lb1}'::text[],
			'[0:0]={summarize}'::text[], '[0:0]={7}'::bigint[], '[0:0]={2099-01-01T00:00:00Z}'::timestamptz[],
			'[0:0]={1}'::int[], '[0:0]={"{\"doc\":42}"}'::jsonb[], '[5:5]={uk-lb1}'::text[])`).Scan(&id))
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND kind = 'summarize'
			AND cost = 7 AND deadline = '2099-01-01T00:00:00Z' AND max_attempts = 1 AND payload = '{"doc": 42}'
			AND unique_key = 'uk-lb1'`, id))
		var status string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM batchq.enqueue('arr', ARRAY['lb1'], NULL, ARRAY[7]::bigint[],
			NULL, NULL, NULL, '[2:2]={uk-lb1}'::text[])`).Scan(&status))
		require.Equal(t, "duplicate", status)
		// A run-at whose array starts elsewhere still schedules the job.
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT job_id FROM batchq.enqueue('arr', ARRAY['lb2'], NULL, ARRAY[7]::bigint[],
			NULL, NULL, NULL, NULL, '[3:3]={2099-01-01T00:00:00Z}'::timestamptz[])`).Scan(&id))
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'scheduled'`, id))
		// Many jobs of several tenants: each line's fields, in order.
		rows, err := b.pool.Query(b.ctx, `SELECT job_id FROM batchq.enqueue('arr', '[0:2]={lb3,lb4,lb3}'::text[],
			'[-1:1]={a,b,c}'::text[], '[0:2]={1,2,3}'::bigint[], NULL, NULL, NULL, NULL) ORDER BY ord`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, ids, 3)
		for i, want := range []string{"lb3 a 1", "lb4 b 2", "lb3 c 3"} {
			var got string
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT tenant || ' ' || kind || ' ' || cost FROM batchq.jobs WHERE id = $1`,
				ids[i]).Scan(&got))
			require.Equal(t, want, got)
		}
		require.Equal(t, int64(4), b.scalar(t, `SELECT cum FROM batchq.tenant_ring WHERE queue = 'arr' AND tenant = 'lb3'`))

		before := b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'arr'`)
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue('arr', '{{a,b},{c,d}}'::text[], NULL, '{1,2,3,4}'::bigint[], NULL, NULL, NULL, NULL)`)
		require.Contains(t, msg, "batchq: enqueue: tenants: must be a one-dimensional array, an element per job (got 2 dimensions)")
		require.Contains(t, msg, "SQLSTATE BQ101")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue('arr', '{a,b,c,d}'::text[], NULL, '{{1,2},{3,4}}'::bigint[], NULL, NULL, NULL, NULL)`)
		require.Contains(t, msg, "batchq: enqueue: costs: must be a one-dimensional array")
		require.Equal(t, before, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'arr'`))
	})

	t.Run("a call of no jobs refuses a name no queue can have, as a call of some does", func(t *testing.T) {
		for _, name := range []string{"NULL", "'bad name'"} {
			msg := sqlErr(t, `SELECT * FROM batchq.enqueue(`+name+`, '{}', NULL, NULL, NULL, NULL, NULL, NULL)`)
			require.Contains(t, msg, "queue: must name a queue", name)
			require.Contains(t, msg, "SQLSTATE BQ100", name)
		}
	})

	t.Run("Go's zero time is no deadline in enqueue_job, as in the other forms", func(t *testing.T) {
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT job_id FROM batchq.enqueue_job(queue => 'arr', tenant => 'zt', cost => 1,
			deadline => '0001-01-01T00:00:00Z', ttl => '1 hour')`).Scan(&id))
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs
			WHERE id = $1 AND deadline BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'`, id))
	})

	t.Run("a ttl of JSON seconds too short to make a microsecond is refused, not read as none", func(t *testing.T) {
		before := b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'arr'`)
		for _, ttl := range []string{"1e-300", "1e-400", "0.0000009"} {
			msg := sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('arr', $1::jsonb)`, `[{"tenant": "t", "cost": 1, "ttl": `+ttl+`}]`)
			require.Contains(t, msg, "batchq: invalid job 1: ttl: must be 0 (none) or at least 0.000001 seconds (got "+ttl+")")
			require.Contains(t, msg, "SQLSTATE BQ103")
		}
		require.Equal(t, before, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'arr'`))
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT job_id FROM batchq.enqueue_jobs('arr', '[{"tenant": "t", "cost": 1, "ttl": 0.000001}]')`).Scan(&id))
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND deadline < now() + interval '1 second'`, id))
	})

	t.Run("an interval that does not parse is shown clipped", func(t *testing.T) {
		for _, field := range []string{"ttl", "delay"} {
			_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_jobs('arr', jsonb_build_array(jsonb_build_object('tenant', 't',
				'cost', 1, '`+field+`', repeat('x', 100000))))`)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Contains(t, pe.Message, `(got "`+strings.Repeat("x", 39)+`...)`, field)
			require.Less(t, len(pe.Message), 200, field)
		}
	})

	t.Run("a ttl of JSON seconds past any deadline is refused by name", func(t *testing.T) {
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "ttl": 1e13}]')`)
		require.Contains(t, msg, "batchq: invalid job 1: ttl: must be at most 300000000000 seconds either way (got 10000000000000)")
		require.Contains(t, msg, "SQLSTATE BQ103")
	})

	t.Run("a deadline is RFC 3339, not any text timestamptz reads", func(t *testing.T) {
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "deadline": "tomorrow"}]')`)
		require.Contains(t, msg, `batchq: invalid job 1: deadline: must be an RFC 3339 time such as "2026-12-01T02:00:00Z" (got "tomorrow")`)
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "deadline": "2026-13-45T00:00:00Z"}]')`)
		require.Contains(t, msg, `batchq: invalid job 1: deadline: must be a time such as`)
	})

	t.Run("a zero deadline is none, and the ttl gives the deadline", func(t *testing.T) {
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT job_id FROM batchq.enqueue_jobs('q',
			'[{"tenant": "z", "cost": 1, "deadline": "0001-01-01T00:00:00Z", "ttl": "1 hour"}]')`).Scan(&id))
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs
			WHERE id = $1 AND deadline BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'`, id))
	})

	t.Run("a time is refused by name when it is not one, as the Go client refuses it", func(t *testing.T) {
		for _, c := range []struct{ field, value, rule string }{
			{"deadline", "2027-12-02T24:00:00Z", "must be an RFC 3339 time"},
			{"deadline", "2027-12-02T23:59:60Z", "must be an RFC 3339 time"},
			{"run_at", "2027-12-02T10:00:00+10:60", "must be an RFC 3339 time"},
			// Go reads offsets up to a day; PostgreSQL up to 15:59.
			{"deadline", "2027-12-02T10:00:00+16:00", "must be a time such as"},
			{"run_at", "2027-12-02T10:00:00-99:00", "must be a time such as"},
			// Only Go's zero time is "no deadline".
			{"deadline", "0001-06-01T00:00:00Z", "must be in the future"},
		} {
			before := b.scalar(t, `SELECT count(*) FROM batchq.jobs`)
			msg := sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', $1::jsonb)`,
				`[{"tenant": "ok", "cost": 1}, {"tenant": "t", "cost": 1, "`+c.field+`": "`+c.value+`"}]`)
			require.Contains(t, msg, "batchq: invalid job 2: "+c.field+": "+c.rule, c.value)
			require.Contains(t, msg, "SQLSTATE BQ103", c.value)
			require.Equal(t, before, b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "nothing written for %s", c.value)
		}
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue('q', ARRAY['t'], NULL, ARRAY[1]::bigint[],
			ARRAY['0001-06-01 00:00:00Z']::timestamptz[], NULL, NULL, NULL)`)
		require.Contains(t, msg, "batchq: invalid job 1: deadline: must be in the future")
	})

	t.Run("a key that is not a field is named quoted when it is not a plain name", func(t *testing.T) {
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', $1::jsonb)`, `[{"tenant": "t", "cost": 1, "color": 1}]`)
		require.Contains(t, msg, "batchq: invalid job 1: color: is not a field of a job")
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_jobs('q', $1::jsonb)`,
			`[{"tenant": "t", "cost": 1, "x\nINJECTED\u202eevil": 1}]`)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, `batchq: invalid job 1: "x\nINJECTED\u202eevil": is not a field of a job `+
			`(tenant, cost, payload, kind, deadline, ttl, max_attempts, unique_key, run_at, delay)`, pe.Message)
		require.Equal(t, `"x\nINJECTED\u202eevil"`, pe.ColumnName)
		var detail struct{ Field string }
		require.NoError(t, json.Unmarshal([]byte(pe.Detail), &detail))
		require.Equal(t, "x\nINJECTED\u202eevil", detail.Field, "DETAIL keeps the key as it was")
	})

	t.Run("a ttl or delay of mixed signs is refused even when its parts add up to nothing", func(t *testing.T) {
		before := b.scalar(t, `SELECT count(*) FROM batchq.jobs`)
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue_job('q', 't', 1, ttl => '-1 mon 30 days')`)
		require.Contains(t, msg, "batchq: invalid job: ttl: must not mix positive and negative parts")
		require.Contains(t, msg, "SQLSTATE BQ103")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_job('q', 't', 1, delay => '1 mon -30 days')`)
		require.Contains(t, msg, "batchq: invalid job: delay: must not mix positive and negative parts")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "ttl": "-1 mon 30 days"}]')`)
		require.Contains(t, msg, "batchq: invalid job 1: ttl: must not mix positive and negative parts")
		// A negative number of seconds too small to make a microsecond is
		// still negative, as the Go client says of a negative TTL.
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "ttl": -0.0000001}]')`)
		require.Contains(t, msg, "batchq: invalid job 1: ttl: must be > 0 (got -0.0000001)")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "delay": -0.0000001}]')`)
		require.Contains(t, msg, "batchq: invalid job 1: delay: must be >= 0 (got -0.0000001)")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "ttl": -1e-400}]')`)
		// A number too long to read in a message is shown with an exponent,
		// not in its hundreds of digits.
		require.Contains(t, msg, "batchq: invalid job 1: ttl: must be > 0 (got -1e-400)")
		require.Contains(t, msg, "SQLSTATE BQ103")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1e400}]')`)
		require.Contains(t, msg, "batchq: invalid job 1: cost: must be in 1..1000000000 (got 1e+400)")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "max_attempts": -2.5e99}]')`)
		require.Contains(t, msg, "max_attempts: must be in 1..1000, or 0 for the queue's setting (got -2.5e+99)")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "ttl": 1234567890123456789012345678901234567890123}]')`)
		require.Contains(t, msg, "ttl: must be at most 300000000000 seconds either way (got 1.234567890123457e+42)")
		// Short ones as they were given, long strings clipped as the CLI clips a line's field.
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1e10}]')`)
		require.Contains(t, msg, "cost: must be in 1..1000000000 (got 10000000000)")
		msg = sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('q', '[{"tenant": "t", "cost": 1, "deadline": "`+strings.Repeat("x", 100)+`"}]')`)
		require.Contains(t, msg, `(got "`+strings.Repeat("x", 39)+`...)`)
		require.Equal(t, before, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
		// Zero is none, in any spelling of one sign.
		require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "zero"}))
		for _, ttl := range []string{"0", "0 days", "0 mon 0 days 0 seconds"} {
			_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job('zero', 't', 1, ttl => $1::interval)`, ttl)
			require.NoError(t, err, ttl)
		}
	})

	t.Run("a worker's name keeps the name rules", func(t *testing.T) {
		require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "named"}))
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "named", Tenant: "t", Cost: 1})
		require.NoError(t, err)
		msg := sqlErr(t, `SELECT * FROM batchq.claim('named', 10, E'w\nx', 1000)`)
		require.Contains(t, msg, `batchq: claim: worker: must not contain control characters (got "w\nx")`)
		require.Contains(t, msg, "SQLSTATE BQ101")
		_, err = b.client.Claim(b.ctx, "named", &queue.ClaimOpts{Limit: 1, Worker: "w\tx"})
		require.ErrorContains(t, err, "worker: must not contain control characters")
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'named' AND state = 'running'`))
	})

	t.Run("messages say what they got as Go would", func(t *testing.T) {
		var got []string
		rows, err := b.pool.Query(b.ctx, `SELECT batchq.rfc3339(x) FROM unnest(ARRAY['0001-01-01T00:00:00+01:00',
			'0001-01-01T00:00:00Z', '0002-06-01T00:00:00Z', '0001-06-01 BC', '0002-06-01 BC']::timestamptz[]) x`)
		require.NoError(t, err)
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		var want []string
		for _, w := range []time.Time{time.Date(0, 12, 31, 23, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 6, 1, 0, 0, 0, 0, time.UTC)} {
			want = append(want, w.Format(time.RFC3339Nano))
		}
		require.Equal(t, want, got)

		msg := sqlErr(t, `SELECT * FROM batchq.complete('q', ARRAY[1]::bigint[], NULL, NULL, NULL)`)
		require.Contains(t, msg, "tokens: must hold one lease token per id (got null for 1)")
		msg = sqlErr(t, `SELECT * FROM batchq.cancel(1, repeat('x', 4097))`)
		require.Contains(t, msg, "reason: must be at most 4096 bytes (got 4097)")
	})

	t.Run("a name no queue can have is refused as such, jobs or none", func(t *testing.T) {
		for _, jobs := range []string{`[]`, `[{"tenant": "t", "cost": 1}]`} {
			msg := sqlErr(t, `SELECT * FROM batchq.enqueue_jobs('bad name', $1::jsonb)`, jobs)
			require.Contains(t, msg, "queue: must name a queue", jobs)
			require.Contains(t, msg, "SQLSTATE BQ100", jobs)
		}
	})

	t.Run("a claim from no such queue is refused, not answered with nothing to do", func(t *testing.T) {
		msg := sqlErr(t, `SELECT * FROM batchq.claim('nosuch', 10, 'w', 1000)`)
		require.Contains(t, msg, `batchq: unknown queue: "nosuch"`)
		require.Contains(t, msg, "BQ201")
		_, err := b.client.Claim(b.ctx, "nosuch", &queue.ClaimOpts{Limit: 1})
		require.ErrorIs(t, err, queue.ErrUnknownQueue)
		require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "paused"}))
		_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "paused", Tenant: "t", Cost: 1})
		require.NoError(t, err)
		_, err = b.client.PauseQueue(b.ctx, "paused")
		require.NoError(t, err)
		jobs, err := b.client.Claim(b.ctx, "paused", &queue.ClaimOpts{Limit: 1})
		require.NoError(t, err, "a paused queue is there: its claims take nothing")
		require.Empty(t, jobs)
	})

	t.Run("a refusal counts every waiting job of a tenant whose bound was lowered below them", func(t *testing.T) {
		b.enqueueN(t, "lowered", 3, 1)
		_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{{Queue: "q", Tenant: "lowered", Cost: 1, Delay: time.Hour},
			{Queue: "q", Tenant: "lowered", Cost: 1, Delay: time.Hour}})
		require.NoError(t, err)
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "lowered", Weight: 1, MaxQueued: 1}))
		_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "q", Tenant: "lowered", Cost: 1})
		var full *queue.QueueFullError
		require.ErrorAs(t, err, &full)
		require.Equal(t, queue.QueueFullError{Queue: "q", Tenant: "lowered", Bound: 1, Queued: 5, Adding: 1}, *full)
		msg := sqlErr(t, `SELECT * FROM batchq.enqueue_job(queue => 'q', tenant => 'lowered', cost => 1)`)
		require.Contains(t, msg, `has 5 queued jobs`)
	})

	t.Run("a run listed twice fails once, as first listed", func(t *testing.T) {
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "q", Tenant: "twice", Cost: 1})
		require.NoError(t, err)
		var id int64
		var token [16]byte
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id, lease_token FROM batchq.claim('q', 10, 'w', 9223372036854775807)
			WHERE tenant = 'twice'`).Scan(&id, &token))
		rows, err := b.pool.Query(b.ctx, `SELECT outcome FROM batchq.fail('q', ARRAY[$1, $1]::bigint[], ARRAY[$2, $2]::uuid[],
			ARRAY['first', 'second'], ARRAY[now() + interval '1 minute', now() + interval '1 minute'], ARRAY[false, true])`, id, token)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"retrying"}, got)
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'retrying' AND last_error = 'first'`, id))
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1`, id))
	})
}

// What a worker reports is stored within the database's limits, never
// refused for its size or its bytes: an error of 4,095 bytes ending in a
// two-byte character, and a result of 2 MiB of quotes, which as JSON text
// would be twice that.
func TestWhatAWorkerReportsFitsTheDatabasesLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	c, err := queue.NewClient(b.pool, queue.Config{MaxResultBytes: queue.MaxResultBytes})
	require.NoError(t, err)
	b.enqueueN(t, "t", 2, 1)
	jobs, err := c.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	long := strings.Repeat("a", 4095) + "é"
	retrying, err := c.Fail(b.ctx, jobs[0], errors.New(long), &queue.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.True(t, retrying)
	require.Equal(t, int64(4095), b.scalar(t, `SELECT octet_length(last_error) FROM batchq.jobs WHERE id = $1`, jobs[0].ID))

	require.NoError(t, c.Complete(b.ctx, jobs[1], queue.Result{Output: []byte(strings.Repeat(`"`, 2<<20))}))
	var size int64
	var truncated bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT octet_length(result::text), (result->>'truncated')::bool
		FROM batchq.outcomes WHERE job_id = $1`, jobs[1].ID).Scan(&size, &truncated))
	require.True(t, truncated)
	require.LessOrEqual(t, size, int64(queue.MaxResultBytes))
	require.Greater(t, size, int64(queue.MaxResultBytes/4), "the summary keeps as much of the head as fits")
}

// A worker's name is a name: at most 256 bytes, as the database keeps it,
// of UTF-8 (which the database takes) without control characters. A name
// the database refused would fail every claim, and the pool keep trying.
func TestWorkerNameIsBounded(t *testing.T) {
	t.Parallel()
	c, err := queue.NewClient(pgtest.New(t), queue.Config{})
	require.NoError(t, err)
	require.NoError(t, c.CreateQueue(t.Context(), queue.QueueConfig{Name: "q"}))
	for name, rule := range map[string]string{
		strings.Repeat("w", 257): "Name must be at most 256 bytes (got 257)",
		"w\xff\xfe":              "Name must be valid UTF-8",
		"w\tx":                   `Name must not contain control characters (got "w\tx")`,
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err = c.Work(ctx, queue.WorkerConfig{Queue: "q", Name: name,
			Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) { return queue.Result{}, nil }})
		cancel()
		require.ErrorContains(t, err, rule)
	}
}

// claimRun claims the next job of tenant through the SQL API and returns its
// id and lease token, as a worker in another language holds them.
func claimRun(t *testing.T, b *testBundle, tenant string) (int64, [16]byte) {
	t.Helper()
	var id int64
	var token [16]byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id, lease_token FROM batchq.claim($1, 100, 'w', 9223372036854775807)
		WHERE tenant = $2`, b.queue, tenant).Scan(&id, &token))
	return id, token
}

// claimTwoRuns enqueues two jobs of tenant, of these costs, and claims
// them in one claim: the first row the claim returned, the other job, and
// the claim's token.
func claimTwoRuns(t *testing.T, b *testBundle, tenant string, cost1, cost2 int64) (first, second int64, token [16]byte) {
	t.Helper()
	b.enqueue(t, tenant, cost1)
	b.enqueue(t, tenant, cost2)
	first, token = claimRun(t, b, tenant)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM batchq.jobs WHERE tenant = $1 AND id <> $2`, tenant, first).Scan(&second))
	return first, second, token
}

// requireRefused checks that err is a worker call's refusal of an argument:
// BQ101 naming the field, with the message "batchq: <call>: <field>:
// <rule>", as docs/sql-api.md's Errors describe it.
func requireRefused(t *testing.T, err error, call, field, rule string) {
	t.Helper()
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, rule)
	require.Equal(t, "BQ101", pe.Code, rule)
	require.Equal(t, field, pe.ColumnName, rule)
	require.Equal(t, "batchq: "+call+": "+field+": "+rule, pe.Message)
}

// A run listed twice in one complete is finished once, as first listed:
// one outcome, one correction, and no lease reported lost.
func TestCompleteOfARunListedTwiceFinishesItOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "twice", 10)
	id, token := claimRun(t, b, "twice")
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM batchq.complete('q', ARRAY[$1, $1]::bigint[], ARRAY[$2, $2]::uuid[],
		ARRAY[4, 7]::bigint[], ARRAY['"first"', '"second"'])`, id, token)
	require.NoError(t, err)
	lost, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes
		WHERE job_id = $1 AND outcome = 'succeeded' AND actual_cost = 4 AND result = '"first"'`, id))
	require.Equal(t, int64(-6), b.scalar(t, `SELECT sum(delta) FROM batchq.ledger_adjustments WHERE tenant = 'twice'`))

	// Listed twice again, the finished run is one run whose lease is lost.
	rows, err = b.pool.Query(b.ctx, `SELECT id FROM batchq.complete('q', ARRAY[$1, $1]::bigint[], ARRAY[$2, $2]::uuid[],
		NULL, NULL)`, id, token)
	require.NoError(t, err)
	lost, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{id}, lost)
}

// complete's actual costs and results pair with the ids by position: arrays
// of another length are refused by name, and one whose subscripts start
// elsewhere than 1 still gives each job its own.
func TestCompletePairsCostsAndResultsWithTheirIds(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	first, second, token := claimTwoRuns(t, b, "pair", 10, 30)

	for _, c := range []struct{ costs, results, field, rule string }{
		{`ARRAY[5]::bigint[]`, `NULL`, "actual_costs", "must hold one element per id, or be NULL (got 1 for 2)"},
		{`ARRAY[5, 7, 8]::bigint[]`, `NULL`, "actual_costs", "must hold one element per id, or be NULL (got 3 for 2)"},
		{`NULL`, `ARRAY['1']`, "results", "must hold one element per id, or be NULL (got 1 for 2)"},
		{`NULL`, `'{}'::text[]`, "results", "must hold one element per id, or be NULL (got 0 for 2)"},
	} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.complete('q', ARRAY[$1, $2]::bigint[], ARRAY[$3, $3]::uuid[], `+
			c.costs+`, `+c.results+`)`, first, second, token)
		requireRefused(t, err, "complete", c.field, c.rule)
	}
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes`), "nothing written")

	_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.complete('q', ARRAY[$1, $2]::bigint[], ARRAY[$3, $3]::uuid[],
		'[0:1]={5,70}'::bigint[], '[0:1]={"\"a\"","\"b\""}'::text[])`, first, second, token)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.outcomes
		WHERE (job_id, actual_cost, result) IN (($1, 5, '"a"'), ($2, 70, '"b"'))`, first, second))
}

// A result complete cannot store as jsonb is refused by name (BQ101, field
// results, its element), not with jsonb's own error, and writes nothing.
func TestCompleteRefusesAResultThatIsNotJSONByName(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	first, second, token := claimTwoRuns(t, b, "json", 10, 10)
	for _, c := range []struct{ result, why string }{
		{`not json`, `invalid input syntax for type json: Token "not" is invalid.`},
		{`[`, `invalid input syntax for type json: The input string ended unexpectedly.`},
		{`"\u0000"`, `unsupported Unicode escape sequence: \u0000 cannot be converted to text.`},
		{`"\ud800"`, `invalid input syntax for type json: Unicode low surrogate must follow a high surrogate.`},
		{`1e1000000`, `value overflows numeric format`},
	} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.complete('q', ARRAY[$1, $2]::bigint[], ARRAY[$3, $3]::uuid[],
			NULL, ARRAY['"fine"', $4])`, first, second, token, c.result)
		requireRefused(t, err, "complete", "results", "element 2: must be JSON that jsonb can store, or empty ("+c.why+")")
	}
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes`), "nothing written")
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`))
}

// release refuses its delays naming the element and what it got, as fail
// does, and leaves the run as it was.
func TestReleaseNamesTheDelayItRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "r", 10)
	id, token := claimRun(t, b, "r")
	for _, c := range []struct{ delays, rule string }{
		{`ARRAY[0, 0]::bigint[]`, "must hold one delay per id (got 2 for 1)"},
		{`NULL::bigint[]`, "must hold one delay per id (got null for 1)"},
		{`ARRAY[-1]::bigint[]`, "element 1: must be in 0..86400000000 microseconds, 0s..24h (got -1)"},
		{`ARRAY[86400000001]::bigint[]`, "element 1: must be in 0..86400000000 microseconds, 0s..24h (got 86400000001)"},
		{`ARRAY[NULL]::bigint[]`, "element 1: must be in 0..86400000000 microseconds, 0s..24h (got null)"},
	} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.release('q', ARRAY[$1]::bigint[], ARRAY[$2]::uuid[], `+c.delays+`)`, id, token)
		requireRefused(t, err, "release", "delays", c.rule)
	}
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'running'`, id))
}

// fail names the array a refusal is about, and its element: not "errors"
// for a retry_at or final missing.
func TestFailNamesTheArgumentItRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "f", 10)
	id, token := claimRun(t, b, "f")
	for _, c := range []struct{ errors, retryAt, final, field, rule string }{
		{`ARRAY['e', 'e']`, `ARRAY[now()]`, `ARRAY[false]`, "errors", "must hold one element per id (got 2 for 1)"},
		{`ARRAY['e']`, `NULL`, `ARRAY[false]`, "retry_at", "must hold one element per id (got null for 1)"},
		{`ARRAY['e']`, `ARRAY[now()]`, `'{}'::boolean[]`, "final", "must hold one element per id (got 0 for 1)"},
		{`ARRAY[repeat('x', 4097)]`, `ARRAY[now()]`, `ARRAY[false]`, "errors", "element 1: must be at most 4096 bytes (got 4097)"},
		{`ARRAY['e']`, `ARRAY[NULL]::timestamptz[]`, `ARRAY[false]`, "retry_at", "element 1: must not be null"},
		{`ARRAY['e']`, `ARRAY[now()]`, `ARRAY[NULL]::boolean[]`, "final", "element 1: must not be null"},
	} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.fail('q', ARRAY[$1]::bigint[], ARRAY[$2]::uuid[], `+
			c.errors+`, `+c.retryAt+`, `+c.final+`)`, id, token)
		requireRefused(t, err, "fail", c.field, c.rule)
	}
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'running'`, id))
}

// The maintenance calls refuse a queue that does not exist, as a claim
// does (BQ201), and a name no queue can have by its rule (BQ100): a worker
// or a cron job in another language with its queue's name wrong hears of it
// rather than maintaining nothing for ever. Maintain says ErrUnknownQueue.
func TestMaintenanceRefusesNoSuchQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, call := range []struct{ name, sql string }{
		{"rescue", `SELECT * FROM batchq.rescue($1, 10)`},
		{"expire", `SELECT * FROM batchq.expire($1, 10)`},
		{"requeue", `SELECT batchq.requeue($1, 10)`},
		{"due_schedules", `SELECT * FROM batchq.due_schedules($1, NULL, 10)`},
		{"apply_adjustments", `SELECT batchq.apply_adjustments($1)`},
	} {
		_, err := b.pool.Exec(b.ctx, call.sql, "nosuch")
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, call.name)
		require.Equal(t, "BQ201", pe.Code, call.name)
		require.Equal(t, `batchq: unknown queue: "nosuch"`, pe.Message, call.name)
		require.JSONEq(t, `{"queue": "nosuch"}`, pe.Detail, call.name)

		_, err = b.pool.Exec(b.ctx, call.sql, "bad name")
		require.ErrorAs(t, err, &pe, call.name)
		require.Equal(t, "BQ100", pe.Code, call.name)
		require.Equal(t, "queue", pe.ColumnName, call.name)
		require.Contains(t, pe.Message, "batchq: "+call.name+": queue: must name a queue", call.name)

		_, err = b.pool.Exec(b.ctx, call.sql, b.queue)
		require.NoError(t, err, call.name)
	}

	_, err := b.client.Maintain(b.ctx, "nosuch")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	require.EqualError(t, err, `batchq: unknown queue: "nosuch"`)
	_, err = b.client.DeleteQueue(b.ctx, b.queue)
	require.NoError(t, err)
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.ErrorIs(t, err, queue.ErrUnknownQueue, "a queue deleted is gone for its maintenance too")
}

// hourlySchedule creates schedule "hourly" in b's queue and returns its next
// tick.
func (b *testBundle) hourlySchedule(t *testing.T) time.Time {
	t.Helper()
	require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
		Name: "hourly", Queue: b.queue, Tenant: "acme", Cost: 1, Cron: "@hourly",
	}))
	s, err := b.client.GetSchedule(b.ctx, "hourly")
	require.NoError(t, err)
	return s.NextRunAt
}

// fire_schedule refuses a NULL due tick, which would pass for any schedule's
// next tick and fire it whenever called, and a NULL enqueue, which was taken
// for a skip: each by name, with nothing fired or moved.
func TestFireScheduleRefusesNullArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	due := b.hourlySchedule(t)

	_, err := b.pool.Exec(b.ctx, `SELECT batchq.fire_schedule('hourly', NULL, now(), true, now() + interval '1 minute')`)
	requireRefused(t, err, "fire_schedule", "due", "must be the schedule's next tick, as due_schedules gave it (got null)")
	_, err = b.pool.Exec(b.ctx, `SELECT batchq.fire_schedule('hourly', $1::timestamptz, $1::timestamptz, NULL, $1::timestamptz + interval '1 hour')`, due)
	requireRefused(t, err, "fire_schedule", "enqueue",
		"must be true (enqueue the tick's job) or false (skip the tick) (got null)")
	// A NULL name is an argument missing, not a schedule not found.
	_, err = b.pool.Exec(b.ctx, `SELECT batchq.fire_schedule(NULL, $1::timestamptz, $1::timestamptz, true, $1::timestamptz + interval '1 hour')`, due)
	requireRefused(t, err, "fire_schedule", "name", "must name a schedule (got null)")
	_, err = b.pool.Exec(b.ctx, `SELECT batchq.schedule_error(NULL, $1::timestamptz, 'why')`, due)
	requireRefused(t, err, "schedule_error", "name", "must name a schedule (got null)")

	s, err := b.client.GetSchedule(b.ctx, "hourly")
	require.NoError(t, err)
	require.True(t, due.Equal(s.NextRunAt), "its next tick stays %s (got %s)", due, s.NextRunAt)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.schedules WHERE last_run_at IS NOT NULL`))
}

// fire_schedule refuses a schedule that does not exist (BQ204), which it
// answered with NULL, as when another maintainer had fired the tick: a
// caller with the name wrong would fire nothing for ever and never hear why.
// A tick already fired is still NULL.
func TestFireScheduleRefusesNoSuchSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	due := b.hourlySchedule(t)

	const fire = `SELECT batchq.fire_schedule($1, $2::timestamptz, $2::timestamptz, true, $2::timestamptz + interval '1 hour')`
	_, err := b.pool.Exec(b.ctx, fire, "nosuch", due)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "BQ204", pe.Code)
	require.Equal(t, `batchq: schedule not found: "nosuch"`, pe.Message)
	require.JSONEq(t, `{"schedule": "nosuch"}`, pe.Detail)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))

	var id *int64
	require.NoError(t, b.pool.QueryRow(b.ctx, fire, "hourly", due.Add(-time.Hour)).Scan(&id))
	require.Nil(t, id, "a tick that is not the schedule's next: another maintainer fired it")
	require.NoError(t, b.pool.QueryRow(b.ctx, fire, "hourly", due).Scan(&id))
	require.NotNil(t, id)
}

// schedule_error refuses what it cannot record (a NULL due tick, an empty
// reason) by name, and a schedule that does not exist with BQ204; it writes
// only for the schedule's next tick, once.
func TestScheduleErrorRecordsOnlyForTheDueTick(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	due := b.hourlySchedule(t)

	const record = `SELECT batchq.schedule_error($1, $2::timestamptz, $3)`
	_, err := b.pool.Exec(b.ctx, record, "hourly", nil, "why")
	requireRefused(t, err, "schedule_error", "due", "must be the schedule's next tick, as due_schedules gave it (got null)")
	for _, why := range []any{nil, ""} {
		_, err = b.pool.Exec(b.ctx, record, "hourly", due, why)
		requireRefused(t, err, "schedule_error", "error", "must say why the tick waits (got none)")
	}
	_, err = b.pool.Exec(b.ctx, record, "hourly", due, strings.Repeat("x", 4097))
	requireRefused(t, err, "schedule_error", "error", "must be at most 4096 bytes (got 4097)")
	_, err = b.pool.Exec(b.ctx, record, "nosuch", due, "why")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "BQ204", pe.Code)

	var wrote bool
	require.NoError(t, b.pool.QueryRow(b.ctx, record, "hourly", due.Add(-time.Hour), "why").Scan(&wrote))
	require.False(t, wrote, "not the schedule's next tick")
	require.NoError(t, b.pool.QueryRow(b.ctx, record, "hourly", due, "why").Scan(&wrote))
	require.True(t, wrote)
	require.NoError(t, b.pool.QueryRow(b.ctx, record, "hourly", due, "why").Scan(&wrote))
	require.False(t, wrote, "already says so")
	s := b.schedule(t, "hourly")
	require.Equal(t, "why", s.LastError)
	require.True(t, due.Equal(s.NextRunAt))
}

// console_queued's limit bounds how many queued jobs it reads a tenant: one
// below 1 is refused by name, not with LIMIT's own error, and NULL, which
// LIMIT takes for none, is refused too rather than read every job.
func TestConsoleQueuedRefusesALimitOutOfRange(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "acme", 3, 1)
	for _, c := range []struct {
		limit any
		got   string
	}{{int64(-1), "-1"}, {int64(0), "0"}, {nil, "null"}} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.console_queued($1, NULL, $2::bigint)`, b.queue, c.limit)
		requireRefused(t, err, "console_queued", "limit", "must be at least 1 (got "+c.got+")")
	}
	require.Equal(t, int64(2), b.scalar(t, `SELECT queued_jobs FROM batchq.console_queued($1, NULL, 2)`, b.queue))
}

// The reports that take a queue refuse one that does not exist (BQ201) and a
// name no queue can have (BQ100), instead of answering that it holds
// nothing; console_backlog still reads every queue for NULL. The Go reads
// over them say ErrUnknownQueue.
func TestReportsRefuseNoSuchQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "acme", 2, 1)
	// A tenant with settings for every queue, which console_tenant_known
	// took for known in any queue, even one that does not exist.
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "acme", Weight: 2}))
	for _, call := range []struct{ name, sql string }{
		{"console_backlog", `SELECT * FROM batchq.console_backlog($1, NULL)`},
		{"console_backlog", `SELECT * FROM batchq.console_backlog($1, 'acme')`},
		{"console_queued", `SELECT * FROM batchq.console_queued($1, NULL, 10)`},
		{"console_tenant_known", `SELECT batchq.console_tenant_known($1, 'acme')`},
	} {
		_, err := b.pool.Exec(b.ctx, call.sql, "nosuch")
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, call.sql)
		require.Equal(t, "BQ201", pe.Code, call.sql)
		require.Equal(t, `batchq: unknown queue: "nosuch"`, pe.Message, call.sql)

		_, err = b.pool.Exec(b.ctx, call.sql, "bad name")
		require.ErrorAs(t, err, &pe, call.sql)
		require.Equal(t, "BQ100", pe.Code, call.sql)
		require.Equal(t, "queue", pe.ColumnName, call.sql)
		require.Contains(t, pe.Message, "batchq: "+call.name+": queue: must name a queue", call.sql)

		_, err = b.pool.Exec(b.ctx, call.sql, b.queue)
		require.NoError(t, err, call.sql)
	}
	require.Equal(t, int64(2), b.scalar(t, `SELECT sum(queued_span) FROM batchq.console_backlog(NULL, NULL)`),
		"NULL is every queue")
	_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.console_queued(NULL, NULL, 10)`)
	require.ErrorContains(t, err, "console_queued: queue: must name a queue", "console_queued takes one queue")

	_, _, err = b.client.TenantBacklog(b.ctx, "nosuch", "acme")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	_, err = b.client.TenantShares(b.ctx, "nosuch", time.Now().Add(-time.Hour), time.Now(), 5)
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	_, _, err = b.client.TenantBacklog(b.ctx, "bad name", "acme")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
}

// A bulk count or cancel whose window of enqueue times holds no time (its
// two ends swapped, as positional arguments are easily given) is refused by
// name, as `batchq jobs cancel` refuses it, not answered with nothing found
// and nothing cancelled.
func TestJobFilterRefusesAnEmptyWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "acme", 2, 1)
	before, after := "2026-12-01T20:00:00Z", "2026-12-01T21:00:00Z"
	rule := "must be before enqueued_before, or no job matches (got " + after + ", enqueued_before " + before + ")"
	_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.matching_jobs($1, NULL, NULL, $2::timestamptz, $3::timestamptz)`,
		b.queue, before, after)
	requireRefused(t, err, "count jobs", "enqueued_after", rule)
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM batchq.cancel_jobs($1, NULL, NULL, $2::timestamptz, $3::timestamptz)`,
		b.queue, before, after)
	requireRefused(t, err, "cancel jobs", "enqueued_after", rule)
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM batchq.cancel_jobs($1, NULL, NULL, $2::timestamptz, $2::timestamptz)`,
		b.queue, before)
	requireRefused(t, err, "cancel jobs", "enqueued_after",
		"must be before enqueued_before, or no job matches (got "+before+", enqueued_before "+before+")")

	at := time.Now()
	_, err = b.client.CountJobs(b.ctx, queue.JobFilter{Queue: b.queue, EnqueuedBefore: at, EnqueuedAfter: at.Add(time.Hour)})
	var bad *queue.InvalidJobError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, "enqueued_after", bad.Field)

	// One end alone, or a window that holds the jobs, still counts them.
	n, err := b.client.CountJobs(b.ctx, queue.JobFilter{Queue: b.queue, EnqueuedBefore: at.Add(time.Hour),
		EnqueuedAfter: at.Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, int64(2), n.Queued)
	require.Equal(t, int64(2), b.scalar(t, `SELECT jobs FROM batchq.matching_jobs($1, NULL, NULL, NULL, now() - interval '1 hour')
		WHERE state = 'queued'`, b.queue))
}

// The finishing calls refuse a queue that does not exist (BQ201), as a claim
// does, rather than report each run's lease lost: a worker in another
// language with its queue's name wrong hears that, not that every job it
// ran was taken from it. The run stays as it was, and the Go client says
// ErrUnknownQueue; a lost lease in a queue that exists is still one.
func TestFinishRefusesNoSuchQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "acme", 10)
	id, token := claimRun(t, b, "acme")
	calls := []struct{ name, sql string }{
		{"complete", `SELECT * FROM batchq.complete($1, $2, $3, NULL, NULL)`},
		{"fail", `SELECT * FROM batchq.fail($1, $2, $3, array_fill('e'::text, ARRAY[cardinality($2::bigint[])]),
			array_fill(now(), ARRAY[cardinality($2::bigint[])]), array_fill(false, ARRAY[cardinality($2::bigint[])]))`},
		{"release", `SELECT * FROM batchq.release($1, $2, $3, array_fill(0::bigint, ARRAY[cardinality($2::bigint[])]))`},
		{"heartbeat", `SELECT * FROM batchq.heartbeat($1, $2, $3)`},
	}
	// A run of a queue that exists, and none at all.
	for _, runs := range []struct {
		ids    []int64
		tokens [][16]byte
	}{{[]int64{id}, [][16]byte{token}}, {[]int64{}, [][16]byte{}}} {
		for _, call := range calls {
			_, err := b.pool.Exec(b.ctx, call.sql, "nosuch", runs.ids, runs.tokens)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe, "%s of %v", call.name, runs.ids)
			require.Equal(t, "BQ201", pe.Code, call.name)
			require.Equal(t, `batchq: unknown queue: "nosuch"`, pe.Message, call.name)
			require.JSONEq(t, `{"queue": "nosuch"}`, pe.Detail, call.name)
		}
	}
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'running'`, id))

	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Empty(t, jobs)
	b.enqueue(t, "acme", 10)
	jobs, err = b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	elsewhere := *jobs[0]
	elsewhere.Queue = "nosuch"
	require.ErrorIs(t, b.client.Complete(b.ctx, &elsewhere, queue.Result{}), queue.ErrUnknownQueue)
	_, err = b.client.Fail(b.ctx, &elsewhere, errors.New("boom"), nil)
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	require.ErrorIs(t, b.client.Release(b.ctx, &elsewhere, 0), queue.ErrUnknownQueue)
	err = b.client.Heartbeat(b.ctx, &elsewhere)
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	require.EqualError(t, err, `batchq: unknown queue: "nosuch"`)

	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))
	require.ErrorIs(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}), queue.ErrLeaseLost)
	_, err = b.client.Fail(b.ctx, jobs[0], errors.New("boom"), nil)
	require.ErrorIs(t, err, queue.ErrLeaseLost)
	require.ErrorIs(t, b.client.Release(b.ctx, jobs[0], 0), queue.ErrLeaseLost)
	require.ErrorIs(t, b.client.Heartbeat(b.ctx, jobs[0]), queue.ErrLeaseLost)
}

// tenant_usage refuses a window that holds no time by name, as
// matching_jobs and cancel_jobs refuse theirs: its two ends swapped or
// equal, or either NULL, which matched nothing and so answered that no job
// finished. TenantUsage says which, as an *InvalidJobError.
func TestTenantUsageRefusesAnEmptyWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "acme", 10)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))

	early, late := "2026-12-01T20:00:00Z", "2026-12-01T21:00:00Z"
	for _, c := range []struct {
		since, until any
		field, rule  string
	}{
		{nil, late, "since", "must not be null, or no job matches"},
		{early, nil, "until", "must not be null, or no job matches"},
		{nil, nil, "since", "must not be null, or no job matches"},
		{late, early, "since", "must be before until, or no job matches (got " + late + ", until " + early + ")"},
		{early, early, "since", "must be before until, or no job matches (got " + early + ", until " + early + ")"},
	} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM batchq.tenant_usage($1::timestamptz, $2::timestamptz)`, c.since, c.until)
		requireRefused(t, err, "tenant_usage", c.field, c.rule)
	}

	at := time.Now()
	_, err = b.client.TenantUsage(b.ctx, at, at.Add(-time.Hour), "")
	var bad *queue.InvalidJobError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, "since", bad.Field)
	require.Contains(t, bad.Rule, "must be before until")

	rows, err := b.client.TenantUsage(b.ctx, at.Add(-time.Hour), at.Add(time.Hour), "")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, int64(1), rows[0].Succeeded)
}
