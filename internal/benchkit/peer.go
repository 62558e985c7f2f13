package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// River (github.com/riverqueue/river) is measured beside batchq, in the same
// runs and the same database, by a program of its own: batchq-river, which
// `make bench-river` builds from the module under bench/river. batchq's
// go.mod never names River; the two programs share this package, so both
// sides of every measurement are the same code apart from the queue.
const (
	// SystemRiver is River's worker pool tuned for throughput: MaxWorkers
	// 100 per process, FetchCooldown 1 ms, FetchPollInterval 20 ms.
	SystemRiver = "river"
	// SystemRiverDefault is River with its default fetch settings
	// (FetchCooldown 100 ms, FetchPollInterval 1 s) and MaxWorkers 100.
	SystemRiverDefault = "river-default"
)

// RiverMaxWorkers is the MaxWorkers of River's worker pool in each
// batchq-river process, for both systems: its claimers per process,
// whatever the drain's workers.
const RiverMaxWorkers = 100

// RiverSystems are the systems batchq-river measures.
var RiverSystems = []string{SystemRiver, SystemRiverDefault}

// A Peer is another queue's side of the measurements, implemented by the
// program that links it (bench/river) and served by PeerMain.
type Peer interface {
	// Prepare creates the peer's schema in the database, once per run.
	Prepare(ctx context.Context, pool *pgxpool.Pool) error
	// Table is the peer's jobs table, which Reset empties.
	Table() string
	Reset(ctx context.Context, pool *pgxpool.Pool) error
	// Inserter returns one call's insert: each job in a transaction of its
	// own when single is set (as an application inserts a job with its own
	// change), else all of them in one bulk call. Each job carries its
	// tenant and cost as its arguments.
	Inserter(pool *pgxpool.Pool, single bool) func(ctx context.Context, tenants []string, costs []int64) error
	// Tenants counts the jobs in the peer's table and their distinct tenants.
	Tenants(ctx context.Context, pool *pgxpool.Pool) (jobs, tenants int, err error)
	// Completed counts the jobs the peer has recorded as completed.
	Completed(ctx context.Context, pool *pgxpool.Pool) (int, error)
	// Drainer connects for a worker process and returns its drain of
	// system, which ends when the peer has no job left to run, and what
	// closes it. claimers and batch are the drain's settings; a peer maps
	// them to its own or documents why it does not.
	Drainer(ctx context.Context, dbURL, system string, claimers, batch int) (func(context.Context) (Drained, error), func(), error)
}

// peerLine is what a peer program's commands other than bench-worker print.
type peerLine struct {
	Jobs      int   `json:"jobs"`
	ElapsedNS int64 `json:"elapsed_ns,omitempty"`
}

// PeerMain is a peer program's main: it runs the command args[0] against
// the database at dbURL and prints its result on stdout as one JSON line.
// The commands are what a PeerProgram asks for:
//
//	prepare                              create the peer's schema
//	seed -jobs N -tenants T -max-cost C -seed S
//	                                     empty the table, insert a Backlog, settle
//	enqueue -mode M -concurrency C -jobs N -per P -tenants T -seed S
//	                                     empty the table, settle, time the inserts
//	completed                            count the completed jobs
//	bench-worker -system S -claimers N -batch B
//	                                     one drain worker process (see WorkerMain)
func PeerMain(ctx context.Context, dbURL string, args []string, stdin io.Reader, stdout io.Writer, p Peer) error {
	if len(args) == 0 {
		return errors.New("benchkit: peer: a command is required: prepare, seed, enqueue, completed or bench-worker")
	}
	if args[0] == "bench-worker" {
		return serveWorker(ctx, args[1:], stdin, stdout, func(ctx context.Context, system string, claimers, batch int) (func(context.Context) (Drained, error), func(), error) {
			return p.Drainer(ctx, dbURL, system, claimers, batch)
		})
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jobs := fs.Int("jobs", 0, "")
	tenants := fs.Int("tenants", 0, "")
	maxCost := fs.Int64("max-cost", 0, "")
	seed := fs.Uint64("seed", 0, "")
	mode := fs.String("mode", ModeSingle, "")
	conc := fs.Int("concurrency", 1, "")
	per := fs.Int("per", 1, "")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("benchkit: peer %s: %w", args[0], err)
	}
	pool, err := connect(ctx, dbURL, max(*conc, 1)+4)
	if err != nil {
		return fmt.Errorf("benchkit: peer: %w", err)
	}
	defer pool.Close()
	var out peerLine
	switch args[0] {
	case "prepare":
		err = p.Prepare(ctx, pool)
	case "seed":
		b := Backlog{Jobs: *jobs, Tenants: *tenants, MaxCost: *maxCost, Seed: *seed}
		if b.Jobs < 1 || b.Tenants < 1 || b.MaxCost < 1 {
			return errors.New("benchkit: peer seed: -jobs, -tenants and -max-cost must be positive")
		}
		if err = p.Reset(ctx, pool); err == nil {
			insert := p.Inserter(pool, false)
			err = seedBatches(b, func(tenants []string, costs []int64) error { return insert(ctx, tenants, costs) })
		}
		if err == nil {
			err = settle(ctx, pool, p.Table())
		}
		out.Jobs = b.Jobs
	case "enqueue":
		if *jobs < 1 || *per < 1 || *tenants < 1 || *conc < 1 {
			return errors.New("benchkit: peer enqueue: -jobs, -per, -tenants and -concurrency must be positive")
		}
		if err = p.Reset(ctx, pool); err == nil {
			err = settle(ctx, pool, p.Table())
		}
		if err != nil {
			break
		}
		k := enqueueKey{mode: *mode, conc: *conc}
		var d Drained
		var lines []int
		d, lines, err = runInserts(ctx, k, *jobs, *per, *tenants, *seed, p.Inserter(pool, *mode == ModeSingle))
		if err != nil {
			break
		}
		var n, distinct int
		if n, distinct, err = p.Tenants(ctx, pool); err == nil && (n != *jobs || distinct != spreadOf(k, *tenants, *jobs, *per, lines)) {
			err = fmt.Errorf("benchkit: peer enqueue %s: %d rows of %d tenants for %d jobs of %d", *mode, n, distinct, *jobs, spreadOf(k, *tenants, *jobs, *per, lines))
		}
		out = peerLine{Jobs: d.Jobs, ElapsedNS: d.Elapsed.Nanoseconds()}
	case "completed":
		out.Jobs, err = p.Completed(ctx, pool)
	default:
		return fmt.Errorf("benchkit: peer: unknown command %q: must be prepare, seed, enqueue, completed or bench-worker", args[0])
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(out)
}

// PeerProgram runs a peer program (batchq-river) for the scenarios: each
// method is one of PeerMain's commands, run with DATABASE_URL set.
type PeerProgram struct {
	Exe     string
	Systems []string
}

// FindRiver returns the batchq-river program: exe when it is given (the
// --river-bin of batchq bench), else batchq-river beside the running
// program, else on PATH. The error says which was looked for and how to
// build it.
func FindRiver(exe string) (*PeerProgram, error) {
	const build = "build it with `make bench-river` (it is written to bin/, beside bin/batchq)"
	if exe != "" {
		st, err := os.Stat(exe)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, configErrorf("--river-bin %s: no such file: %s", exe, build)
		case err != nil:
			return nil, configErrorf("--river-bin %s: %v", exe, err)
		case st.IsDir():
			return nil, configErrorf("--river-bin %s: a directory, not the batchq-river program", exe)
		case st.Mode().Perm()&0o111 == 0:
			return nil, configErrorf("--river-bin %s: not executable (mode %v)", exe, st.Mode().Perm())
		}
		return &PeerProgram{Exe: exe, Systems: RiverSystems}, nil
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "batchq-river"); isFile(p) {
			return &PeerProgram{Exe: p, Systems: RiverSystems}, nil
		}
	}
	if p, err := exec.LookPath("batchq-river"); err == nil {
		return &PeerProgram{Exe: p, Systems: RiverSystems}, nil
	}
	return nil, configErrorf("the river systems need the batchq-river program, and it is neither beside this program nor on PATH: %s, or name it with --river-bin", build)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// Serves reports whether the program measures system.
func (p *PeerProgram) Serves(system string) bool {
	return p != nil && slices.Contains(p.Systems, system)
}

// run runs one command and decodes the line it printed.
func (p *PeerProgram) run(ctx context.Context, dbURL string, args ...string) (peerLine, error) {
	cmd := exec.CommandContext(ctx, p.Exe, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return peerLine{}, fmt.Errorf("benchkit: %s %s: %v: %s", p.Exe, args[0], err, msg)
		}
		return peerLine{}, fmt.Errorf("benchkit: %s %s: %v (nothing on stderr)", p.Exe, args[0], err)
	}
	var l peerLine
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &l); err != nil {
		return peerLine{}, fmt.Errorf("benchkit: %s %s printed %q: %w", p.Exe, args[0], stdout.String(), err)
	}
	return l, nil
}

// Prepare creates the peer's schema in the database at dbURL.
func (p *PeerProgram) Prepare(ctx context.Context, dbURL string) error {
	_, err := p.run(ctx, dbURL, "prepare")
	return err
}

// Seed empties the peer's table and inserts backlog b.
func (p *PeerProgram) Seed(ctx context.Context, dbURL string, b Backlog) error {
	_, err := p.run(ctx, dbURL, "seed", "-jobs", strconv.Itoa(b.Jobs), "-tenants", strconv.Itoa(b.Tenants),
		"-max-cost", strconv.FormatInt(b.MaxCost, 10), "-seed", strconv.FormatUint(b.Seed, 10))
	return err
}

// Enqueue times one enqueue measurement of the peer.
func (p *PeerProgram) Enqueue(ctx context.Context, dbURL string, k enqueueKey, total, per, tenants int, seed uint64) (Drained, error) {
	l, err := p.run(ctx, dbURL, "enqueue", "-mode", k.mode, "-concurrency", strconv.Itoa(k.conc), "-jobs", strconv.Itoa(total),
		"-per", strconv.Itoa(per), "-tenants", strconv.Itoa(tenants), "-seed", strconv.FormatUint(seed, 10))
	return Drained{Jobs: l.Jobs, Elapsed: time.Duration(l.ElapsedNS)}, err
}

// Completed counts the jobs the peer completed.
func (p *PeerProgram) Completed(ctx context.Context, dbURL string) (int, error) {
	l, err := p.run(ctx, dbURL, "completed")
	return l.Jobs, err
}

// Spawner starts the peer's drain worker processes.
func (p *PeerProgram) Spawner() Spawner { return ExecSpawner(p.Exe, "bench-worker") }
