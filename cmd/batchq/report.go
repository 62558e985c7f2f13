package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

// The reports read the views and the function that analysts query in SQL
// (migrations/00004_reports.sql; README.md, "Reports in SQL").

func reportCommand() *cli.Command {
	queueFlag := &cli.StringFlag{Name: "queue", Usage: "only this queue (default: all)"}
	since := &cli.StringFlag{Name: "since", Usage: "start of the window: RFC 3339, or a duration before now like 24h or 7d (default: 24h before --until)"}
	until := &cli.StringFlag{Name: "until", Usage: "end of the window, excluded: RFC 3339, or a duration before now (default: now)"}
	return &cli.Command{
		Name:  "report",
		Usage: "backlog, per-tenant usage, outcomes and quota reports",
		Subcommands: []*cli.Command{
			{
				Name:  "backlog",
				Usage: "what each tenant has queued, running, retrying and scheduled, per queue, now",
				Description: `Reads the view batchq.backlog. oldest_queued_at is the enqueue time of the tenant's oldest queued job;
scheduled counts the jobs waiting for their run-at (not yet in the fair order, not counted as queued),
and next_run_at is the earliest of their run-at times;
nearest_deadline is the earliest deadline of its waiting jobs; oldest_queued_age is how
long the oldest queued job has waited; paused says whether the queue is paused (batchq queues pause),
and so hands out none of it.`,
				Flags:  []cli.Flag{queueFlag, commandFormatFlag()},
				Action: withQueueClient(reportBacklog),
			},
			{
				Name:  "tenants",
				Usage: "per queue and tenant: jobs and tokens by outcome, waits, token share against weight share",
				Description: `Reads batchq.tenant_usage(since, until): the jobs that finished in the window. Tokens by outcome are
actual costs for succeeded jobs (estimates where none was reported) and estimates for the others.
served_tokens are what the scheduler charged: each attempt of a job at its estimate (a job retried
after a failure or a lost lease is charged for every attempt), the last attempt of a succeeded job
at its actual cost; a job that went while queued is refunded. token_share is
the tenant's part of its queue's served tokens, to compare with weight_share, its weight's part
among the tenants active in the queue in the window. wait_p50 and wait_p95 are from enqueue to first
claim.`,
				Flags:  []cli.Flag{queueFlag, since, until, commandFormatFlag()},
				Action: withQueueClient(reportTenants),
			},
			{
				Name:  "outcomes",
				Usage: "the audit trail: finished jobs, newest first, with wait and run durations",
				Description: `Reads the view batchq.audit. wait is from enqueue to first claim, run from first claim to finish
(every attempt and the backoffs between them), total from enqueue to finish. run_at is the run-at of
a job that finished while still scheduled (cancelled, or expired, before it came due), empty for
every other; batchq jobs retry counts the copy's time to live from it.`,
				Flags: []cli.Flag{
					queueFlag,
					&cli.StringFlag{Name: "tenant", Usage: "only this tenant (default: all)"},
					&cli.StringFlag{Name: "outcome", Usage: "only this outcome: succeeded, failed, expired, cancelled or discarded"},
					since, until,
					&cli.IntFlag{Name: "limit", Usage: "at most this many rows", Value: 100},
					commandFormatFlag(),
				},
				Action: withQueueClient(reportOutcomes),
			},
			{
				Name:   "quota",
				Usage:  "the fleet's shared quota state per quota key: limits, what is left, resets, pauses",
				Flags:  []cli.Flag{commandFormatFlag()},
				Action: withQueueClient(reportQuota),
			},
		},
	}
}

func reportBacklog(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := checkQueue(c, client); err != nil {
		return err
	}
	rows, err := client.Backlog(c.Context, c.String("queue"))
	if err != nil {
		return err
	}
	// The age is last: it alone changes from one run to the next.
	d := newDataset("queue", "tenant", "queued", "queued_tokens", "running", "retrying", "scheduled", "paused",
		"oldest_queued_at", "next_run_at", "nearest_deadline", "oldest_queued_age")
	for _, r := range rows {
		d.add(r.Queue, r.Tenant, r.QueuedJobs, r.QueuedTokens, r.RunningJobs, r.RetryingJobs, r.ScheduledJobs, r.Paused,
			r.OldestQueuedAt, r.NextRunAt, r.NearestDeadline, r.OldestQueuedAge)
	}
	return writeList(c, d)
}

// checkQueue returns ErrUnknownQueue, as enqueue does, when --queue names no
// queue: the report would be empty, as for a queue with nothing in it.
func checkQueue(c *cli.Context, client *queue.Client) error {
	unknown, err := checkHistoryQueue(c, client)
	if err != nil {
		return err
	}
	return unknown
}

// checkHistoryQueue is checkQueue for the reports of finished jobs, whose
// outcomes outlive their queue (queues delete keeps them): a name that is
// no queue now is refused only when the report finds nothing of it either
// (refuseIfNone), so a deleted queue's history can still be read by name.
func checkHistoryQueue(c *cli.Context, client *queue.Client) (refuseIfNone error, err error) {
	if err := refuseEmpty(c, "leave it out for every queue", "queue"); err != nil {
		return nil, err
	}
	name := c.String("queue")
	if name == "" {
		return nil, nil
	}
	if _, err := client.Queue(c.Context, name); err != nil {
		if errors.Is(err, queue.ErrUnknownQueue) && queue.ValidQueueName(name) {
			return err, nil
		}
		return nil, err
	}
	return nil, nil
}

// window reads --since and --until.
func window(c *cli.Context) (since, until time.Time, err error) {
	now := time.Now()
	until = now
	if c.IsSet("until") {
		if until, err = parseWhen("until", c.String("until"), now); err != nil {
			return since, until, err
		}
	}
	// A window of a day by default, ending where --until says.
	since = until.Add(-24 * time.Hour)
	if c.IsSet("since") {
		if since, err = parseWhen("since", c.String("since"), now); err != nil {
			return since, until, err
		}
	}
	if !since.Before(until) {
		return since, until, usagef("batchq: --since %s is not before --until %s",
			since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	return since, until, nil
}

func reportTenants(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	since, until, err := window(c)
	if err != nil {
		return err
	}
	unknown, err := checkHistoryQueue(c, client)
	if err != nil {
		return err
	}
	rows, err := client.TenantUsage(c.Context, since, until, c.String("queue"))
	if err != nil {
		return err
	}
	if unknown != nil && len(rows) == 0 {
		return noHistory(unknown, since, until)
	}
	d := newDataset("queue", "tenant", "jobs", "succeeded", "failed", "expired", "cancelled", "discarded",
		"succeeded_tokens", "failed_tokens", "expired_tokens", "cancelled_tokens", "discarded_tokens",
		"actual_tokens", "served_tokens", "token_share", "weight", "weight_share", "wait_p50", "wait_p95")
	// A queue that served no tokens in the window has no shares to give: its
	// tenants' token_share is empty (null in JSON), as batchq.tenant_usage
	// has it, not 0, which would read as starved.
	served := map[string]int64{}
	for _, r := range rows {
		served[r.Queue] += r.ServedTokens
	}
	for _, r := range rows {
		var share *float64
		if served[r.Queue] > 0 {
			share = &r.TokenShare
		}
		d.add(r.Queue, r.Tenant, r.Jobs, r.Succeeded, r.Failed, r.Expired, r.Cancelled, r.Discarded,
			r.SucceededTokens, r.FailedTokens, r.ExpiredTokens, r.CancelledTokens, r.DiscardedTokens,
			r.ActualTokens, r.ServedTokens,
			share, weightCell(r.Weight), r.WeightShare, r.WaitP50, r.WaitP95)
	}
	return writeList(c, d)
}

var outcomeNames = map[string]bool{"succeeded": true, "failed": true, "expired": true, "cancelled": true, "discarded": true}

func reportOutcomes(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	since, until, err := window(c)
	if err != nil {
		return err
	}
	if err := refuseEmpty(c, "leave it out for every %s", "tenant", "outcome"); err != nil {
		return err
	}
	if o := c.String("outcome"); o != "" && !outcomeNames[o] {
		return usagef("batchq: --outcome %q: must be succeeded, failed, expired, cancelled or discarded", o)
	}
	if n := c.Int("limit"); n < 1 {
		return usagef("batchq: --limit %d: must be 1 or more", n)
	}
	// A name no tenant can have matches nothing: refused by the tenant
	// name's rule, as jobs cancel --tenant refuses it.
	if rule := queue.NameRule(c.String("tenant")); c.String("tenant") != "" && rule != "" {
		return usagef("batchq: --tenant: %s", rule)
	}
	unknown, err := checkHistoryQueue(c, client)
	if err != nil {
		return err
	}
	rows, err := client.Outcomes(c.Context, &queue.OutcomesOpts{
		Queue: c.String("queue"), Tenant: c.String("tenant"), Outcome: c.String("outcome"),
		Since: since, Until: until, Limit: c.Int("limit"),
	})
	if err != nil {
		return err
	}
	if unknown != nil && len(rows) == 0 {
		return noHistory(unknown, since, until)
	}
	// run_at came after the others: last, so that a reader of the CSV by
	// position reads the columns it read before.
	d := newDataset("job_id", "queue", "tenant", "kind", "outcome", "attempts", "estimated_cost", "actual_cost",
		"enqueued_at", "finished_at", "wait", "run", "total", "worker", "error", "run_at")
	for _, r := range rows {
		d.add(r.JobID, r.Queue, r.Tenant, r.Kind, r.Outcome, r.Attempts, r.EstimatedCost, r.ActualCost,
			r.EnqueuedAt, r.FinishedAt, r.Wait, r.Run, r.Total, r.Worker, r.Error, r.RunAt)
	}
	return writeList(c, d)
}

// noHistory is the refusal of a history report for a name that is no queue
// and has no outcome in the window.
func noHistory(unknown error, since, until time.Time) error {
	return fmt.Errorf("%w, and no outcome of it matches between %s and %s", unknown,
		since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
}

func reportQuota(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	rows, err := client.Quota(c.Context)
	if err != nil {
		return err
	}
	d := newDataset("key", "requests_remaining", "requests_limit", "requests_reset_at",
		"tokens_remaining", "tokens_limit", "tokens_reset_at", "paused_until", "observed_at", "updated_at")
	for _, r := range rows {
		d.add(r.Key, r.RequestsRemaining, r.RequestsLimit, r.RequestsResetAt,
			r.TokensRemaining, r.TokensLimit, r.TokensResetAt, r.PausedUntil, r.ObservedAt, r.UpdatedAt)
	}
	return writeList(c, d)
}
