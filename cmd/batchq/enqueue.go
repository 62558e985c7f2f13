package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

// maxLineBytes bounds one line of an enqueue file: a payload at the client's
// limit (as jsonb prints it) written with the longest escapes, \u0041 for
// each byte, and the fields around it.
const maxLineBytes = 6*queue.DefaultMaxPayloadBytes + 64<<10

// jobFlags describe one job; --file reads jobs instead.
var jobFlags = []string{"queue", "tenant", "kind", "cost", "deadline", "ttl", "max-attempts", "payload", "unique-key",
	"run-at", "delay"}

// defaultBatchBytes bounds the lines of one batch of an enqueue file: jobs of
// a megabyte each make batches of 16, not of --batch-size.
const defaultBatchBytes = 16 << 20

func enqueueCommand() *cli.Command {
	return &cli.Command{
		Name:  "enqueue",
		Usage: "enqueue one job from flags, or many from a JSON Lines file",
		Description: `One job: batchq enqueue --queue Q --tenant T --cost N [--kind K] [--deadline TIME | --ttl DURATION]
   [--run-at TIME | --delay DURATION] [--max-attempts N] [--payload JSON] [--unique-key KEY]

A job with --run-at or --delay waits, scheduled, until then; it then joins the end of its
tenant's queue, as a job enqueued at that moment does. Its deadline must come after its
run-at; --ttl counts from the run-at (from now when the run-at has passed).

Many jobs: batchq enqueue --file jobs.jsonl (or --file - for standard input), one JSON object
per line with the fields queue, tenant, kind, cost, deadline (RFC 3339) or ttl (a duration
in a string: Go's, like "90m" or "36h", or whole days, like "7d"), run_at (RFC 3339) or delay
(a duration, as ttl), max_attempts, payload and unique_key; queue, tenant and cost are required. A kind or unique_key
of "" is refused, as --kind '' and --unique-key '' are: leave it out, or give null. Lines are enqueued in batches, each in one
transaction: a batch ends after --batch-size lines, or before the line that would take its
lines past --batch-bytes (a longer line goes in a batch of its own). Every line of a batch is
parsed and checked before the batch is written; a bad line stops the command with its line
number and why, and nothing of its batch (or after it) is written. Blank lines are skipped, and a
UTF-8 byte order mark at the start of the file. An interrupt (Ctrl-C) lets the batch being
written finish, then stops and says which lines were enqueued; a second one ends the command
at once, and then the last batch may or may not have been written.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "queue", Usage: "required unless --file: the queue to enqueue into"},
			&cli.StringFlag{Name: "tenant", Usage: "required unless --file: the tenant the job belongs to"},
			&cli.StringFlag{Name: "kind", Usage: "what the job does, for handlers and reports", DefaultText: `"default"`},
			int64NoDefault{&cli.Int64Flag{Name: "cost", Usage: fmt.Sprintf("required unless --file: estimated cost in tokens, 1..%d", queue.MaxCost)}},
			&cli.StringFlag{Name: "deadline", Usage: "when the job stops being worth running, RFC 3339; after the run-at",
				DefaultText: "the run-at + --ttl, or + the queue's default TTL"},
			daysFlag("ttl", "the deadline as a duration from the run-at (now, without one), instead of --deadline: Go's, like 90m or 36h, or whole days, like 2d",
				"the queue's default TTL"),
			&cli.StringFlag{Name: "run-at", Usage: "the earliest the job may run, RFC 3339; it waits scheduled until then",
				DefaultText: "now"},
			daysFlag("delay", "the run-at as a duration from now, instead of --run-at: Go's, like 90m, or whole days, like 2d",
				"none"),
			&cli.IntFlag{Name: "max-attempts", Usage: "how often the job may run", DefaultText: "the queue's setting"},
			&cli.StringFlag{Name: "payload", Usage: "the job's input, JSON", DefaultText: "{}"},
			&cli.StringFlag{Name: "unique-key", Usage: "enqueue only if no unfinished job of the queue has this key"},
			&cli.StringFlag{Name: "file", Usage: "read jobs from this JSON Lines file, - for standard input"},
			&cli.IntFlag{Name: "batch-size", Usage: "most jobs per transaction with --file, 1..100000", Value: 1000},
			&cli.Int64Flag{Name: "batch-bytes", Usage: "most bytes of lines per transaction with --file, 1..1073741824",
				Value: defaultBatchBytes, DefaultText: "16777216, 16 MiB"},
			commandFormatFlag(),
		},
		Action: withQueueClient(enqueueAction),
	}
}

func enqueueAction(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if c.IsSet("file") {
		if c.String("file") == "" {
			return usagef("batchq: enqueue: --file: must name a file, or - for standard input")
		}
		for _, f := range jobFlags {
			if c.IsSet(f) {
				return usagef("batchq: enqueue: --%s describes one job; with --file each line does", f)
			}
		}
		if n := c.Int("batch-size"); n < 1 || n > 100000 {
			return usagef("batchq: --batch-size %d: must be in 1..100000", n)
		}
		if n := c.Int64("batch-bytes"); n < 1 || n > 1<<30 {
			return usagef("batchq: --batch-bytes %d: must be in 1..1073741824", n)
		}
		return enqueueFile(c, client)
	}
	for _, f := range []string{"batch-size", "batch-bytes"} {
		if c.IsSet(f) {
			return usagef("batchq: enqueue: --%s goes with --file", f)
		}
	}
	return enqueueOne(c, client)
}

func enqueueOne(c *cli.Context, client *queue.Client) error {
	for _, f := range []string{"queue", "tenant", "cost"} {
		if !c.IsSet(f) {
			return usagef("batchq: enqueue: --%s is required (or --file to read jobs)", f)
		}
	}
	if err := refuseEmpty(c, `leave it out for "default"`, "kind"); err != nil {
		return err
	}
	if err := refuseEmpty(c, "leave it out for none", "unique-key"); err != nil {
		return err
	}
	j := queue.NewJob{
		Queue: c.String("queue"), Tenant: c.String("tenant"), Kind: c.String("kind"), Cost: c.Int64("cost"),
		TTL: daysDuration(c, "ttl"), MaxAttempts: c.Int("max-attempts"), UniqueKey: c.String("unique-key"),
		Delay: daysDuration(c, "delay"),
	}
	if c.IsSet("delay") && j.Delay < 0 {
		return usagef("batchq: --delay: must be >= 0 (got %s)", j.Delay)
	}
	if c.IsSet("run-at") {
		t, err := time.Parse(time.RFC3339, c.String("run-at"))
		if err != nil {
			return usagef("batchq: --run-at %q: not an RFC 3339 time like 2026-01-02T15:04:05Z", c.String("run-at"))
		}
		j.RunAt = t
	}
	if c.IsSet("ttl") && j.TTL <= 0 {
		// The client's rule, and its words; a ttl of 0 there means none.
		return usagef("batchq: --ttl: must be > 0 (got %s)", j.TTL)
	}
	if c.IsSet("deadline") {
		t, err := time.Parse(time.RFC3339, c.String("deadline"))
		if err != nil {
			return usagef("batchq: --deadline %q: not an RFC 3339 time like 2026-01-02T15:04:05Z", c.String("deadline"))
		}
		j.Deadline = t
	}
	if c.IsSet("payload") {
		p, err := payloadFlag(c)
		if err != nil {
			return err
		}
		j.Payload = p
	}
	res, err := client.Enqueue(c.Context, j)
	if u := jobUsage(ttlRefusal(err, j)); u != nil {
		return u
	}
	if err != nil {
		return err
	}
	// The new job's state; none for a duplicate, which enqueued nothing.
	state, sentence := "queued", fmt.Sprintf("enqueued job %d", res.ID)
	if j.Delay > 0 || j.RunAt.After(time.Now()) {
		state, sentence = "scheduled", sentence+"; it waits, scheduled, until its run-at"
	}
	if res.Duplicate {
		state, sentence = "", fmt.Sprintf("job %d already holds unique key %q; nothing enqueued", res.ID, j.UniqueKey)
	}
	d := newDataset("id", "duplicate", "state")
	d.add(res.ID, res.Duplicate, state)
	return writeResult(c, sentence, d)
}

// enqueueTally counts what an enqueue file did.
type enqueueTally struct {
	// lines read, blank ones included; after an error, the lines of the
	// batches written, so the first line not written is lines+1 whatever
	// the batch size.
	lines      int
	enqueued   int
	duplicates int
}

func enqueueFile(c *cli.Context, client *queue.Client) error {
	name := c.String("file")
	var r io.Reader = c.App.Reader
	if r == nil {
		r = os.Stdin
	}
	if name != "-" {
		f, err := openJobFile(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	tally, err := enqueueLines(c, client, r, c.Int("batch-size"), c.Int64("batch-bytes"))
	d := newDataset("enqueued", "duplicates", "lines")
	d.add(tally.enqueued, tally.duplicates, tally.lines)
	done := fmt.Sprintf("enqueued %s, %s", counted(tally.enqueued, "job", "jobs"), counted(tally.duplicates, "duplicate", "duplicates"))
	sentence := fmt.Sprintf("%s, from %s", done, counted(tally.lines, "line", "lines"))
	if err != nil {
		sentence = done + ", before the error"
	}
	if werr := writeResult(c, sentence, d); err == nil {
		err = werr
	}
	return err
}

// openJobFile opens the file --file names. One that cannot be opened, or
// that is a directory, is a usage error: the command line named it.
// Pipes and devices (--file <(cmd), /dev/stdin) are read as files are.
func openJobFile(name string) (*os.File, error) {
	f, err := os.Open(name)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, usagef("batchq: --file %q: must name a file that can be read (%v)", name, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, usagef("batchq: --file %q: must name a file, not a directory", name)
	}
	return f, nil
}

// enqueueLines reads job lines from r and enqueues them batch by batch: at
// most batchSize lines, and at most batchBytes bytes of lines unless one line
// alone is longer. It stops at the first line or batch that fails, with
// nothing of that batch written, and returns what the batches before it did.
// An interrupt (c.Context done) stops it too, even while it waits for input,
// but never in the middle of a batch: a batch cancelled while its commit is
// in flight may have been written or not, and the count of lines written
// would then be a guess.
func enqueueLines(c *cli.Context, client *queue.Client, r io.Reader, batchSize int, batchBytes int64) (enqueueTally, error) {
	var tally enqueueTally
	var jobs []queue.NewJob
	var lineNos []int
	var size int64 // bytes of the lines in jobs
	first := 1     // the first line after the batches written
	fail := func(err error) (enqueueTally, error) {
		tally.lines = first - 1
		return tally, err
	}
	interrupted := func() error {
		return fmt.Errorf("batchq: interrupted; %s", notWritten(first))
	}
	flush := func() error {
		if len(jobs) == 0 {
			return nil
		}
		res, err := client.EnqueueMany(context.WithoutCancel(c.Context), jobs)
		if err != nil {
			return batchError(err, jobs, lineNos, first)
		}
		for _, e := range res {
			if e.Duplicate {
				tally.duplicates++
			} else {
				tally.enqueued++
			}
		}
		first = lineNos[len(lineNos)-1] + 1
		// The next batch gets arrays of its own: a batch of large payloads
		// is let go of once it is written.
		jobs, lineNos, size = nil, nil, 0
		return nil
	}
	stop := make(chan struct{})
	defer close(stop)
	in := readLines(r, stop)
	for {
		// Checked first: select picks at random among ready cases, and
		// lines keep coming from a file after an interrupt.
		if c.Context.Err() != nil {
			return fail(interrupted())
		}
		var line []byte
		var more bool
		select {
		case line, more = <-in.lines:
		case <-c.Context.Done():
			return fail(interrupted())
		}
		if !more {
			break
		}
		tally.lines++
		if tally.lines == 1 {
			// Editors on Windows start UTF-8 files with a byte order mark;
			// JSON parsers may skip it (RFC 8259, section 8.1).
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		// A line that would take the batch past batchBytes starts the next
		// one, whether or not it parses, as the line after batchSize does.
		if size+int64(len(line)) > batchBytes {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
		j, err := parseJobLine(line)
		if err != nil {
			return fail(fmt.Errorf("batchq: line %d: %w; %s", tally.lines, err, notWritten(first)))
		}
		jobs = append(jobs, j)
		lineNos = append(lineNos, tally.lines)
		size += int64(len(line))
		if len(jobs) == batchSize || size >= batchBytes {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := in.err; err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fail(fmt.Errorf("batchq: line %d: longer than %d bytes; %s", tally.lines+1, maxLineBytes, notWritten(first)))
		}
		return fail(fmt.Errorf("batchq: reading line %d: %w; %s", tally.lines+1, err, notWritten(first)))
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	return tally, nil
}

// lineReader hands over the lines of an input one by one.
type lineReader struct {
	lines chan []byte
	err   error // why reading stopped, once lines is closed; nil at the end
}

// readLines reads r's lines on a goroutine of its own until r ends or stop
// is closed. A read cannot be cancelled, and the signals that cancel a
// command no longer end the process: read inline, an interrupt would wait
// for standard input's next line.
func readLines(r io.Reader, stop <-chan struct{}) *lineReader {
	in := &lineReader{lines: make(chan []byte)}
	go func() {
		defer close(in.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxLineBytes)
		for sc.Scan() {
			select {
			// The scanner reuses its buffer for the next line.
			case in.lines <- bytes.Clone(sc.Bytes()):
			case <-stop:
				return
			}
		}
		in.err = sc.Err()
	}()
	return in
}

// batchError says which line of a batch the queue refused, and why.
func batchError(err error, jobs []queue.NewJob, lineNos []int, first int) error {
	var inv *queue.InvalidJobError
	if errors.As(err, &inv) && inv.Index >= 1 && inv.Index <= len(lineNos) {
		errors.As(ttlRefusal(inv, jobs[inv.Index-1]), &inv)
		return fmt.Errorf("batchq: line %d: %s: %s; %s", lineNos[inv.Index-1], inv.Field, inv.Rule, notWritten(first))
	}
	if errors.Is(err, queue.ErrUnknownQueue) {
		// The error names the queue; the first line that names it is the one
		// to fix.
		for i, j := range jobs {
			if strings.Contains(err.Error(), fmt.Sprintf("%q", j.Queue)) {
				return fmt.Errorf("batchq: line %d: unknown queue %q; %s", lineNos[i], j.Queue, notWritten(first))
			}
		}
	}
	lines := fmt.Sprintf("lines %d-%d", first, lineNos[len(lineNos)-1])
	if first == lineNos[len(lineNos)-1] {
		lines = fmt.Sprintf("line %d", first)
	}
	return &batchFailure{
		msg:   fmt.Sprintf("batchq: %s: %s; %s", lines, strings.TrimPrefix(err.Error(), "batchq: "), notWritten(first)),
		cause: err,
	}
}

// batchFailure says which lines a batch the database refused held, and keeps
// why: a database nobody migrated is still named as such.
type batchFailure struct {
	msg   string
	cause error
}

func (e *batchFailure) Error() string { return e.msg }

func (e *batchFailure) Unwrap() error { return e.cause }

func notWritten(first int) string {
	if first == 1 {
		return "nothing was enqueued"
	}
	return fmt.Sprintf("lines before %d were enqueued, nothing from line %d on", first, first)
}
