package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/migrations"
	"github.com/batchq/batchq/queue"
)

// Database is a throwaway database a benchmark creates on a server and drops
// when it is done.
type Database struct {
	Name string
	URL  string // the server's URL with the database name in place

	serverURL string
}

// CreateDatabase creates a database named batchq_bench_<random> on the
// server of serverURL (whose role must be allowed to create databases) and
// migrates it to batchq's latest schema. On error nothing is left behind.
func CreateDatabase(ctx context.Context, serverURL string) (*Database, error) {
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	name := "batchq_bench_" + hex.EncodeToString(raw[:])
	dbURL, err := withDatabase(serverURL, name)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("benchkit: connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("benchkit: create database %s (the role needs CREATEDB): %w", name, err)
	}
	d := &Database{Name: name, URL: dbURL, serverURL: serverURL}
	if err := migrate(ctx, dbURL); err != nil {
		_ = d.Drop(context.WithoutCancel(ctx))
		return nil, err
	}
	return d, nil
}

func migrate(ctx context.Context, dbURL string) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		return fmt.Errorf("benchkit: migrate: %w", err)
	}
	return nil
}

// Drop removes the database, ending any session still connected to it. It
// takes at most 30 seconds whatever ctx says, so a cancelled run still
// cleans up.
func (d *Database) Drop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.serverURL)
	if err != nil {
		return fmt.Errorf("benchkit: drop database %s: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize()+" WITH (FORCE)")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42601" { // before PostgreSQL 13: no FORCE
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, d.Name)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize())
	}
	if err != nil {
		return fmt.Errorf("benchkit: drop database %s: %w", d.Name, err)
	}
	return nil
}

// withDatabase returns connection string s naming database name instead.
func withDatabase(s, name string) (string, error) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", fmt.Errorf("benchkit: database URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(s); err != nil {
		return "", fmt.Errorf("benchkit: database URL: %w", err)
	}
	// A keyword/value string: a later dbname overrides an earlier one.
	return s + " dbname=" + name, nil
}

// Env is a migrated database a scenario may empty at will, with a client for
// batchq's queue and the FIFO baseline's schema.
type Env struct {
	URL    string
	Pool   *pgxpool.Pool
	Client *queue.Client
	FIFO   *fifo.Queue
	// Peer measures the River systems; nil when they are not asked for.
	// UsePeer sets it.
	Peer *PeerProgram
	// arrivals holds a flood's arriving tenants' connections, one per
	// tenant, beside Pool's claimers, and keeps them from one repetition
	// to the next as an application's pool would: the warm-up's arrivals
	// open them, the measured ones find them warm.
	arrivals *pgxpool.Pool
}

// UsePeer creates p's schema in the database and has the scenarios measure
// its systems with it.
func (e *Env) UsePeer(ctx context.Context, p *PeerProgram) error {
	if err := p.Prepare(ctx, e.URL); err != nil {
		return err
	}
	e.Peer = p
	return nil
}

// OpenEnv connects to the migrated database at dbURL with a pool of up to
// maxConns connections and creates the FIFO baseline's schema there.
func OpenEnv(ctx context.Context, dbURL string, maxConns int) (*Env, error) {
	pool, err := connect(ctx, dbURL, maxConns)
	if err != nil {
		return nil, err
	}
	client, err := queue.NewClient(pool, queue.Config{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	f, err := fifo.Open(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	arrivals, err := connect(ctx, dbURL, MaxFloodSmallTenants)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Env{URL: dbURL, Pool: pool, Client: client, FIFO: f, arrivals: arrivals}, nil
}

// Close closes the pools.
func (e *Env) Close() {
	e.Pool.Close()
	e.arrivals.Close()
}

// benchQueue is the queue every scenario works in.
const benchQueue = "bench"

// reset empties batchq's tables and the baseline's, and (re)creates the
// benchmark queue with qc (Name and MaxPerTenant are set here).
func (e *Env) reset(ctx context.Context, qc queue.QueueConfig) error {
	// CASCADE: whatever else a later migration hangs off the queues goes too.
	_, err := e.Pool.Exec(ctx, `TRUNCATE batchq.jobs, batchq.outcomes, batchq.ledger_adjustments,
		batchq.tenant_ring, batchq.quota, batchq.queues, batchq_fifo.jobs, batchq_fifo.outcomes,
		batchq_fifo.lean_jobs, batchq_fifo.lean_outcomes CASCADE`)
	if err != nil {
		return fmt.Errorf("benchkit: reset: %w", err)
	}
	qc.Name = benchQueue
	if qc.MaxPerTenant == 0 {
		qc.MaxPerTenant = 1 << 30
	}
	return e.Client.CreateQueue(ctx, qc)
}

// settle makes the next timed run start from the same place as every other:
// fresh statistics on the tables it seeded, and no checkpoint owed. A role
// that may not CHECKPOINT (it needs pg_checkpoint or superuser) skips it.
func (e *Env) settle(ctx context.Context, tables ...string) error {
	return settle(ctx, e.Pool, tables...)
}

func settle(ctx context.Context, pool *pgxpool.Pool, tables ...string) error {
	for _, t := range tables {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return fmt.Errorf("benchkit: vacuum analyze %s: %w", t, err)
		}
	}
	_, _ = pool.Exec(ctx, "CHECKPOINT")
	return nil
}

// connect opens a pool of up to maxConns connections to dbURL.
func connect(ctx context.Context, dbURL string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("benchkit: database URL: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("benchkit: connect: %w", err)
	}
	return pool, nil
}
