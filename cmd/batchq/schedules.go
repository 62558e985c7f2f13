package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func schedulesCommand() *cli.Command {
	return &cli.Command{
		Name:  "schedules",
		Usage: "create, change, pause, resume, delete and list recurring schedules",
		Description: `A schedule enqueues one job at every tick of a cron expression, read in its time zone: five
fields (minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-6 or
SUN-SAT with Sunday 0; 7 is refused), or a descriptor such as @daily or @every 2h.
Workers' maintenance (batchq work) fires the ticks of their queue; each tick enqueues exactly one
job, whose unique key is batchq:schedule:NAME:TICK, however many workers run. Ticks that passed
while no worker ran are skipped (--missed skip) or caught up by one job (--missed one, the
default); a tick found within a minute of its time (a worker's pass counts its
--maintain-interval more) is on time and enqueues its job, however many ticks one pass finds. A daylight-saving change skips the
ticks of the hour it skips, and ticks twice in the hour it repeats (as github.com/robfig/cron/v3 does).
A paused schedule has no ticks: those that fall while it is paused are not owed. A tick that was
already due when it was paused, and not fired yet, is owed: resume handles it as a missed tick
(--missed one enqueues one job, for the latest such tick; --missed skip none), then goes on
from the first tick after now.`,
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a schedule; its first tick is the first after now",
				ArgsUsage: "NAME",
				Flags:     append(scheduleFlags(true), commandFormatFlag()),
				Action:    withQueueClient(schedulesCreate),
			},
			{
				Name:      "set",
				Usage:     "change settings of a schedule; those not given stay as they are",
				ArgsUsage: "NAME",
				Flags:     append(scheduleFlags(false), commandFormatFlag()),
				Action:    withQueueClient(schedulesSet),
			},
			{
				Name:      "pause",
				Usage:     "stop a schedule's ticks until it is resumed",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(schedulesPause),
			},
			{
				Name:      "resume",
				Usage:     "start a paused schedule's ticks again, from the first after now; a tick due before the pause is a missed one (--missed)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(schedulesResume),
			},
			{
				Name:      "delete",
				Usage:     "delete a schedule (the jobs it enqueued stay)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{commandFormatFlag()},
				Action:    withQueueClient(schedulesDelete),
			},
			{
				Name:   "list",
				Usage:  "list the schedules, their next tick (none while paused) and what their last one did",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "queue", Usage: "only this queue's (default: all)"}, commandFormatFlag()},
				Action: withQueueClient(schedulesList),
			},
		},
	}
}

// scheduleFlags are the settings of schedules create and schedules set.
func scheduleFlags(create bool) []cli.Flag {
	def := func(v string) string {
		if create {
			return v
		}
		return "unchanged"
	}
	req := func(usage string) string {
		if create {
			return "required: " + usage
		}
		return usage
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "queue", Usage: req("the queue its jobs go to")},
		&cli.StringFlag{Name: "tenant", Usage: req("the tenant its jobs belong to")},
		&cli.StringFlag{Name: "cron", Usage: req(`when it ticks: "0 2 * * *" (02:00 daily), "@hourly", "@every 2s"`)},
		&cli.StringFlag{Name: "timezone", Usage: "the IANA time zone the cron expression reads in, like Europe/Paris; not empty", DefaultText: def("UTC")},
		int64NoDefault{&cli.Int64Flag{Name: "cost", Usage: req(fmt.Sprintf("each job's estimated cost in tokens, 1..%d", queue.MaxCost))}},
		&cli.StringFlag{Name: "kind", Usage: "each job's kind", DefaultText: def(`"default"`)},
		daysFlag("ttl", "each job's deadline as a duration from its enqueue, like 90m or 2d, in whole microseconds; 0s: the queue's default TTL", def("the queue's default TTL")),
		&cli.IntFlag{Name: "max-attempts", Usage: "how often each job may run, 1..1000; 0: the queue's setting", DefaultText: def("the queue's setting")},
		&cli.StringFlag{Name: "payload", Usage: "each job's input, JSON", DefaultText: def("{}")},
		&cli.StringFlag{Name: "missed", Usage: "ticks that passed while no worker ran, or that were due when the schedule was paused: " +
			"skip (none), or one (a job for the latest)",
			DefaultText: def("one")},
	}
}

// scheduleUpdate collects the settings given on the command line.
func scheduleUpdate(c *cli.Context) (queue.ScheduleUpdate, int, error) {
	var u queue.ScheduleUpdate
	n := 0
	str := func(name string, dst **string) {
		if c.IsSet(name) {
			v := c.String(name)
			*dst, n = &v, n+1
		}
	}
	str("queue", &u.Queue)
	str("tenant", &u.Tenant)
	str("cron", &u.Cron)
	str("timezone", &u.Timezone)
	str("kind", &u.Kind)
	str("missed", &u.Missed)
	// An empty --missed would read as the API's zero value, one: say so
	// rather than take it.
	if u.Missed != nil && *u.Missed == "" {
		return u, n, usagef("batchq: --missed: must be %s or %s (got \"\")", queue.MissedSkip, queue.MissedOne)
	}
	// So would an empty --kind, "default".
	instead := `leave it out for "default"`
	if c.Command.Name == "set" {
		instead = "leave it out to keep the schedule's"
	}
	if err := refuseEmpty(c, instead, "kind"); err != nil {
		return u, n, err
	}
	// So would an empty --timezone, UTC: refused as an empty --payload is,
	// since it is more likely an unset variable than a choice.
	if u.Timezone != nil && *u.Timezone == "" {
		instead := "leave it out for UTC"
		if c.Command.Name == "set" {
			instead = "leave it out to keep the schedule's"
		}
		return u, n, usagef("batchq: --timezone: must be an IANA time zone such as Europe/Paris or UTC (got \"\"); %s", instead)
	}
	if c.IsSet("cost") {
		v := c.Int64("cost")
		u.Cost, n = &v, n+1
	}
	if c.IsSet("ttl") {
		// 0 is the queue's default, as for --max-attempts: with set, the
		// way back to it.
		v := daysDuration(c, "ttl")
		if v < 0 {
			return u, n, usagef("batchq: --ttl: must be > 0, or 0s for the queue's default TTL (got %s)", v)
		}
		u.TTL, n = &v, n+1
	}
	if c.IsSet("max-attempts") {
		v := c.Int("max-attempts")
		u.MaxAttempts, n = &v, n+1
	}
	if c.IsSet("payload") {
		p, err := payloadFlag(c)
		if err != nil {
			return u, n, err
		}
		u.Payload, n = p, n+1
	}
	return u, n, nil
}

// scheduleUsage says a refused setting as a usage error naming its flag. A
// stored expression or time zone that does not parse is named as stored,
// with the flag that replaces it: the command did not give it.
func scheduleUsage(c *cli.Context, err error) error {
	if u := jobUsage(err); u != nil {
		return u
	}
	var stored *queue.StoredScheduleError
	if errors.As(err, &stored) {
		if c.Command.Name == "set" {
			return usagef("%s; give --%s to replace it", err, stored.Field)
		}
		return usagef("%s; replace it first: batchq schedules set %s --%s %s", err, stored.Schedule, stored.Field,
			strings.ToUpper(stored.Field))
	}
	// A name taken (ErrScheduleExists) is refused as a queue's is: exit 1.
	if errors.Is(err, queue.ErrScheduleNotFound) || errors.Is(err, queue.ErrUnknownQueue) {
		return usageError{msg: err.Error()}
	}
	return settingUsage(err, "schedule name")
}

func schedulesCreate(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	for _, f := range []string{"queue", "tenant", "cron", "cost"} {
		if !c.IsSet(f) {
			return usagef("batchq: schedules create: --%s is required", f)
		}
	}
	u, _, err := scheduleUpdate(c)
	if err != nil {
		return err
	}
	s := queue.Schedule{Name: args[0], Queue: *u.Queue, Tenant: *u.Tenant, Cron: *u.Cron, Cost: *u.Cost,
		Kind: derefOr(u.Kind, ""), Timezone: derefOr(u.Timezone, ""), TTL: derefOr(u.TTL, 0),
		MaxAttempts: derefOr(u.MaxAttempts, 0), Payload: u.Payload, Missed: derefOr(u.Missed, "")}
	if err := client.CreateSchedule(c.Context, s); err != nil {
		return scheduleUsage(c, err)
	}
	return writeSchedule(c, client, args[0], "created schedule "+args[0])
}

func schedulesSet(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	u, n, err := scheduleUpdate(c)
	if err != nil {
		return err
	}
	if n == 0 {
		return usagef("batchq: schedules set: give at least one setting to change (see batchq schedules set --help)")
	}
	if err := client.SetSchedule(c.Context, args[0], u); err != nil {
		return scheduleUsage(c, err)
	}
	return writeSchedule(c, client, args[0], "updated schedule "+args[0])
}

func schedulesPause(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	done, changed, err := pausedOrNot(c, client, args[0], true, "paused", "was paused already")
	if err != nil {
		return err
	}
	if err := client.PauseSchedule(c.Context, args[0]); err != nil {
		return scheduleUsage(c, err)
	}
	return writeScheduleChange(c, client, args[0], done, changed)
}

// pausedOrNot is what pausing (pause true) or resuming the schedule name
// will have done: done, or, when it is in that state already, how to say
// so, and whether it changes anything. Asked before the change, so a second
// operator's command reads true.
func pausedOrNot(c *cli.Context, client *queue.Client, name string, pause bool, done, already string) (string, bool, error) {
	s, err := client.GetSchedule(c.Context, name)
	if err != nil {
		return "", false, scheduleUsage(c, err)
	}
	sentence, changed := pausedOrNotSentence(s, pause, done, already)
	return sentence, changed, nil
}

// pausedOrNotSentence is pausedOrNot's sentence for schedule s as read.
func pausedOrNotSentence(s queue.Schedule, pause bool, done, already string) (string, bool) {
	if s.Paused == pause {
		return "schedule " + s.Name + " " + already + "; nothing changed", false
	}
	return done + " schedule " + s.Name, true
}

func schedulesResume(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	before, err := client.GetSchedule(c.Context, args[0])
	if err != nil {
		return scheduleUsage(c, err)
	}
	done, changed := pausedOrNotSentence(before, false, "resumed", "was not paused")
	if err := client.ResumeSchedule(c.Context, args[0]); err != nil {
		return scheduleUsage(c, err)
	}
	after, err := client.GetSchedule(c.Context, args[0])
	if err != nil {
		return err
	}
	sentence := scheduleSentence(after, done)
	// A tick owed from before the pause, fired by the resume, moved
	// last_run_at: say what became of it.
	if after.LastRunAt != nil && (before.LastRunAt == nil || !after.LastRunAt.Equal(*before.LastRunAt)) {
		owed := after.LastRunAt.UTC().Format(time.RFC3339)
		if after.LastError != "" {
			sentence += fmt.Sprintf("; the tick it owed from before its pause, %s, enqueued nothing: %s", owed, after.LastError)
		} else if after.LastJobID != nil {
			sentence += fmt.Sprintf("; the tick it owed from before its pause, %s, enqueued job %d", owed, *after.LastJobID)
		}
	}
	return writeResult(c, sentence, scheduleDataset(after).with("changed", changed))
}

func schedulesDelete(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	if err := client.DeleteSchedule(c.Context, args[0]); err != nil {
		return scheduleUsage(c, err)
	}
	d := newDataset("deleted")
	d.add(args[0])
	return writeResult(c, "deleted schedule "+args[0], d)
}

func schedulesList(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := checkQueue(c, client); err != nil {
		return err
	}
	ss, err := client.ListSchedules(c.Context, c.String("queue"))
	if err != nil {
		return err
	}
	return writeList(c, scheduleDataset(ss...))
}

// writeSchedule writes the schedule name as it is now, after done (what
// the command did, naming it).
func writeSchedule(c *cli.Context, client *queue.Client, name, done string) error {
	sentence, d, err := scheduleResult(c, client, name, done)
	if err != nil {
		return err
	}
	return writeResult(c, sentence, d)
}

// writeScheduleChange is writeSchedule for a pause or a resume, whose data
// also says whether it changed anything (changed), as its sentence does.
func writeScheduleChange(c *cli.Context, client *queue.Client, name, done string, changed bool) error {
	sentence, d, err := scheduleResult(c, client, name, done)
	if err != nil {
		return err
	}
	return writeResult(c, sentence, d.with("changed", changed))
}

// scheduleResult is the sentence and the data that say the schedule name as
// it is now, after done.
func scheduleResult(c *cli.Context, client *queue.Client, name, done string) (string, *dataset, error) {
	s, err := client.GetSchedule(c.Context, name)
	if err != nil {
		return "", nil, err
	}
	return scheduleSentence(s, done), scheduleDataset(s), nil
}

// scheduleSentence says schedule s as it is, after done.
func scheduleSentence(s queue.Schedule, done string) string {
	sentence := fmt.Sprintf("%s: %q in %s, a job of cost %d for tenant %s in queue %s", done, s.Cron,
		s.Timezone, s.Cost, s.Tenant, s.Queue)
	if s.Paused {
		return sentence + "; paused"
	}
	return sentence + "; next tick " + s.NextRunAt.UTC().Format(time.RFC3339)
}

func scheduleDataset(ss ...queue.Schedule) *dataset {
	d := newDataset("name", "queue", "tenant", "kind", "cost", "cron", "timezone", "missed", "ttl", "max_attempts",
		"paused", "next_run_at", "last_run_at", "last_job_id", "last_error", "payload")
	for _, s := range ss {
		var last *time.Time
		if s.LastRunAt != nil {
			t := s.LastRunAt.UTC()
			last = &t
		}
		var ttl *time.Duration // none of its own: the queue's default
		if s.TTL != 0 {
			ttl = &s.TTL
		}
		var next *time.Time // none while paused
		if !s.NextRunAt.IsZero() {
			t := s.NextRunAt.UTC()
			next = &t
		}
		d.add(s.Name, s.Queue, s.Tenant, s.Kind, s.Cost, s.Cron, s.Timezone, s.Missed, ttl, s.MaxAttempts, s.Paused,
			next, last, s.LastJobID, s.LastError, s.Payload)
	}
	return d
}
