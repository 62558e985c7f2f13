// Command batchq-river is River's side of `batchq bench`: River
// (github.com/riverqueue/river) inserted and drained in the same runs, the
// same database and by the same harness (internal/benchkit) as batchq and
// its FIFO baseline. It is a module of its own so that batchq's go.mod never
// names River. Build it with `make bench-river`; `batchq bench drain` and
// `batchq bench enqueue` run it when --systems names river or
// river-default.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/batchq/batchq/internal/benchkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := benchkit.PeerMain(ctx, os.Getenv("DATABASE_URL"), os.Args[1:], os.Stdin, os.Stdout, peer{}); err != nil {
		fmt.Fprintln(os.Stderr, "batchq-river:", err)
		os.Exit(1)
	}
}

// noop is the job: its arguments carry the tenant and cost batchq keeps in
// columns, so both store the same facts.
type noop struct {
	Tenant string `json:"tenant"`
	Cost   int64  `json:"cost"`
}

func (noop) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noop]
}

func (noopWorker) Work(context.Context, *river.Job[noop]) error { return nil }

// peer implements benchkit.Peer with River.
type peer struct{}

func (peer) Prepare(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet()})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func (peer) Table() string { return "river_job" }

func (peer) Reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

// insertClient is a client that only inserts: no queues, no workers.
func insertClient(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet()})
}

func (peer) Inserter(pool *pgxpool.Pool, single bool) func(ctx context.Context, tenants []string, costs []int64) error {
	client, err := insertClient(pool)
	if err != nil {
		return func(context.Context, []string, []int64) error { return err }
	}
	if single {
		// The application's transaction, holding the one Insert.
		return func(ctx context.Context, tenants []string, costs []int64) error {
			for i := range tenants {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := client.InsertTx(ctx, tx, noop{Tenant: tenants[i], Cost: costs[i]}, nil)
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	return func(ctx context.Context, tenants []string, costs []int64) error {
		params := make([]river.InsertManyParams, len(tenants))
		for i := range tenants {
			params[i] = river.InsertManyParams{Args: noop{Tenant: tenants[i], Cost: costs[i]}}
		}
		n, err := client.InsertManyFast(ctx, params)
		if err == nil && n != len(params) {
			err = fmt.Errorf("InsertManyFast inserted %d of %d jobs", n, len(params))
		}
		return err
	}
}

func (peer) Tenants(ctx context.Context, pool *pgxpool.Pool) (jobs, tenants int, err error) {
	err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT args->>'tenant') FROM river_job`).Scan(&jobs, &tenants)
	return jobs, tenants, err
}

func (peer) Completed(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n)
	return n, err
}

// maxWorkers is River's worker pool per process, as River's benchmarks and
// the measurement this one follows run it; the drain's report shows it as
// River's claimers per process. claimers and batch do not apply: River
// fetches as many jobs as it has free workers.
const maxWorkers = benchkit.RiverMaxWorkers

// Drainer runs River's client until the table has no job left to complete.
// The drain ends at the last completion River reported; River completes
// jobs in batches after they run, and reports a completion once it is
// written.
func (peer) Drainer(ctx context.Context, dbURL, system string, _, _ int) (func(context.Context) (benchkit.Drained, error), func(), error) {
	cfg := &river.Config{
		Logger: quiet(),
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
	}
	switch system {
	case benchkit.SystemRiver:
		cfg.FetchCooldown = time.Millisecond
		cfg.FetchPollInterval = 20 * time.Millisecond
	case benchkit.SystemRiverDefault:
	default:
		return nil, nil, fmt.Errorf("-system %q: must be %s or %s", system, benchkit.SystemRiver, benchkit.SystemRiverDefault)
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, nil, err
	}
	pcfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	cfg.Workers = workers
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	drain := func(ctx context.Context) (benchkit.Drained, error) {
		start := time.Now()
		// River drops events a full channel cannot take: room for every
		// job of any backlog this harness seeds.
		events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
			Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}, ChanSize: 1 << 22,
		})
		defer cancel()
		if err := client.Start(ctx); err != nil {
			return benchkit.Drained{}, err
		}
		defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()
		var completed int
		last := start
		// Set once no job is left: completions written before that may
		// still be on their way.
		var finish <-chan time.Time
		check := time.NewTicker(20 * time.Millisecond)
		defer check.Stop()
		for {
			select {
			case e := <-events:
				if e.Kind != river.EventKindJobCompleted {
					return benchkit.Drained{Jobs: completed}, fmt.Errorf("job %d: %s", e.Job.ID, e.Kind)
				}
				completed++
				last = time.Now()
			case <-check.C:
				// Done when no job is left to complete, in any process;
				// asked only while no completion is coming in.
				if finish != nil || time.Since(last) < 20*time.Millisecond {
					continue
				}
				var left bool
				err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job
					WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))`).Scan(&left)
				if err != nil {
					return benchkit.Drained{Jobs: completed}, err
				}
				if !left {
					finish = time.After(50 * time.Millisecond)
				}
			case <-finish:
				return benchkit.Drained{Jobs: completed, Elapsed: last.Sub(start)}, nil
			case <-ctx.Done():
				return benchkit.Drained{Jobs: completed}, ctx.Err()
			}
		}
	}
	return drain, pool.Close, nil
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
