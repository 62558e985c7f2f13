package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "look at, cancel and retry single jobs",
		Subcommands: []*cli.Command{
			{
				Name:      "show",
				Usage:     "show a job: its state if unfinished, its outcome if finished",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(jobsShow),
			},
			{
				Name:      "cancel",
				Usage:     "cancel a job that is queued or waiting to retry (a running job cannot be cancelled)",
				ArgsUsage: "ID",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "reason", Usage: "why, recorded as the outcome's error", Value: "cancelled by operator"},
					commandFormatFlag(),
				},
				Action: withQueueClient(jobsCancel),
			},
			{
				Name:  "retry",
				Usage: "make a job waiting to retry due now, or resubmit a failed, discarded, expired or cancelled job as a new job",
				Description: `A job waiting to retry becomes due now; the next maintenance pass of a worker returns it to
its tenant's queue. A job that failed, was discarded, expired or was cancelled is enqueued again as a new job from its
outcome (same queue, tenant, kind, cost, attempts and payload, with the time to live it had), and the
new job's id is printed. Resubmitting the same job again returns that copy while the copy is unfinished,
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
		"unique_key", "error", "payload", "result")
	d.add(j.ID, j.Queue, j.Tenant, j.Kind, j.State, j.Finished, j.Cost, j.ActualCost, j.Attempt, j.MaxAttempts,
		j.EnqueuedAt, j.FirstClaimedAt, j.FinishedAt, j.Deadline, j.RunAfter, j.LeaseExpiresAt, j.Worker,
		j.UniqueKey, j.Error, j.Payload, j.Result)
	return writeRecord(c, d)
}

func jobsCancel(c *cli.Context, client *queue.Client) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	if err := client.Cancel(c.Context, id, c.String("reason")); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			return whyNot(c, client, id, "cancelled", "only queued or retrying jobs can be cancelled")
		}
		return err
	}
	d := newDataset("id", "outcome")
	d.add(id, "cancelled")
	return writeResult(c, fmt.Sprintf("cancelled job %d", id), d)
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
				return whyNot(c, client, id, "retried", "only jobs waiting to retry, or that failed, were discarded, expired or were cancelled, can be retried")
			}
			return err
		}
		d.add(id, "due_now", nil)
		return writeResult(c, fmt.Sprintf("job %d is due now; a worker's next maintenance pass requeues it", id), d)
	}
	res, err := client.Resubmit(c.Context, id)
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
