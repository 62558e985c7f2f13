package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func queuesCommand() *cli.Command {
	return &cli.Command{
		Name:  "queues",
		Usage: "create, change, pause, resume, delete and list queues",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a queue; settings not given take their defaults",
				ArgsUsage: "NAME",
				Flags:     append(queueSettingFlags(true), commandFormatFlag()),
				Action:    withQueueClient(queuesCreate),
			},
			{
				Name:      "set",
				Usage:     "change settings of a queue; those not given stay as they are",
				ArgsUsage: "NAME",
				Flags:     append(queueSettingFlags(false), commandFormatFlag()),
				Action:    withQueueClient(queuesSet),
			},
			{
				Name:      "pause",
				Usage:     "stop a queue's claims: workers claim nothing until it is resumed; enqueues go on, running jobs finish",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(queuesPause),
			},
			{
				Name:      "resume",
				Usage:     "let a paused queue's workers claim again",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(queuesResume),
			},
			{
				Name:      "delete",
				Usage:     "delete a queue that holds no unfinished job, with its schedules (its outcomes stay)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(queuesDelete),
			},
			{
				Name:   "list",
				Usage:  "list every queue's settings, and whether it is paused",
				Flags:  []cli.Flag{commandFormatFlag()},
				Action: withQueueClient(queuesList),
			},
		},
	}
}

// queueSettingFlags are the settings of queues create and queues set. With
// create, a setting not given takes its default; with set, it is unchanged.
func queueSettingFlags(create bool) []cli.Flag {
	def := func(v any) string {
		if create {
			return fmt.Sprint(v)
		}
		return "unchanged"
	}
	return []cli.Flag{
		&cli.Int64Flag{Name: "quantum", Usage: "cost (tokens) a tenant of weight 1 is granted per round",
			DefaultText: def(queue.DefaultQuantum)},
		&cli.IntFlag{Name: "max-per-tenant", Usage: "queued jobs a tenant may hold, unless it has its own bound",
			DefaultText: def(queue.DefaultMaxPerTenant)},
		daysFlag("default-ttl", "deadline of a job enqueued without one, counted from its enqueue, like 36h or 7d",
			def(queue.DefaultTTL)),
		daysFlag("lease", "how long a claim holds a job before it may be rescued, at least 1s",
			def(queue.DefaultLease)),
		&cli.IntFlag{Name: "max-attempts", Usage: "attempts of a job enqueued without its own",
			DefaultText: def(queue.DefaultMaxAttempts)},
		daysFlag("unique-for", "how long a finished job's unique key still deduplicates enqueues, like 1h or 30d (0s: only while unfinished)",
			def(time.Duration(0))),
	}
}

// queueUpdate collects the settings given on the command line.
func queueUpdate(c *cli.Context) (queue.QueueUpdate, int) {
	var u queue.QueueUpdate
	n := 0
	if c.IsSet("quantum") {
		v := c.Int64("quantum")
		u.Quantum, n = &v, n+1
	}
	if c.IsSet("max-per-tenant") {
		v := c.Int("max-per-tenant")
		u.MaxPerTenant, n = &v, n+1
	}
	if c.IsSet("default-ttl") {
		v := daysDuration(c, "default-ttl")
		u.DefaultTTL, n = &v, n+1
	}
	if c.IsSet("lease") {
		v := daysDuration(c, "lease")
		u.Lease, n = &v, n+1
	}
	if c.IsSet("max-attempts") {
		v := c.Int("max-attempts")
		u.MaxAttempts, n = &v, n+1
	}
	if c.IsSet("unique-for") {
		v := daysDuration(c, "unique-for")
		u.UniqueFor, n = &v, n+1
	}
	return u, n
}

func queuesCreate(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	u, _ := queueUpdate(c)
	qc := queue.QueueConfig{Name: args[0]}
	// A zero in QueueConfig means the default; given on the command line it
	// is a mistake, said as such.
	// Each says the rule queues set says of the same zero.
	for _, z := range []struct {
		flag string
		zero bool
		rule string
	}{
		{"quantum", u.Quantum != nil && *u.Quantum == 0, fmt.Sprintf("must be in 1..%d (got 0)", queue.MaxCost)},
		{"max-per-tenant", u.MaxPerTenant != nil && *u.MaxPerTenant == 0, fmt.Sprintf("must be in 1..%d (got 0)", math.MaxInt32)},
		{"default-ttl", u.DefaultTTL != nil && *u.DefaultTTL == 0, "must be > 0 (got 0s)"},
		{"lease", u.Lease != nil && *u.Lease == 0, "must be at least 1s (got 0s)"},
		{"max-attempts", u.MaxAttempts != nil && *u.MaxAttempts == 0, fmt.Sprintf("must be in 1..%d (got 0)", queue.MaxAttemptsLimit)},
	} {
		if z.zero {
			return usagef("batchq: --%s: %s", z.flag, z.rule)
		}
	}
	qc.Quantum = derefOr(u.Quantum, 0)
	qc.MaxPerTenant = derefOr(u.MaxPerTenant, 0)
	qc.DefaultTTL = derefOr(u.DefaultTTL, 0)
	qc.Lease = derefOr(u.Lease, 0)
	qc.MaxAttempts = derefOr(u.MaxAttempts, 0)
	qc.UniqueFor = derefOr(u.UniqueFor, 0)
	if err := client.CreateQueue(c.Context, qc); err != nil {
		return settingUsage(err, "queue name")
	}
	got, err := client.Queue(c.Context, qc.Name)
	if err != nil {
		return err
	}
	return writeResult(c, "created "+describeQueue(got), queueDataset(got))
}

func queuesSet(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	u, n := queueUpdate(c)
	if n == 0 {
		return usagef("batchq: queues set: give at least one setting to change (see batchq queues set --help)")
	}
	got, err := client.UpdateQueue(c.Context, args[0], u)
	if err != nil {
		return settingUsage(err, "queue name")
	}
	return writeResult(c, "updated "+describeQueue(got), queueDataset(got))
}

func queuesList(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	qs, err := client.Queues(c.Context)
	if err != nil {
		return err
	}
	return writeList(c, queueDataset(qs...))
}

func queuesPause(c *cli.Context, client *queue.Client) error {
	return pauseOrResume(c, client, client.PauseQueue, "paused", "was paused already")
}

func queuesResume(c *cli.Context, client *queue.Client) error {
	return pauseOrResume(c, client, client.ResumeQueue, "resumed", "was not paused")
}

func pauseOrResume(c *cli.Context, client *queue.Client, fn func(context.Context, string) (bool, error), done, already string) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	changed, err := fn(c.Context, args[0])
	if errors.Is(err, queue.ErrUnknownQueue) {
		return usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	got, err := client.Queue(c.Context, args[0])
	if err != nil {
		return err
	}
	sentence := fmt.Sprintf("%s queue %s", done, got.Name)
	if !changed {
		sentence = fmt.Sprintf("queue %s %s", got.Name, already)
	}
	// changed: whether this command paused (resumed) it, as the sentence says.
	return writeResult(c, sentence, queueDataset(got).with("changed", changed))
}

func queuesDelete(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	del, err := client.DeleteQueue(c.Context, args[0])
	if err != nil {
		// ErrUnknownQueue exits 2; a queue that holds jobs, 1.
		return err
	}
	sentence := fmt.Sprintf("deleted queue %s and its %s", args[0], howMany(del.Schedules, "schedule", "schedules"))
	if del.Schedules == 0 {
		sentence = fmt.Sprintf("deleted queue %s; it had no schedules", args[0])
	}
	d := newDataset("deleted", "schedules_deleted")
	d.add(args[0], del.Schedules)
	return writeResult(c, sentence, d)
}

func queueDataset(qs ...queue.QueueConfig) *dataset {
	d := newDataset("name", "quantum", "max_per_tenant", "default_ttl", "lease", "max_attempts", "unique_for", "paused_at")
	for _, q := range qs {
		var paused *time.Time
		if q.PausedAt != nil {
			t := q.PausedAt.UTC()
			paused = &t
		}
		d.add(q.Name, q.Quantum, q.MaxPerTenant, q.DefaultTTL, q.Lease, q.MaxAttempts, q.UniqueFor, paused)
	}
	return d
}

func describeQueue(q queue.QueueConfig) string {
	return fmt.Sprintf("queue %s: quantum %d, max-per-tenant %d, default-ttl %s, lease %s, max-attempts %d, unique-for %s",
		q.Name, q.Quantum, q.MaxPerTenant, q.DefaultTTL, q.Lease, q.MaxAttempts, q.UniqueFor)
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
