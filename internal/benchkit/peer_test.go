package benchkit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
	"github.com/batchq/batchq/internal/pgtest"
)

// fakePeer is a queue of one table that speaks benchkit.Peer, so that the
// peer protocol batchq-river serves is tested without River. lose drops the
// last job of every bulk call.
type fakePeer struct{ lose bool }

func (fakePeer) Prepare(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS peer_job (
		id bigserial PRIMARY KEY, tenant text NOT NULL, cost bigint NOT NULL, done boolean NOT NULL DEFAULT false)`)
	return err
}

func (fakePeer) Table() string { return "peer_job" }

func (fakePeer) Reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE peer_job")
	return err
}

func (p fakePeer) Inserter(pool *pgxpool.Pool, single bool) func(ctx context.Context, tenants []string, costs []int64) error {
	insert := `INSERT INTO peer_job (tenant, cost) SELECT * FROM unnest($1::text[], $2::bigint[])`
	if single {
		return func(ctx context.Context, tenants []string, costs []int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, tenants, costs)
				return err
			})
		}
	}
	return func(ctx context.Context, tenants []string, costs []int64) error {
		if p.lose {
			tenants, costs = tenants[:len(tenants)-1], costs[:len(costs)-1]
		}
		_, err := pool.Exec(ctx, insert, tenants, costs)
		return err
	}
}

func (fakePeer) Tenants(ctx context.Context, pool *pgxpool.Pool) (jobs, tenants int, err error) {
	err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT tenant) FROM peer_job`).Scan(&jobs, &tenants)
	return jobs, tenants, err
}

func (fakePeer) Completed(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM peer_job WHERE done`).Scan(&n)
	return n, err
}

func (fakePeer) Drainer(ctx context.Context, dbURL, _ string, _, batch int) (func(context.Context) (benchkit.Drained, error), func(), error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) (benchkit.Drained, error) {
		var d benchkit.Drained
		for {
			tag, err := pool.Exec(ctx, `UPDATE peer_job SET done = true WHERE id IN (
				SELECT id FROM peer_job WHERE NOT done ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)`, batch)
			if err != nil || tag.RowsAffected() == 0 {
				return d, err
			}
			d.Jobs += int(tag.RowsAffected())
		}
	}, pool.Close, nil
}

// peerMain runs one command of a peer program and returns the lines it
// printed.
// stdin is written to the program's standard input, which stays open, as
// a parent's does, until the test ends.
func peerMain(t *testing.T, url string, p benchkit.Peer, stdin string, args ...string) ([]map[string]any, error) {
	t.Helper()
	r, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	go func() { _, _ = io.WriteString(w, stdin) }()
	var out bytes.Buffer
	err := benchkit.PeerMain(context.Background(), url, args, r, &out, p)
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		lines = append(lines, m)
	}
	return lines, err
}

// A peer program seeds a backlog, times enqueues of every mode with the
// tenants batchq's own get (and checks they all arrived), drains as a
// worker process does, and counts what it completed.
func TestPeerProtocol(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	p := fakePeer{}
	_, err := peerMain(t, url, p, "", "prepare")
	require.NoError(t, err)

	out, err := peerMain(t, url, p, "", "seed", "-jobs", "300", "-tenants", "7", "-max-cost", "10", "-seed", "1")
	require.NoError(t, err)
	require.Equal(t, 300.0, out[0]["jobs"])

	out, err = peerMain(t, url, p, "go\n", "bench-worker", "-system", "fake", "-claimers", "1", "-batch", "40")
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, true, out[0]["ready"])
	require.Equal(t, 300.0, out[1]["jobs"])
	require.GreaterOrEqual(t, out[1]["end_ns"].(float64), out[1]["start_ns"].(float64))
	require.Positive(t, out[1]["start_ns"])
	out, err = peerMain(t, url, p, "", "completed")
	require.NoError(t, err)
	require.Equal(t, 300.0, out[0]["jobs"])

	for _, args := range [][]string{
		{"-mode", benchkit.ModeSingle, "-jobs", "20", "-per", "1"},
		{"-mode", benchkit.ModeBulk, "-concurrency", "2", "-jobs", "250", "-per", "100"},
		{"-mode", benchkit.ModeTxn, "-jobs", "50", "-per", "10"},
	} {
		out, err := peerMain(t, url, p, "", append([]string{"enqueue", "-tenants", "7"}, args...)...)
		require.NoError(t, err, "%v", args)
		require.Positive(t, out[0]["elapsed_ns"], "%v", args)
	}
	// Each of the 5 transactions of 10 jobs was one tenant's.
	var tenants int
	require.NoError(t, pgxQueryRow(t, url, `SELECT count(DISTINCT tenant) FROM peer_job`, &tenants))
	require.Equal(t, 5, tenants)

	// A peer that loses jobs is caught.
	_, err = peerMain(t, url, fakePeer{lose: true}, "", "enqueue", "-mode", benchkit.ModeBulk, "-jobs", "250", "-per", "100", "-tenants", "7")
	require.ErrorContains(t, err, "247 rows of 7 tenants for 250 jobs of 7")

	_, err = peerMain(t, url, p, "", "vacuum")
	require.ErrorContains(t, err, `unknown command "vacuum"`)
}

func pgxQueryRow(t *testing.T, url, sql string, dst ...any) error {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	return conn.QueryRow(context.Background(), sql).Scan(dst...)
}
