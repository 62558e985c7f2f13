package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "delete outcomes that finished longer ago than --older-than",
		Description: `Deletes from batchq.outcomes, in batches of their own transactions, every outcome that finished
before now less --older-than, and prints how many. The audit trail and the usage reports lose those
jobs. An outcome whose unique key still deduplicates enqueues (it finished within its queue's
--unique-for) is kept until that window has passed.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "older-than", Usage: "required: how old an outcome must be to go, like 720h or 30d"},
			commandFormatFlag(),
		},
		Action: withQueueClient(pruneAction),
	}
}

func pruneAction(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if !c.IsSet("older-than") {
		return usagef("batchq: prune: --older-than is required, like --older-than 30d")
	}
	s := c.String("older-than")
	age, err := parseDuration(s)
	switch {
	case errors.Is(err, errNotDuration):
		return usagef("batchq: --older-than %q: not a duration like 720h or 30d", s)
	case err != nil:
		return usagef("batchq: --older-than %q: %v", s, err)
	case age < 0:
		return usagef("batchq: --older-than %q: must not be negative", s)
	}
	before := time.Now().Add(-age)
	n, err := client.PruneBefore(c.Context, before)
	if err != nil {
		return fmt.Errorf("%w (%d outcomes were pruned before the error)", err, n)
	}
	d := newDataset("pruned", "finished_before")
	d.add(n, before)
	return writeResult(c, fmt.Sprintf("pruned %s that finished before %s", counted(n, "outcome", "outcomes"),
		before.UTC().Format(time.RFC3339)), d)
}
