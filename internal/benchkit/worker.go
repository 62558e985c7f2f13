package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/queue"
)

// The systems a drain compares.
const (
	// SystemFair is batchq's fair queue drained by goroutines that claim a
	// batch and complete it in one statement (DrainFair).
	SystemFair = "fair"
	// SystemPool is batchq's fair queue drained by the worker pool
	// (Client.Work) with a no-op handler.
	SystemPool = "pool"
	// SystemFIFO is the FIFO SKIP LOCKED baseline with batchq's rows
	// (fifo.Queue), drained like SystemFair.
	SystemFIFO = "fifo"
	// SystemLean is the lean FIFO baseline (fifo.Lean), drained the same
	// way: its gap to SystemFIFO is what batchq's rows cost.
	SystemLean = "lean"
)

// Spawner returns the command that runs WorkerMain in a new OS process with
// args, connected to the database at dbURL. The command is not started.
type Spawner func(ctx context.Context, dbURL string, args []string) *exec.Cmd

// ExecSpawner runs the program exe with prefix before the worker's arguments
// (for batchq: "bench-worker") and DATABASE_URL set to the database, so the
// URL never shows on a command line.
func ExecSpawner(exe string, prefix ...string) Spawner {
	return func(ctx context.Context, dbURL string, args []string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe, append(append([]string{}, prefix...), args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
		cmd.WaitDelay = 5 * time.Second
		return cmd
	}
}

// workerLine is what a worker writes on its standard output: first a line
// with Ready, then, after the parent's "go", one with what it drained.
type workerLine struct {
	Ready   bool   `json:"ready,omitempty"`
	Jobs    int    `json:"jobs"`
	StartNS int64  `json:"start_ns,omitempty"`
	EndNS   int64  `json:"end_ns,omitempty"`
	Error   string `json:"error,omitempty"`
}

// WorkerMain is one drain worker process, `batchq bench-worker`. It parses
// args (-system fair|pool|fifo|lean, -claimers N, -batch B), connects to dbURL,
// writes {"ready":true} on stdout, waits for the line "go" on stdin, drains
// the benchmark queue with N claimers taking B jobs at a time, and writes
// {"jobs":…,"start_ns":…,"end_ns":…}. It stops early, with an error, when
// stdin closes (the parent is gone) or ctx is done.
func WorkerMain(ctx context.Context, dbURL string, args []string, stdin io.Reader, stdout io.Writer) error {
	return serveWorker(ctx, args, stdin, stdout, func(ctx context.Context, system string, claimers, batch int) (func(context.Context) (Drained, error), func(), error) {
		return workerDrain(ctx, dbURL, system, claimers, batch)
	})
}

// openDrain connects for system and returns its drain and what closes it.
type openDrain func(ctx context.Context, system string, claimers, batch int) (func(context.Context) (Drained, error), func(), error)

// serveWorker speaks a worker process's side of runProcs for the drain
// open returns.
func serveWorker(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, open openDrain) error {
	fs := flag.NewFlagSet("bench-worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	system := fs.String("system", SystemFair, "the system to drain")
	claimers := fs.Int("claimers", 8, "claiming goroutines (pool: handlers)")
	batch := fs.Int("batch", 100, "most jobs per claim")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("benchkit: bench-worker: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("benchkit: bench-worker: unexpected argument %q", fs.Arg(0))
	}
	if *claimers < 1 || *claimers > 1000 || *batch < 1 || *batch > 10000 {
		return fmt.Errorf("benchkit: bench-worker: -claimers must be in 1..1000 and -batch in 1..10000")
	}
	drainOnce, closeDrain, err := open(ctx, *system, *claimers, *batch)
	if err != nil {
		return err
	}
	defer closeDrain()

	enc := json.NewEncoder(stdout)
	if err := enc.Encode(workerLine{Ready: true}); err != nil {
		return err
	}
	in := bufio.NewReader(stdin)
	line, err := in.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("benchkit: bench-worker: expected \"go\" on stdin, got %q (%v)", line, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	start := time.Now()
	d, err := drainOnce(ctx)
	if err != nil {
		_ = enc.Encode(workerLine{Jobs: d.Jobs, Error: err.Error()})
		return err
	}
	return enc.Encode(workerLine{Jobs: d.Jobs, StartNS: start.UnixNano(), EndNS: start.Add(d.Elapsed).UnixNano()})
}

// workerDrain connects and returns the drain to run, with every connection
// it needs already open so that connecting is not timed.
func workerDrain(ctx context.Context, dbURL, system string, claimers, batch int) (func(context.Context) (Drained, error), func(), error) {
	pool, err := connect(ctx, dbURL, claimers+4)
	if err != nil {
		return nil, nil, fmt.Errorf("benchkit: bench-worker: %w", err)
	}
	if err := warmPool(ctx, pool, claimers+2); err != nil {
		pool.Close()
		return nil, nil, err
	}
	client, err := queue.NewClient(pool, queue.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	switch system {
	case SystemFair:
		return func(ctx context.Context) (Drained, error) {
			return DrainFair(ctx, client, benchQueue, claimers, batch)
		}, pool.Close, nil
	case SystemPool:
		return func(ctx context.Context) (Drained, error) {
			return DrainPool(ctx, client, benchQueue, claimers, batch)
		}, pool.Close, nil
	case SystemFIFO:
		// The parent created the baselines' schema (OpenEnv).
		f := fifo.New(pool)
		return func(ctx context.Context) (Drained, error) {
			return DrainFIFO(ctx, f, claimers, batch)
		}, pool.Close, nil
	case SystemLean:
		l := fifo.NewLean(pool)
		return func(ctx context.Context) (Drained, error) {
			return DrainLean(ctx, l, claimers, batch)
		}, pool.Close, nil
	}
	pool.Close()
	return nil, nil, fmt.Errorf("benchkit: bench-worker: -system %q: must be fair, pool, fifo or lean", system)
}

// warmPool opens n connections at once and hands them back to the pool.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("benchkit: connect: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// DrainPool drains a queue with the worker pool: Concurrency handlers that do
// nothing, claims of up to batch jobs, batched completion with outcome rows,
// maintenance running as it does in production. It returns when the queue
// has nothing queued, running or waiting to retry.
func DrainPool(ctx context.Context, c *queue.Client, queueName string, workers, batch int) (Drained, error) {
	var n atomic.Int64
	start := time.Now()
	err := c.Work(ctx, queue.WorkerConfig{
		Queue: queueName,
		Handler: func(context.Context, *queue.Job) (queue.Result, error) {
			n.Add(1)
			return queue.Result{}, nil
		},
		Concurrency:  workers,
		BatchSize:    batch,
		Drain:        true,
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	d := Drained{Jobs: int(n.Load()), Elapsed: time.Since(start)}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return d, err
}

// proc is one running worker process.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
}

// runProcs drains with one worker process per element of args, started by
// spawn with those arguments, and returns the jobs they drained together and the time from the first
// one's start to the last one's end.
func runProcs(ctx context.Context, spawn Spawner, dbURL string, args [][]string) (Drained, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	procs := make([]*proc, 0, len(args))
	defer func() {
		for _, p := range procs {
			_ = p.stdin.Close()
		}
		for _, p := range procs {
			_ = p.cmd.Wait()
		}
	}()
	for _, a := range args {
		p := &proc{cmd: spawn(ctx, dbURL, a), lines: make(chan string, 4)}
		p.cmd.Stderr = &p.stderr
		var err error
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			return Drained{}, err
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			return Drained{}, err
		}
		if err := p.cmd.Start(); err != nil {
			return Drained{}, fmt.Errorf("benchkit: start a worker process: %w", err)
		}
		procs = append(procs, p)
		go func() {
			defer close(p.lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
		}()
	}
	for _, p := range procs {
		l, err := p.read(ctx, time.Minute)
		if err != nil {
			return Drained{}, err
		}
		if !l.Ready {
			return Drained{}, fmt.Errorf("benchkit: worker process: expected ready, got %+v", l)
		}
	}
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			return Drained{}, fmt.Errorf("benchkit: worker process: %w", err)
		}
	}
	var total int
	var first, last int64
	for i, p := range procs {
		l, err := p.read(ctx, time.Hour)
		if err != nil {
			return Drained{Jobs: total}, err
		}
		if l.Error != "" {
			return Drained{Jobs: total}, fmt.Errorf("benchkit: worker process: %s", l.Error)
		}
		total += l.Jobs
		if i == 0 || l.StartNS < first {
			first = l.StartNS
		}
		last = max(last, l.EndNS)
	}
	return Drained{Jobs: total, Elapsed: time.Duration(last - first)}, nil
}

// read returns the process's next line, waiting up to timeout.
func (p *proc) read(ctx context.Context, timeout time.Duration) (workerLine, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s, ok := <-p.lines:
		if !ok {
			_ = p.cmd.Wait()
			return workerLine{}, fmt.Errorf("benchkit: worker process exited (%v): %s", p.cmd.ProcessState, strings.TrimSpace(p.stderr.String()))
		}
		var l workerLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			return workerLine{}, fmt.Errorf("benchkit: worker process wrote %q: %w", s, err)
		}
		return l, nil
	case <-ctx.Done():
		return workerLine{}, ctx.Err()
	case <-t.C:
		return workerLine{}, errors.New("benchkit: worker process did not answer in time")
	}
}
