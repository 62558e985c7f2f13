package demo

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/internal/pgtest"
)

// TestRunPlaysTheStory plays the story four times as fast for 12 seconds
// against a real server and checks the report's claims against the
// database's own rows: every job is accounted for, the small tenants did
// not wait behind the import, the tokens followed the weights, the jobs
// whose deadline passed are recorded and never reached the provider, and
// the chart is written.
func TestRunPlaysTheStory(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	if testing.Short() {
		t.Skip("plays the demo for 12 seconds")
	}
	name := fmt.Sprintf("batchq_demo_test_%d", rand.Uint64())
	t.Cleanup(func() {
		if err := DropDatabase(context.Background(), server, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	chart := filepath.Join(t.TempDir(), "shares.svg")
	var out bytes.Buffer
	rep, err := Run(context.Background(), Config{
		DatabaseURL: server, DatabaseName: name, Duration: 12 * time.Second, Speed: 4,
		ChartPath: chart, Out: &out, Seed: 3,
	})
	require.NoError(t, err, out.String())
	text := out.String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(text)
		}
	})
	require.Contains(t, text, "batchq demo: final report")
	require.Contains(t, text, "every job accounted for")

	// The database's rows, read here rather than taken from the report.
	cfg, err := pgxpool.ParseConfig(server)
	require.NoError(t, err)
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := context.Background()
	outcomes, err := dbsqlc.New().DemoOutcomes(ctx, pool, queueName)
	require.NoError(t, err)
	left, err := dbsqlc.New().DemoUnfinished(ctx, pool, queueName)
	require.NoError(t, err)

	t.Run("every enqueued job has one outcome or is still queued", func(t *testing.T) {
		require.Equal(t, rep.Enqueued, len(outcomes)+len(left))
		require.True(t, rep.AllAccounted())
		st := newStory(48*time.Second, 3)
		backlogs := 0
		for _, a := range st.initial() {
			backlogs += len(a.Jobs)
		}
		require.GreaterOrEqual(t, rep.Enqueued, backlogs+importJobs, "the backlogs and the import landed")
		require.LessOrEqual(t, rep.Enqueued, st.jobCount())
		for _, j := range left {
			require.NotEqual(t, "running", j.State, "job %d still running after the shutdown", j.ID)
		}
	})

	t.Run("small tenants overtook the import's backlog", func(t *testing.T) {
		// Every small job that ran was claimed while import jobs enqueued
		// before it were still waiting: one FIFO queue would have run those
		// first.
		var imports []time.Time // enqueue times of import jobs, and when they left the queue
		var importLeft []time.Time
		for _, o := range outcomes {
			if o.Tenant == importTenant {
				imports = append(imports, o.EnqueuedAt)
				importLeft = append(importLeft, deref(o.FirstClaimedAt, o.FinishedAt))
			}
		}
		for _, j := range left {
			if j.Tenant == importTenant {
				imports = append(imports, j.EnqueuedAt)
				importLeft = append(importLeft, rep.Stop)
			}
		}
		var small []time.Duration
		for _, o := range outcomes {
			if !slices.Contains(smallTenants, o.Tenant) || o.FirstClaimedAt == nil {
				continue
			}
			small = append(small, o.FirstClaimedAt.Sub(o.EnqueuedAt))
			ahead := 0
			for i, e := range imports {
				if e.Before(o.EnqueuedAt) && importLeft[i].After(*o.FirstClaimedAt) {
					ahead++
				}
			}
			require.Greater(t, ahead, importJobs/2, "job %d of %s was claimed with only %d earlier import jobs waiting", o.JobID, o.Tenant, ahead)
		}
		for _, j := range left {
			if slices.Contains(smallTenants, j.Tenant) {
				small = append(small, rep.Stop.Sub(j.EnqueuedAt))
			}
		}
		require.NotEmpty(t, small)
		slices.Sort(small)
		p95 := small[(len(small)*95+99)/100-1]
		require.Equal(t, p95, rep.Small.P95, "the report's p95 is the nearest rank of the rows'")

		// Their waits are a round or two of the ring; the import's oldest job
		// waited the whole run, and a FIFO queue at the same throughput
		// would have made them wait for the work ahead, minutes of it.
		require.Less(t, 2*p95, rep.ImportOldest, "small tenants' p95 wait %s, the import's oldest %s", p95, rep.ImportOldest)
		require.True(t, rep.SmallTenantsOvertook())
		require.Less(t, 10*p95, rep.FIFO.P50, "FIFO would have kept them waiting %s", rep.FIFO.P50)
	})

	t.Run("tokens followed the weights while the steady tenants were backlogged", func(t *testing.T) {
		require.Greater(t, rep.Backlogged.Length(), 4*time.Second)
		require.Len(t, rep.Shares, 3)
		for _, s := range rep.Shares {
			require.InDelta(t, s.WeightShare, s.Share, 0.07, "%s: share %.3f, weight share %.3f", s.Tenant, s.Share, s.WeightShare)
		}
		// Fair by cost: initech's jobs are ten times smaller, so it ran
		// several times as many of them for the same tokens.
		a, _ := rep.Tenant(importTenant)
		i, _ := rep.Tenant(reindexTenant)
		require.Greater(t, i.Done, 4*a.Done)
	})

	t.Run("expired jobs are recorded and the provider never charged them", func(t *testing.T) {
		expired := 0
		for _, o := range outcomes {
			if o.Outcome == "expired" {
				expired++
				require.Equal(t, digestTenant, o.Tenant, "only newsroom's jobs have short deadlines")
				require.Nil(t, o.ActualCost, "expired job %d has a cost from the provider", o.JobID)
			}
		}
		require.Positive(t, expired)
		require.Equal(t, expired, rep.Expired)
		require.Zero(t, rep.ExpiredCharged, "the provider's own log")
		require.True(t, rep.ExpiredUnspent())
		require.Equal(t, digestJobs, rep.Digests)
		require.Equal(t, digestJobs, rep.DigestsInTime+expired, "each digest ran in time or expired")
	})

	t.Run("the provider and the interactive calls", func(t *testing.T) {
		require.Positive(t, rep.Provider.OK)
		require.Equal(t, rep.Provider.Requests, rep.Provider.OK+rep.Provider.TooManyRequests+rep.Provider.Errors)
		require.Positive(t, rep.Interactive.OK)
		require.Equal(t, rep.Interactive.Calls, rep.Interactive.OK+rep.Interactive.Failed)
		require.LessOrEqual(t, rep.Interactive.WaitP50, rep.Interactive.WaitP99)
	})

	t.Run("the chart is an SVG", func(t *testing.T) {
		b, err := os.ReadFile(chart)
		require.NoError(t, err)
		require.Greater(t, len(b), 1000)
		head := string(b[:min(len(b), 200)])
		require.True(t, strings.HasPrefix(head, "<?xml") || strings.HasPrefix(head, "<svg"), "chart starts %q", head)
		require.Contains(t, string(b), "<svg")
		require.True(t, strings.HasSuffix(strings.TrimSpace(string(b)), "</svg>"))
		for _, who := range []string{importTenant, planTenant, reindexTenant} {
			require.Contains(t, string(b), who, "the legend names %s", who)
		}
	})
}

func deref[T any](p *T, otherwise T) T {
	if p == nil {
		return otherwise
	}
	return *p
}

// TestRunWritesPNG checks the other chart format on a short run.
func TestRunWritesPNG(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	if testing.Short() {
		t.Skip("plays the demo for 3 seconds")
	}
	name := fmt.Sprintf("batchq_demo_test_%d", rand.Uint64())
	t.Cleanup(func() { _ = DropDatabase(context.Background(), server, name) })
	chart := filepath.Join(t.TempDir(), "shares.png")
	_, err := Run(context.Background(), Config{
		DatabaseURL: server, DatabaseName: name, Duration: 3 * time.Second, Speed: 20, ChartPath: chart,
	})
	require.NoError(t, err)
	b, err := os.ReadFile(chart)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")), "not a PNG")
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Check(), "the zero Config plays the default story")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Speed: 0.01}, "speed 0.01"},
		{Config{Speed: 1000}, "speed 1000"},
		{Config{Duration: time.Millisecond}, "duration 1ms"},
		{Config{ChartPath: "chart.gif"}, `chart "chart.gif"`},
		{Config{DatabaseName: "Demo-DB"}, `"Demo-DB"`},
		{Config{DatabaseName: strings.Repeat("a", 64)}, "must be 1-63"},
	} {
		err := tc.cfg.Check()
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
	}
}

// The database is marked as the demo's as soon as it is created, so a run
// cut short leaves one the next run may drop.
func TestFreshDatabaseIsMarkedAtOnce(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	name := fmt.Sprintf("batchq_demo_test_%d", rand.Uint64())
	t.Cleanup(func() { _ = DropDatabase(context.Background(), server, name) })
	ctx := context.Background()
	_, err := freshDatabase(ctx, server, name)
	require.NoError(t, err)
	conn, err := admin(ctx, server, name)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var comment *string
	require.NoError(t, conn.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&comment))
	require.NotNil(t, comment)
	require.Equal(t, Marker, *comment)
}

// Builds before the marker created the default database without it.
func TestMayDrop(t *testing.T) {
	t.Parallel()
	marker, other := Marker, "the shop's orders"
	require.True(t, mayDrop("batchq_demo", nil), "an unmarked batchq_demo from an older build")
	require.True(t, mayDrop("batchq_demo", &marker))
	require.True(t, mayDrop("mine", &marker))
	require.False(t, mayDrop("mine", nil))
	require.False(t, mayDrop("mine", &other))
	require.False(t, mayDrop("batchq_demo", &other), "someone else's comment")
}
