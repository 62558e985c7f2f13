package fifo_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/internal/pgtest"
)

// columns returns a table's columns as "name type nullability", in order.
func columns(t *testing.T, pool *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	return strings1(t, pool, `
		SELECT column_name || ' ' || udt_schema || '.' || udt_name || ' ' || is_nullable
		FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
		schema, table)
}

// strings1 returns the one text column of a query's rows.
func strings1(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		out = append(out, c)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out, "%s %v", sql, args)
	return out
}

// indexes returns a table's index definitions with the schema names taken
// out, sorted, and the table's own storage options first.
func indexes(t *testing.T, pool *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	return strings1(t, pool, `
		SELECT 'table ' || coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = ($1 || '.' || $2)::regclass
		UNION ALL
		(SELECT replace(replace(pg_get_indexdef(i.indexrelid), 'batchq_fifo.', ''), 'batchq.', '')
		        || coalesce(' ' || array_to_string(c.reloptions, ','), '')
		 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		 WHERE i.indrelid = ($1 || '.' || $2)::regclass ORDER BY 1)`, schema, table)
}

// unnamed returns index definitions without their indexes' names, sorted.
func unnamed(defs []string) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = indexName.ReplaceAllString(d, "INDEX ON")
	}
	slices.Sort(out)
	return out
}

var indexName = regexp.MustCompile(`INDEX \S+ ON`)

// The FIFO baseline stores what batchq stores: a change to batchq's job or
// outcome rows, or to their indexes, that the baseline does not follow would
// make the drain's comparison one of rows instead of one of claim orders.
func TestBaselineKeepsBatchqsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	_, err := fifo.Open(ctx, pool)
	require.NoError(t, err)

	// Less the columns that hold a job's DRR key.
	var want []string
	for _, c := range columns(t, pool, "batchq", "jobs") {
		switch strings.Fields(c)[0] {
		case "round", "pos", "cum", "seq":
			continue
		}
		want = append(want, c)
	}
	require.Equal(t, want, columns(t, pool, "batchq_fifo", "jobs"))
	require.Equal(t, columns(t, pool, "batchq", "outcomes"), columns(t, pool, "batchq_fifo", "outcomes"))

	// The outcomes table is made LIKE batchq's, which names its indexes
	// by their columns.
	require.Equal(t, unnamed(indexes(t, pool, "batchq", "outcomes")), unnamed(indexes(t, pool, "batchq_fifo", "outcomes")))
	// Less the indexes that serve fairness: the claim's key is the arrival
	// order, and there is no tenant's queue to walk.
	wantJobs := []string{}
	for _, d := range indexes(t, pool, "batchq", "jobs") {
		switch {
		case strings.Contains(d, "jobs_tenant_queue"):
		case strings.Contains(d, "jobs_claim"):
			wantJobs = append(wantJobs, strings.Replace(d, "(queue, round, pos, seq)", "(queue, enqueued_at, id)", 1))
		default:
			wantJobs = append(wantJobs, d)
		}
	}
	require.Equal(t, wantJobs, indexes(t, pool, "batchq_fifo", "jobs"))
}

// Claims come in arrival order under one token per claim; a completion
// finishes only the jobs its token still holds, each with one outcome row.
func TestQueueClaimsInOrderAndCompletesByToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	f, err := fifo.Open(ctx, pool)
	require.NoError(t, err)
	require.NoError(t, f.Insert(ctx, []string{"a", "b", "a", "c"}, []int64{1, 2, 3, 4}))

	first, err := f.Claim(ctx, 3, "w")
	require.NoError(t, err)
	require.Len(t, first, 3)
	second, err := f.Claim(ctx, 3, "w")
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.Equal(t, "c", second[0].Tenant)
	for _, j := range first {
		require.Equal(t, first[0].LeaseToken, j.LeaseToken)
		require.Less(t, j.ID, second[0].ID)
	}
	require.NotEqual(t, first[0].LeaseToken, second[0].LeaseToken)

	// The second claim's token does not finish the first claim's jobs.
	stale := append([]fifo.Job(nil), first...)
	for i := range stale {
		stale[i].LeaseToken = second[0].LeaseToken
	}
	n, err := f.Complete(ctx, stale)
	require.NoError(t, err)
	require.Zero(t, n)

	n, err = f.Complete(ctx, append(first, second...))
	require.NoError(t, err)
	require.Equal(t, 4, n)
	var outcomes, left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM batchq_fifo.outcomes WHERE outcome = 'succeeded' AND worker = 'w'
		AND attempts = 1 AND first_claimed_at IS NOT NULL), (SELECT count(*) FROM batchq_fifo.jobs)`).Scan(&outcomes, &left))
	require.Equal(t, 4, outcomes)
	require.Zero(t, left)
}

// The claim reaches the queued jobs by its own index, whatever the
// statistics say: claimed by the primary key, with every row queued at the
// last ANALYZE, it stepped over every running row instead.
func TestClaimUsesTheClaimIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	f, err := fifo.Open(ctx, pool)
	require.NoError(t, err)
	tenants, costs := make([]string, 2000), make([]int64, 2000)
	for i := range tenants {
		tenants[i], costs[i] = "t", 1
	}
	require.NoError(t, f.Insert(ctx, tenants, costs))
	_, err = pool.Exec(ctx, `ANALYZE batchq_fifo.jobs`)
	require.NoError(t, err)
	_, err = f.Claim(ctx, 500, "w")
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT * FROM batchq_fifo.claim('fifo', 10, 'w')`)
	require.NoError(t, err)
	// Counted in this backend since its last report to the statistics: the
	// claims above, if they ran here, and this one.
	var claimScans int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('batchq_fifo.jobs_claim'::regclass)`).Scan(&claimScans))
	require.Positive(t, claimScans)
}
