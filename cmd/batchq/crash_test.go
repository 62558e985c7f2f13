package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
)

// crashSecret is the provider key the crashing workers send; it must never
// reach a log or an outcome.
const crashSecret = "Bearer sk-crash-test-5d1f0c9e"

// TestCrashedWorkersLoseNothing runs the real binary: `batchq work --drain`
// processes against a simulated provider, SIGKILLs some of them mid-run,
// freezes one (SIGSTOP) until its leases have expired and been rescued, and
// starts others. Every job ends with exactly one outcome row and none is
// lost; the provider sees each job succeed at most once per lease (the
// Batchq-Attempt header names the lease); completions under a stale lease
// are refused; and every lease a dead or frozen worker left behind is
// rescued within the maintenance interval of its expiry, so within lease +
// rescue interval of the worker's last sign of life.
func TestCrashedWorkersLoseNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs worker processes")
	}
	const (
		nJobs         = 1000
		lease         = 2 * time.Second
		maintainEvery = 250 * time.Millisecond
		// rescueSlack is how late past its interval a maintenance pass of a
		// worker on a loaded CI machine may come, and our polling with it.
		rescueSlack = 2 * time.Second
	)
	bin := buildBatchq(t)
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	ctx := context.Background()
	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, client.CreateQueue(ctx, queue.QueueConfig{Name: "crash", Lease: lease, MaxAttempts: 20}))

	var jobs []queue.NewJob
	for i := range nJobs {
		cost := int64(10 + i%91)
		jobs = append(jobs, queue.NewJob{Queue: "crash", Tenant: fmt.Sprintf("tenant-%d", i%8), Cost: cost,
			Payload: []byte(fmt.Sprintf(`{"tokens":%d,"n":%d}`, cost, i))})
	}
	res, err := client.EnqueueMany(ctx, jobs)
	require.NoError(t, err)
	enqueued := map[int64]bool{}
	for _, r := range res {
		enqueued[r.ID] = true
	}

	sim, err := provider.New(provider.Config{RequestsPerWindow: 1 << 30, TokensPerWindow: 1 << 40,
		Latency: 50 * time.Millisecond, Jitter: 100 * time.Millisecond})
	require.NoError(t, err)
	calls := &callLog{}
	srv := httptest.NewServer(calls.wrap(sim))
	t.Cleanup(srv.Close)

	// A worker that claimed and died before any process started: the test
	// itself, holding these leases and never finishing them.
	abandoned, err := client.Claim(ctx, "crash", &queue.ClaimOpts{Limit: 5, Worker: "test-abandoned"})
	require.NoError(t, err)
	require.Len(t, abandoned, 5)
	watch := newRescueWatch(pool)
	watch.add(t, "test-abandoned")
	stopWatch := watch.start()

	fleet := &workerFleet{t: t, bin: bin, url: url, target: srv.URL, maintain: maintainEvery}
	outcomes := func() int64 { return scalar(t, pool, `SELECT count(*) FROM batchq.outcomes`) }
	waitOutcomes := func(n int64) {
		t.Helper()
		waitFor(t, 90*time.Second, fmt.Sprintf("%d outcomes", n), func() bool { return outcomes() >= n })
	}

	w1, w2, w3 := fleet.start("w1"), fleet.start("w2"), fleet.start("w3")

	waitOutcomes(150)
	w1.kill()
	watch.add(t, "w1")
	w4 := fleet.start("w4")

	waitOutcomes(350)
	w3.kill()
	watch.add(t, "w3")
	w5 := fleet.start("w5")
	// w2 is stopped while it holds jobs. Once stopped it sends nothing: after
	// a moment, what it holds is fixed.
	var frozen map[int64]int
	waitFor(t, 30*time.Second, "w2 stopped while it held jobs", func() bool {
		w2.signal(syscall.SIGSTOP)
		time.Sleep(300 * time.Millisecond)
		if frozen = runningOf(t, pool, "w2"); len(frozen) > 0 {
			return true
		}
		w2.signal(syscall.SIGCONT)
		return false
	})
	watch.add(t, "w2")
	waitFor(t, lease+30*time.Second, "the frozen worker's leases rescued", func() bool { return watch.resolved("w2") })
	w2.signal(syscall.SIGCONT)

	waitOutcomes(600)
	w4.kill()
	w5.kill()
	watch.add(t, "w4")
	watch.add(t, "w5")
	w6 := fleet.start("w6")

	for _, w := range []*workerProc{w2, w6} {
		select {
		case <-w.done:
			require.NoError(t, w.err, "%s did not drain cleanly:\n%s", w.name, w.log(t))
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not drain within 3 minutes:\n%s", w.name, w.log(t))
		}
	}
	stopWatch()
	srv.Close() // waits for requests in flight, so the call log is complete

	// Every job has exactly one outcome, all succeeded; nothing is left.
	require.Zero(t, scalar(t, pool, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(nJobs), scalar(t, pool, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
	attempts := map[int64]int{}
	rows, err := pool.Query(ctx, `SELECT job_id, attempts FROM batchq.outcomes`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id int64
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		require.True(t, enqueued[id], "outcome for job %d that was never enqueued", id)
		attempts[id] = n
	}
	require.NoError(t, rows.Err())
	require.Len(t, attempts, nJobs)

	// The provider saw each job succeed at most once per lease, and the
	// lease whose completion counted is among them.
	successes := map[int64]map[int]int{}
	repeated := 0
	for _, c := range calls.snapshot() {
		require.Equal(t, "batchq-"+c.job, c.idempotencyKey)
		require.Equal(t, crashSecret, c.authorization)
		if c.status != http.StatusOK {
			continue
		}
		id, err := strconv.ParseInt(c.job, 10, 64)
		require.NoError(t, err)
		if successes[id] == nil {
			successes[id] = map[int]int{}
		}
		successes[id][c.attempt]++
	}
	for id, byAttempt := range successes {
		if len(byAttempt) > 1 {
			repeated++
		}
		for attempt, n := range byAttempt {
			require.Equal(t, 1, n, "job %d succeeded %d times under lease (attempt) %d", id, n, attempt)
			require.LessOrEqual(t, attempt, attempts[id], "job %d", id)
		}
		require.Equal(t, 1, byAttempt[attempts[id]], "job %d: its outcome's attempt %d never succeeded at the provider", id, attempts[id])
	}
	require.Len(t, successes, nJobs)

	// Completions under a stale lease are refused and change nothing.
	for _, old := range abandoned {
		require.ErrorIs(t, client.Complete(ctx, old, queue.Result{}), queue.ErrLeaseLost)
		_, err := client.Fail(ctx, old, fmt.Errorf("late"), nil)
		require.ErrorIs(t, err, queue.ErrLeaseLost)
		require.ErrorIs(t, client.Release(ctx, old, 0), queue.ErrLeaseLost)
		require.ErrorIs(t, client.Heartbeat(ctx, old), queue.ErrLeaseLost)
		require.Greater(t, attempts[old.ID], old.Attempt, "job %d finished under a later lease", old.ID)
	}
	require.Equal(t, int64(nJobs), outcomes())
	// What the frozen worker held was finished under later leases: its own
	// completions, attempted when it woke, were refused.
	for id, attempt := range frozen {
		require.Greater(t, attempts[id], attempt, "job %d held by the frozen worker", id)
	}
	require.Regexp(t, regexp.MustCompile(`lease lost|lease was lost`), w2.log(t), "the frozen worker said nothing of its lost leases")

	// Every lease left behind was rescued within the maintenance interval
	// of its expiry.
	rescued, ownerFinished, maxDelay := watch.report()
	require.GreaterOrEqual(t, rescued, len(abandoned))
	for _, o := range watch.all() {
		if !o.ownerFinished {
			require.LessOrEqual(t, o.delay, maintainEvery+rescueSlack,
				"job %d of %s rescued %s after its lease expired", o.id, o.owner, o.delay)
		}
	}

	// Secrets stay out of logs and outcomes.
	for _, w := range fleet.procs {
		require.NotContains(t, w.log(t), "sk-crash-test", "%s logged the provider key", w.name)
	}
	require.Zero(t, scalar(t, pool, `SELECT count(*) FROM batchq.outcomes
		WHERE result::text LIKE '%sk-crash-test%' OR error LIKE '%sk-crash-test%' OR payload::text LIKE '%sk-crash-test%'`))

	refused := 0
	for _, w := range fleet.procs {
		refused += strings.Count(w.log(t), "completion refused")
	}
	t.Logf("crash: %d jobs, %d worker processes (4 SIGKILLed, 1 frozen for %d leases), %d provider calls, "+
		"%d jobs that succeeded at the provider under more than one lease, %d stale completions refused, "+
		"%d leases rescued (slowest %s after expiry), %d finished by their owner as it died; most requests of one job at once: %d",
		nJobs, len(fleet.procs), len(frozen), len(calls.snapshot()), repeated, refused, rescued, maxDelay.Round(time.Millisecond),
		ownerFinished, sim.MaxConcurrentPerJob())
}

// buildBatchq builds the batchq binary into a temporary directory, with the
// race detector when the tests have it.
func buildBatchq(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "batchq")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// workerFleet starts `batchq work` processes on one queue.
type workerFleet struct {
	t        *testing.T
	bin, url string
	target   string
	maintain time.Duration
	procs    []*workerProc
}

// workerProc is one running `batchq work` process; its output goes to a file.
type workerProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func (f *workerFleet) start(name string) *workerProc {
	t := f.t
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	out, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(f.bin, "--database-url", f.url, "work", "--queue", "crash", "--target", f.target,
		"--name", name, "--concurrency", "2", "--poll-interval", "50ms", "--maintain-interval", f.maintain.String(),
		"--shutdown-timeout", "5s", "--drain", "--header-env", "Authorization=BATCHQ_CRASH_TEST_KEY")
	cmd.Env = append(os.Environ(), "BATCHQ_CRASH_TEST_KEY="+crashSecret)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	out.Close()
	w := &workerProc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-w.done
		}
	})
	f.procs = append(f.procs, w)
	return w
}

func (w *workerProc) signal(sig syscall.Signal) {
	_ = w.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits until it is gone.
func (w *workerProc) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

func (w *workerProc) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(w.logPath)
	require.NoError(t, err)
	return string(b)
}

// callLog records what the provider was asked, with the lease (attempt) of
// each request and the status it was answered with.
type callLog struct {
	mu    sync.Mutex
	calls []providerCall
}

type providerCall struct {
	job, idempotencyKey, authorization string
	attempt, status                    int
}

func (l *callLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		attempt, _ := strconv.Atoi(r.Header.Get("Batchq-Attempt"))
		l.mu.Lock()
		l.calls = append(l.calls, providerCall{job: r.Header.Get("Batchq-Job-Id"), idempotencyKey: r.Header.Get("Idempotency-Key"),
			authorization: r.Header.Get("Authorization"), attempt: attempt, status: rec.status})
		l.mu.Unlock()
	})
}

func (l *callLog) snapshot() []providerCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]providerCall(nil), l.calls...)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// rescueWatch follows leases whose holder died (or froze) until another
// worker rescues them, and measures how long after their expiry that was,
// on the database's clock.
type rescueWatch struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	leases  map[int64]*orphan
	pending map[int64]bool
}

type orphan struct {
	id            int64
	owner         string
	token         string
	expires       time.Time // the last expiry seen while it still held the lease
	delay         time.Duration
	ownerFinished bool // gone before it expired: a finish its owner sent as it died
}

func newRescueWatch(pool *pgxpool.Pool) *rescueWatch {
	return &rescueWatch{pool: pool, leases: map[int64]*orphan{}, pending: map[int64]bool{}}
}

// add follows every lease owner holds now.
func (w *rescueWatch) add(t *testing.T, owner string) {
	t.Helper()
	rows, err := w.pool.Query(context.Background(),
		`SELECT id, lease_token::text, lease_expires_at FROM batchq.jobs WHERE state = 'running' AND worker = $1`, owner)
	require.NoError(t, err)
	defer rows.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	for rows.Next() {
		o := &orphan{owner: owner}
		require.NoError(t, rows.Scan(&o.id, &o.token, &o.expires))
		w.leases[o.id] = o
		w.pending[o.id] = true
	}
	require.NoError(t, rows.Err())
}

// start polls every 50ms until the returned function is called.
func (w *rescueWatch) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.poll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (w *rescueWatch) poll(ctx context.Context) {
	w.mu.Lock()
	ids := make([]int64, 0, len(w.pending))
	for id := range w.pending {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	rows, err := w.pool.Query(ctx, `SELECT x.id, coalesce(j.lease_token::text, ''), j.lease_expires_at, clock_timestamp()
		FROM unnest($1::bigint[]) AS x (id) LEFT JOIN batchq.jobs j ON j.id = x.id`, ids)
	if err != nil {
		return
	}
	defer rows.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	for rows.Next() {
		var id int64
		var token string
		var expires *time.Time
		var now time.Time
		if rows.Scan(&id, &token, &expires, &now) != nil {
			return
		}
		o := w.leases[id]
		if token == o.token && expires != nil {
			o.expires = *expires // a heartbeat sent just before the end may have landed
			continue
		}
		delete(w.pending, id)
		if now.Before(o.expires) {
			o.ownerFinished = true
			continue
		}
		o.delay = now.Sub(o.expires)
	}
}

// resolved reports whether every lease owner held has been rescued (or
// finished by its owner).
func (w *rescueWatch) resolved(owner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.pending {
		if w.leases[id].owner == owner {
			return false
		}
	}
	return true
}

func (w *rescueWatch) all() []orphan {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []orphan
	for id, o := range w.leases {
		if !w.pending[id] {
			out = append(out, *o)
		}
	}
	return out
}

func (w *rescueWatch) report() (rescued, ownerFinished int, maxDelay time.Duration) {
	for _, o := range w.all() {
		if o.ownerFinished {
			ownerFinished++
			continue
		}
		rescued++
		maxDelay = max(maxDelay, o.delay)
	}
	return rescued, ownerFinished, maxDelay
}

// runningOf returns the jobs owner holds now, with their attempt numbers.
func runningOf(t *testing.T, pool *pgxpool.Pool, owner string) map[int64]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, attempt FROM batchq.jobs WHERE state = 'running' AND worker = $1`, owner)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var id int64
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func scalar(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The first interrupt stops a worker gracefully: it waits up to
// --shutdown-timeout for the requests it is running. A second one ends the
// process at once, whatever it waits for; the job it ran keeps its lease,
// for a later rescue.
func TestWorkStopsAtOnceOnASecondInterrupt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs a worker process")
	}
	secondInterruptEndsWork(t, false)
}

// A background job of a non-interactive shell starts with SIGINT ignored.
// The first interrupt still stops it gracefully, and a second one still
// ends it at once: with the status a shell gives a process SIGINT ended
// (130), as the signal itself, given back its inherited action, would be
// ignored.
func TestWorkStartedWithInterruptIgnoredStopsAtOnceOnASecondOne(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs a worker process")
	}
	secondInterruptEndsWork(t, true)
}

func secondInterruptEndsWork(t *testing.T, ignoredAtStart bool) {
	bin := buildBatchq(t)
	db := newCLIDB(t, "stuck")
	url := db.url
	db.exec(t, `SELECT batchq.enqueue_job(queue => 'stuck', tenant => 'a', cost => 1)`)

	// A provider that never answers.
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })

	logPath := filepath.Join(t.TempDir(), "work.log")
	out, err := os.Create(logPath)
	require.NoError(t, err)
	args := []string{bin, "--database-url", url, "work", "--queue", "stuck", "--target", srv.URL,
		"--shutdown-timeout", "10m", "--timeout", "10m", "--poll-interval", "50ms"}
	if ignoredAtStart {
		// exec keeps an ignored signal ignored.
		args = append([]string{"sh", "-c", `trap '' INT; exec "$@"`, "sh"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	out.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	logged := func() string {
		b, err := os.ReadFile(logPath)
		require.NoError(t, err)
		return string(b)
	}

	select {
	case <-asked:
	case err := <-done:
		t.Fatalf("work exited before its request: %v\n%s", err, logged())
	case <-time.After(time.Minute):
		t.Fatalf("the provider was never asked\n%s", logged())
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, func() bool { return strings.Contains(logged(), "interrupt again to stop at once") },
		30*time.Second, 20*time.Millisecond, "the first interrupt was not acknowledged")
	select {
	case err := <-done:
		t.Fatalf("work did not wait for its running request: %v\n%s", err, logged())
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case err := <-done:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		ws, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		if ignoredAtStart {
			require.False(t, ws.Signaled(), "work was ended by %v, which it was started ignoring\n%s", ws.Signal(), logged())
			require.Equal(t, 130, ws.ExitStatus(), "work did not exit as ended by SIGINT\n%s", logged())
		} else {
			require.True(t, ws.Signaled(), "work exited with %v, not ended by the signal\n%s", err, logged())
			require.Equal(t, syscall.SIGINT, ws.Signal())
		}
	case <-time.After(time.Minute):
		t.Fatalf("a second interrupt did not end work\n%s", logged())
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`),
		"the job keeps its lease, for a rescue")
}
