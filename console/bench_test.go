package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// BenchmarkConsolePages fills a database with BATCHQ_CONSOLE_BENCH_TENANTS
// tenants (default 10,000) and BATCHQ_CONSOLE_BENCH_JOBS queued jobs
// (default 1,000,000; three in ten of them one importing tenant's), 100
// running, and 200,000 outcomes in the last hour (55 a second), then serves
// each page (the queue page and its chart over the default 15 minutes, and
// over an hour) and
// reads what every query it ran cost the server: auto_explain logs each
// statement's plan as EXPLAIN (ANALYZE, TIMING OFF) would, with the
// statement's own time but without a clock read per row and plan node,
// which inflates a scan of 200,000 outcomes by a third, and the benchmark
// reports,
// as medians over its iterations, the slowest statement of the page
// (ms/query-max) and the statements' sum (ms/page). With -v and
// BATCHQ_CONSOLE_BENCH_PLANS=1 it logs every statement's plan.
// BENCHMARKS.md has the numbers.
// It needs a superuser (LOAD 'auto_explain'), as the tests' server is.
func BenchmarkConsolePages(b *testing.B) {
	tenants := envInt(b, "BATCHQ_CONSOLE_BENCH_TENANTS", 10_000)
	jobs := envInt(b, "BATCHQ_CONSOLE_BENCH_JOBS", 1_000_000)
	ctx := context.Background()
	url := pgtest.URL(b)
	fill := pgtest.Connect(b, url)
	start := time.Now()
	fillConsoleBench(b, fill, tenants, jobs)
	var inRing int
	require.NoError(b, fill.QueryRow(ctx, `SELECT count(*) FROM batchq.tenant_ring`).Scan(&inRing))
	// The fill names a tenant per ten jobs (i / 10), so (jobs+6)/10 of them
	// at most; with 7919 prime, as many as there are tenants.
	require.Equal(b, min(tenants, (jobs+6)/10), inRing, "tenants with queued jobs")
	b.Logf("filled %d tenants, %d queued jobs and 200,000 outcomes in %s", tenants, jobs, time.Since(start).Round(time.Second))

	// The console's own pool, whose every statement auto_explain reports
	// to this client as a NOTICE.
	var mu sync.Mutex
	var plans []string
	cfg, err := pgxpool.ParseConfig(superURL(b, url))
	require.NoError(b, err)
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.HasPrefix(n.Message, "duration:") {
			mu.Lock()
			plans = append(plans, n.Message)
			mu.Unlock()
		}
	}
	// As `batchq console` opens its pool; BATCHQ_CONSOLE_BENCH_PARALLEL=1
	// keeps the server's parallel workers, to measure what TunePool saves.
	if os.Getenv("BATCHQ_CONSOLE_BENCH_PARALLEL") == "" {
		console.TunePool(cfg)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `LOAD 'auto_explain';
			SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
			SET auto_explain.log_timing = off; SET auto_explain.log_buffers = on;
			SET auto_explain.log_level = 'notice'`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(b, err)
	h, err := console.Handler(client, nil)
	require.NoError(b, err)
	var someJob int64
	require.NoError(b, fill.QueryRow(ctx, `SELECT max(job_id) FROM batchq.outcomes`).Scan(&someJob))

	duration := regexp.MustCompile(`^duration: ([0-9.]+) ms`)
	for _, page := range []struct{ name, path string }{
		{"overview", "/"},
		{"queue", "/queues/q"},
		{"chart", "/queues/q/chart.svg"},
		{"queue-1h", "/queues/q?window=1h"},
		{"chart-1h", "/queues/q/chart.svg?window=1h"},
		{"tenant-importing", "/queues/q/tenants/tenant-00000"},
		{"tenant-small", "/queues/q/tenants/tenant-04242"},
		{"job", "/jobs/" + strconv.FormatInt(someJob, 10)},
	} {
		b.Run(page.name, func(b *testing.B) {
			var worst, sums []float64
			for b.Loop() {
				mu.Lock()
				plans = nil
				mu.Unlock()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, page.path, nil))
				require.Equal(b, http.StatusOK, w.Code, w.Body.String())
				mu.Lock()
				got := slices.Clone(plans)
				mu.Unlock()
				var most, sum float64
				for _, p := range got {
					m := duration.FindStringSubmatch(p)
					require.NotNil(b, m, p)
					ms, err := strconv.ParseFloat(m[1], 64)
					require.NoError(b, err)
					most = max(most, ms)
					sum += ms
					if testing.Verbose() && os.Getenv("BATCHQ_CONSOLE_BENCH_PLANS") != "" {
						b.Logf("%s: %.1f ms\n%s", page.name, ms, p)
					}
				}
				worst, sums = append(worst, most), append(sums, sum)
			}
			// Medians over the iterations: the machine is shared, and one
			// slow iteration says more about it than about the queries.
			b.ReportMetric(median(worst), "ms/query-max")
			b.ReportMetric(median(sums), "ms/page")
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	return n
}

// fillConsoleBench enqueues jobs through batchq.enqueue, a thousand a call,
// claims 100, and writes outcomes straight into the table, in finishing
// order as workers would.
func fillConsoleBench(b *testing.B, pool *pgxpool.Pool, tenants, jobs int) {
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(b, err, sql)
	}
	exec(`INSERT INTO batchq.queues (name, max_per_tenant) VALUES ('q', 1000000)`)
	exec(`INSERT INTO batchq.tenants (name, weight)
		SELECT 'tenant-' || lpad(i::text, 5, '0'), 1 + i % 4 FROM generate_series(0, 99) i`)
	for n := 0; n < jobs; n += 1000 {
		exec(fmt.Sprintf(`SELECT count(*) FROM (SELECT batchq.enqueue('q',
			array_agg(CASE WHEN i %% 10 < 3 THEN 'tenant-00000' ELSE 'tenant-' || lpad(((i / 10 * 7919) %% %d)::text, 5, '0') END ORDER BY i),
			array_fill('k'::text, ARRAY[1000]), array_agg((1 + (i * 7919) %% 1000)::bigint ORDER BY i),
			array_fill(now() + interval '1 day', ARRAY[1000]), array_fill(5, ARRAY[1000]),
			array_fill('{}'::jsonb, ARRAY[1000]), array_fill(NULL::text, ARRAY[1000]))
			FROM generate_series($1::bigint, $1::bigint + 999) i) e`, tenants), n)
	}
	exec(`SELECT count(*) FROM batchq.claim('q', 100, 'bench', 1000000000)`)
	exec(`INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost, attempts,
			max_attempts, deadline, enqueued_at, first_claimed_at, finished_at, error)
		SELECT 100000000 + i, 'q', 'tenant-' || lpad(((i * 7919) % $1)::text, 5, '0'), 'k',
		       (CASE WHEN i % 50 = 0 THEN 'failed' WHEN i % 97 = 0 THEN 'expired' ELSE 'succeeded' END)::batchq.job_outcome,
		       1 + i % 1000, CASE WHEN i % 50 = 0 THEN NULL ELSE 1 + i % 900 END, 1, 5,
		       now() + interval '1 day', f - interval '30 seconds', f - interval '10 seconds', f,
		       CASE WHEN i % 50 = 0 THEN 'provider said 500' END
		FROM generate_series(1, 200000) i, LATERAL (SELECT now() - interval '1 hour' + i * interval '18 milliseconds' AS f) t`, tenants)
	exec(`VACUUM ANALYZE batchq.jobs`)
	// The fill's thousand enqueue calls rewrote each tenant's ring row about
	// a hundred times with autovacuum off, which left 70 MB of dead rows
	// for 10,000 live ones; a live queue's autovacuum keeps reusing that
	// space, so the ring is compacted as the jobs and outcomes are vacuumed.
	exec(`VACUUM FULL ANALYZE batchq.tenant_ring`)
	exec(`VACUUM ANALYZE batchq.outcomes`)
	exec(`ANALYZE`)
}
