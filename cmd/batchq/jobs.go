package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "look at, cancel and retry jobs",
		Subcommands: []*cli.Command{
			{
				Name:      "show",
				Usage:     "show a job: its state if unfinished, its outcome if finished",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(jobsShow),
			},
			{
				Name:  "cancel",
				Usage: "cancel one job, or every unfinished job of a queue that matches --tenant, --kind, --before and --after",
				Description: `One job: batchq jobs cancel ID. A job that has not started (queued, scheduled, or waiting to retry)
finishes at once with outcome 'cancelled', and its cost leaves its tenant's place in the fair order. A
running job is asked to stop: its worker cancels the handler's context at its next heartbeat (an HTTP
worker aborts its request), and it finishes as 'cancelled' unless it succeeds first. It is not retried.

In bulk: batchq jobs cancel --queue NAME [--tenant T] [--kind K] [--before WHEN] [--after WHEN].
Without --yes it only counts the jobs it would cancel and ask to stop. With --yes it cancels them a
transaction per 1,000 jobs, in id order; what is done stays done if it is interrupted, and running it
again finishes the rest. Jobs enqueued while it runs may be left.`,
				ArgsUsage: "[ID]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "reason", Usage: "why, recorded as the outcome's error", Value: "cancelled by operator"},
					&cli.StringFlag{Name: "queue", Usage: "cancel in bulk: the queue's unfinished jobs (instead of an ID)"},
					&cli.StringFlag{Name: "tenant", Usage: "with --queue: only this tenant's jobs", DefaultText: "every tenant"},
					&cli.StringFlag{Name: "kind", Usage: "with --queue: only jobs of this kind", DefaultText: "every kind"},
					&cli.StringFlag{Name: "before", Usage: "with --queue: only jobs enqueued before this time: RFC 3339, or a duration before now (90m, 2d)"},
					&cli.StringFlag{Name: "after", Usage: "with --queue: only jobs enqueued at or after this time: RFC 3339, or a duration before now (90m, 2d)"},
					&cli.BoolFlag{Name: "yes", Usage: "with --queue: cancel them; without it the command only counts them"},
					commandFormatFlag(),
				},
				Action: withQueueClient(jobsCancel),
			},
			{
				Name:  "retry",
				Usage: "make a job waiting to retry (or scheduled) due now, or resubmit a failed, discarded, expired or cancelled job as a new job",
				Description: `A job waiting to retry, or scheduled for later, becomes due now; the next maintenance pass of a
worker moves it to the end of its tenant's queue. A job that failed, was discarded, expired or was cancelled is enqueued again as a new job from its
outcome (same queue, tenant, kind, cost, attempts and payload, with the time to live it had, from its
run-at for one cancelled or expired while scheduled), and the new job's id is printed. Resubmitting the same job again returns that copy while the copy is unfinished,
or within the queue's --unique-for after it finished; later, it makes another copy.`,
				ArgsUsage: "ID",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(jobsRetry),
			},
		},
	}
}

func jobArg(c *cli.Context) (int64, error) {
	args, err := commandArgs(c, "ID")
	if err != nil {
		return 0, err
	}
	return parseJobID(args[0])
}

func jobsShow(c *cli.Context, client *queue.Client) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	j, err := client.JobInfo(c.Context, id)
	if err != nil {
		return err
	}
	d := newDataset("id", "queue", "tenant", "kind", "state", "finished", "cost", "actual_cost", "attempt", "max_attempts",
		"enqueued_at", "first_claimed_at", "finished_at", "deadline", "run_after", "lease_expires_at", "worker",
		"cancel_requested_at", "unique_key", "error", "payload", "result", "note")
	d.add(j.ID, j.Queue, j.Tenant, j.Kind, j.State, j.Finished, j.Cost, j.ActualCost, j.Attempt, j.MaxAttempts,
		j.EnqueuedAt, j.FirstClaimedAt, j.FinishedAt, j.Deadline, j.RunAfter, j.LeaseExpiresAt, j.Worker,
		j.CancelRequestedAt, j.UniqueKey, j.Error, j.Payload, j.Result, jobNote(j))
	return writeRecord(c, d)
}

// jobNote explains what jobs show leaves blank, or a stop that is coming.
func jobNote(j queue.JobInfo) string {
	switch {
	case j.Finished && j.State == "succeeded":
		return "the payload is not kept: a succeeded job's outcome keeps its result; only outcomes that may be resubmitted keep the payload"
	case !j.Finished && j.CancelRequestedAt != nil:
		return "cancel requested: its worker stops it at its next heartbeat, and it finishes as cancelled"
	}
	return ""
}

// bulkCancelFlags are the flags of a cancel by filter.
var bulkCancelFlags = []string{"tenant", "kind", "before", "after", "yes"}

func jobsCancel(c *cli.Context, client *queue.Client) error {
	args, err := commandArgsAtLeast(c, 0, "ID")
	if err != nil {
		return err
	}
	// Refused as the SQL functions refuse it, where the Go API cuts it.
	if n := len(c.String("reason")); n > queue.MaxReasonBytes {
		return usagef("batchq: jobs cancel: --reason: must be at most %d bytes (got %d)", queue.MaxReasonBytes, n)
	}
	if len(args) == 0 {
		if !c.IsSet("queue") {
			return usagef("batchq: jobs cancel: give a job ID, or --queue to cancel in bulk; usage: batchq jobs cancel [ID]")
		}
		return jobsCancelMany(c, client)
	}
	for _, f := range append([]string{"queue"}, bulkCancelFlags...) {
		if c.IsSet(f) {
			return usagef("batchq: jobs cancel: --%s cancels in bulk, not a job ID: give one or the other", f)
		}
	}
	id, err := parseJobID(args[0])
	if err != nil {
		return err
	}
	st, err := client.CancelJob(c.Context, id, c.String("reason"))
	if err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			return whyNot(c, client, id, "cancelled", "only unfinished jobs can be cancelled")
		}
		return err
	}
	d := newDataset("id", "action")
	switch {
	case st.Stopping > 0:
		d.add(id, "stopping")
		return writeResult(c, fmt.Sprintf("job %d is running: its worker stops it at its next heartbeat, and it finishes as cancelled", id), d)
	case st.Cancelled == 0:
		// Running, and asked to stop before: as the bulk cancel, it keeps
		// the first request's time and reason, which this one must not
		// pass for.
		d.add(id, "already_stopping")
		return writeResult(c, fmt.Sprintf("job %d is running and was already asked to stop: it keeps the first request's reason; "+
			"its worker stops it at its next heartbeat, and it finishes as cancelled", id), d)
	}
	d.add(id, "cancelled")
	return writeResult(c, fmt.Sprintf("cancelled job %d", id), d)
}

// cancelInterrupted is what a bulk cancel an interrupt (Ctrl-C, SIGTERM)
// stopped says, as enqueue --file says its own: what the batches before it
// did (st), failing as it does (exit 1). The interrupt cancels the batch in
// flight.
func cancelInterrupted(st queue.CancelStats) error {
	if st == (queue.CancelStats{}) {
		return errors.New("batchq: interrupted; nothing was cancelled")
	}
	return fmt.Errorf("batchq: interrupted; before it, cancelled %d and asked %d running to stop (run it again for the rest)",
		st.Cancelled, st.Stopping)
}

// jobsCancelMany counts, or with --yes cancels, the jobs a filter matches.
func jobsCancelMany(c *cli.Context, client *queue.Client) error {
	f := queue.JobFilter{Queue: c.String("queue"), Tenant: c.String("tenant"), Kind: c.String("kind")}
	if err := refuseEmpty(c, "leave it out for every %s", "tenant", "kind"); err != nil {
		return err
	}
	now := time.Now()
	var err error
	if c.IsSet("before") {
		if f.EnqueuedBefore, err = parseWhen("before", c.String("before"), now); err != nil {
			return err
		}
	}
	if c.IsSet("after") {
		if f.EnqueuedAfter, err = parseWhen("after", c.String("after"), now); err != nil {
			return err
		}
	}
	if !f.EnqueuedBefore.IsZero() && !f.EnqueuedAfter.IsZero() && !f.EnqueuedAfter.Before(f.EnqueuedBefore) {
		return usagef("batchq: --after %s: must be before --before %s, or no job matches",
			f.EnqueuedAfter.UTC().Format(time.RFC3339), f.EnqueuedBefore.UTC().Format(time.RFC3339))
	}
	what := describeFilter(f)
	d := newDataset("queue", "tenant", "kind", "enqueued_after", "enqueued_before", "dry_run",
		"cancelled", "stopping", "queued", "retrying", "scheduled", "running", "tokens")
	row := func(dry bool, cancelled, stopping any, n queue.JobCount) {
		var before, after *time.Time
		if !f.EnqueuedBefore.IsZero() {
			t := f.EnqueuedBefore.UTC()
			before = &t
		}
		if !f.EnqueuedAfter.IsZero() {
			t := f.EnqueuedAfter.UTC()
			after = &t
		}
		d.add(f.Queue, f.Tenant, f.Kind, after, before, dry, cancelled, stopping, n.Queued, n.Retrying, n.Scheduled,
			n.Running, n.Tokens)
	}
	n, err := client.CountJobs(c.Context, f)
	if err != nil && c.Context.Err() != nil {
		return cancelInterrupted(queue.CancelStats{})
	}
	if err != nil {
		return filterUsage(err)
	}
	if !c.Bool("yes") {
		row(true, nil, nil, n)
		sentence := fmt.Sprintf("%s: %d queued, %d retrying, %d scheduled and %d running (%d tokens); nothing changed: "+
			"run again with --yes to cancel the waiting ones and ask the running ones to stop",
			what, n.Queued, n.Retrying, n.Scheduled, n.Running, n.Tokens)
		if n.Total() == 0 {
			sentence = what + ": none; nothing to cancel"
		}
		return writeResult(c, sentence, d)
	}
	st, err := client.CancelJobs(c.Context, f, c.String("reason"))
	if err != nil && c.Context.Err() != nil {
		return cancelInterrupted(st)
	}
	if err != nil && st == (queue.CancelStats{}) {
		return filterUsage(err)
	}
	if err != nil {
		return fmt.Errorf("%w; before it, cancelled %d and asked %d running to stop (run it again for the rest)", err, st.Cancelled, st.Stopping)
	}
	row(false, st.Cancelled, st.Stopping, n)
	return writeResult(c, fmt.Sprintf("%s: cancelled %d, asked %d running to stop", what, st.Cancelled, st.Stopping), d)
}

// describeFilter says in words which jobs f picks.
func describeFilter(f queue.JobFilter) string {
	s := "jobs of queue " + f.Queue
	if f.Tenant != "" {
		s += ", tenant " + f.Tenant
	}
	if f.Kind != "" {
		s += ", kind " + f.Kind
	}
	if !f.EnqueuedAfter.IsZero() {
		s += ", enqueued at or after " + f.EnqueuedAfter.UTC().Format(time.RFC3339)
	}
	if !f.EnqueuedBefore.IsZero() {
		s += ", enqueued before " + f.EnqueuedBefore.UTC().Format(time.RFC3339)
	}
	return s
}

// filterUsage makes an unknown queue or a bad name of a filter a usage
// error, named by its flag.
func filterUsage(err error) error {
	var bad *queue.InvalidJobError
	switch {
	case errors.Is(err, queue.ErrUnknownQueue):
		return usageError{msg: err.Error()}
	case errors.As(err, &bad):
		return usagef("batchq: --%s: %s", bad.Field, bad.Rule)
	}
	return err
}

func jobsRetry(c *cli.Context, client *queue.Client) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	j, err := client.JobInfo(c.Context, id)
	if err != nil {
		return err
	}
	d := newDataset("id", "action", "new_id")
	if !j.Finished {
		if err := client.RetryNow(c.Context, id); err != nil {
			if errors.Is(err, queue.ErrNotFound) {
				return whyNot(c, client, id, "retried", "only jobs waiting to retry or scheduled, or that failed, were discarded, expired or were cancelled, can be retried")
			}
			return err
		}
		d.add(id, "due_now", nil)
		return writeResult(c, fmt.Sprintf("job %d is due now; a worker's next maintenance pass requeues it", id), d)
	}
	res, err := client.Resubmit(c.Context, id)
	if errors.Is(err, queue.ErrUnknownQueue) {
		// The command line named a job, not a queue: nothing to correct
		// in it, so not a usage error.
		return fmt.Errorf("batchq: job %d cannot be resubmitted: its queue %s no longer exists; "+
			"create it again (batchq queues create %s) to resubmit it", id, j.Queue, j.Queue)
	}
	if err != nil {
		return err
	}
	if res.Duplicate {
		d.add(id, "already_resubmitted", res.ID)
		return writeResult(c, fmt.Sprintf("job %d was already resubmitted as job %d", id, res.ID), d)
	}
	d.add(id, "resubmitted", res.ID)
	return writeResult(c, fmt.Sprintf("resubmitted job %d as job %d", id, res.ID), d)
}

// whyNot explains a refusal with the job's state when the job exists.
func whyNot(c *cli.Context, client *queue.Client, id int64, verb, rule string) error {
	j, err := client.JobInfo(c.Context, id)
	if err != nil {
		return err
	}
	if j.Finished {
		return fmt.Errorf("batchq: job %d cannot be %s: it finished (%s); %s", id, verb, j.State, rule)
	}
	return fmt.Errorf("batchq: job %d cannot be %s: it is %s; %s", id, verb, j.State, rule)
}
