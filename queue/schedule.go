package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// A Schedule enqueues one job at every tick of a cron expression. Schedules
// live in the database, so every worker of a fleet agrees on them; the
// workers' maintenance fires their ticks (see Maintain). Each tick's job has
// the unique key "batchq:schedule:<name>:<tick in RFC 3339>", so a tick
// enqueues one job however many workers handle it at once.
type Schedule struct {
	// Name names the schedule: 1-128 characters of A-Z a-z 0-9 _ . : -,
	// starting with a letter or digit.
	Name string
	// Queue, Tenant, Kind, Cost, MaxAttempts and Payload are those of the
	// jobs it enqueues, as in NewJob ("" kind: "default"; 0 attempts: the
	// queue's; nil payload: {}).
	Queue       string
	Tenant      string
	Kind        string
	Cost        int64
	MaxAttempts int
	Payload     json.RawMessage
	// TTL is each job's time to live from its enqueue, in whole
	// microseconds (what the database keeps). 0: the queue's default TTL.
	TTL time.Duration
	// Cron is a standard five-field cron expression (minute hour
	// day-of-month month day-of-week) or a descriptor such as "@daily" or
	// "@every 2h", as github.com/robfig/cron/v3 parses them, of at most 256
	// bytes. Ticks that a
	// daylight-saving change skips do not happen, as that library
	// documents; a tick in the hour a change repeats happens twice, once in
	// each.
	Cron string
	// Timezone is the IANA time zone the expression reads in, such as
	// "Europe/Paris". "": UTC.
	Timezone string
	// Missed says what to do with ticks that passed while no worker ran
	// maintenance: MissedOne (""), one job for the latest of them; MissedSkip,
	// none. A tick found within ScheduleGrace of its time is on time. Ticks
	// that were due when the schedule was paused, and had not fired, are
	// missed ticks too, handled when it is resumed (ResumeSchedule).
	Missed string

	// Set by the database, read by GetSchedule and ListSchedules.
	Paused    bool
	NextRunAt time.Time  // the next tick not yet handled; zero while paused, which has none
	LastRunAt *time.Time // the last tick that enqueued (or tried to)
	LastJobID *int64     // the job the last tick enqueued
	LastError string     // why the last tick enqueued nothing ("" when it did)
	CreatedAt time.Time
	UpdatedAt time.Time
}

// What Schedule.Missed may say.
const (
	MissedOne  = "one"
	MissedSkip = "skip"
)

// ScheduleGrace is how late a worker may find a tick and still count it on
// time: a tick found later was missed (Schedule.Missed says what then). A
// worker pool counts its MaintainInterval more, since its passes come about
// that far apart.
const ScheduleGrace = time.Minute

// maxCatchUpSteps bounds how many passed ticks maintenance walks one by
// one to find the latest; latestTick first jumps near it, so the walk is
// short however long no worker ran.
const maxCatchUpSteps = 100_000

// ErrScheduleNotFound is returned by the schedule calls when no schedule has
// the name; ErrScheduleExists by CreateSchedule when one has.
var (
	ErrScheduleNotFound = errors.New("batchq: schedule not found")
	ErrScheduleExists   = errors.New("batchq: schedule already exists")
)

// StoredScheduleError is returned by SetSchedule and ResumeSchedule when the
// expression or time zone a schedule has stored, and the call keeps, does
// not parse here: written by hand, by another release of batchq, or in a
// zone this one refuses. A new one (ScheduleUpdate.Cron or Timezone)
// replaces it.
type StoredScheduleError struct {
	Schedule string // the schedule's name
	Field    string // "cron" or "timezone"
	Value    string // as stored
	Rule     string // the rule it breaks
}

func (e *StoredScheduleError) Error() string {
	return fmt.Sprintf("batchq: schedule %s: its stored %s %s does not parse: %s", quote(e.Schedule), e.Field,
		quote(e.Value), e.Rule)
}

// Unwrap returns ErrInvalidSettings.
func (e *StoredScheduleError) Unwrap() error { return ErrInvalidSettings }

// storedRefusal returns err, a refusal of schedule s, as a
// StoredScheduleError when it refuses the expression or the time zone and s
// keeps the stored one (keptCron, keptZone); any other err as it is.
func storedRefusal(err error, s *Schedule, keptCron, keptZone bool) error {
	var se *SettingError
	switch {
	case !errors.As(err, &se):
		return err
	case se.Field == "cron" && keptCron:
		return &StoredScheduleError{Schedule: s.Name, Field: se.Field, Value: s.Cron, Rule: se.Rule}
	case se.Field == "timezone" && keptZone:
		return &StoredScheduleError{Schedule: s.Name, Field: se.Field, Value: s.Timezone, Rule: se.Rule}
	}
	return err
}

// cronParser reads the five standard fields and the @ descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron reads a schedule's expression in its time zone.
func parseCron(expr, tz string) (cron.Schedule, *SettingError) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		if _, known := time.LoadLocation("Europe/Paris"); known != nil {
			return nil, &SettingError{Field: "timezone", Rule: fmt.Sprintf("cannot be read: this host has no time zone database "+
				"(install tzdata, or import time/tzdata in the program) (got %s)", quote(tz))}
		}
	}
	// Names whose zone depends on the host that reads it (Local, localtime,
	// posixrules, and the posix/… copies, which the zone database batchq
	// carries does not hold), that is none (Factory), or that counts leap
	// seconds, which Go's times do not (right/…): every worker must read the
	// same ticks.
	lower := strings.ToLower(tz)
	hostBound := slices.Contains([]string{"local", "localtime", "posixrules", "factory"}, lower) ||
		strings.HasPrefix(lower, "right/") || strings.HasPrefix(lower, "posix/")
	if err != nil || hostBound {
		return nil, &SettingError{Field: "timezone", Rule: fmt.Sprintf("must be an IANA time zone such as Europe/Paris (got %s)", quote(tz))}
	}
	if len(expr) > MaxNameBytes {
		// batchq.schedules keeps at most this many bytes of it.
		return nil, &SettingError{Field: "cron", Rule: fmt.Sprintf("must be at most %d bytes (got %d)", MaxNameBytes, len(expr))}
	}
	// robfig/cron splits the five fields on any spaces, but reads a
	// descriptor, and "@every"'s duration, only as written with one space:
	// "@daily " or "@every  1h" would be refused for a reason they do not
	// break.
	spec := strings.TrimSpace(expr)
	if rest, ok := strings.CutPrefix(spec, "@every"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
		spec = "@every " + strings.TrimSpace(rest)
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, &SettingError{Field: "cron", Rule: "must not name a time zone: give it as the timezone"}
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, &SettingError{Field: "cron", Rule: cronRule(expr)}
	}
	switch v := s.(type) {
	case *cron.SpecSchedule:
		v.Location = loc
	case cron.ConstantDelaySchedule:
		// robfig/cron runs "@every" in whole seconds, at least one: a
		// shorter or fractional interval would tick otherwise than it reads.
		d, derr := time.ParseDuration(strings.TrimPrefix(spec, "@every "))
		if derr != nil || d < time.Second || d%time.Second != 0 {
			return nil, &SettingError{Field: "cron", Rule: fmt.Sprintf("@every must be a whole number of seconds, at least 1s (got %s)", quote(expr))}
		}
		if d > maxEvery {
			return nil, &SettingError{Field: "cron", Rule: fmt.Sprintf("must tick within five years (%s does not)", quote(expr))}
		}
	}
	return s, nil
}

// cronFields are the five fields of an expression, in order, and the values
// each takes. Day-of-week 7 is refused, not read as Sunday: robfig/cron,
// which reads the expressions, takes 0-6 only.
var cronFields = []struct {
	name   string
	option cron.ParseOption
	values string
}{
	{"minute", cron.Minute, "0-59"},
	{"hour", cron.Hour, "0-23"},
	{"day-of-month", cron.Dom, "1-31"},
	{"month", cron.Month, "1-12 or JAN-DEC"},
	{"day-of-week", cron.Dow, "0-6 or SUN-SAT, Sunday being 0"},
}

// cronRule says which rule expr, which cronParser refused, breaks: the
// number of fields, the field and the values it takes, or the descriptors.
// robfig/cron's own words ("end of range (7) above maximum (6): 7") name
// neither the field nor what it takes.
func cronRule(expr string) string {
	const syntax = "as *, a value, a range low-high (1-5), a list (1,3) or a step (*/2)"
	if strings.TrimSpace(expr) == "" {
		return "must not be empty: give five fields, minute hour day-of-month month day-of-week, such as \"0 2 * * *\", " +
			"or a descriptor such as @daily or @every 1h"
	}
	if after, ok := strings.CutPrefix(expr, "@every"); ok {
		if durationText.MatchString(strings.TrimSpace(after)) {
			// A duration past what Go's can hold (about 292 years).
			return fmt.Sprintf("must tick within five years (%s does not)", quote(expr))
		}
		return fmt.Sprintf("@every must be followed by a duration such as 90s or 2h (got %s)", quote(expr))
	}
	if strings.HasPrefix(expr, "@") {
		return fmt.Sprintf("must be five fields or a descriptor: @yearly, @annually, @monthly, @weekly, @daily, @midnight, "+
			"@hourly or @every DURATION (got %s)", quote(expr))
	}
	fields := strings.Fields(expr)
	if len(fields) != len(cronFields) {
		return fmt.Sprintf("must be five fields, minute hour day-of-month month day-of-week (no seconds), "+
			"or a descriptor such as @daily (got %d fields in %s)", len(fields), quote(expr))
	}
	for i, f := range cronFields {
		// robfig/cron reads a leading TZ= as a time zone, and panics on
		// one without the space that would end it: no field holds an =.
		if strings.Contains(fields[i], "=") || !parses(cron.NewParser(f.option), fields[i]) {
			return fmt.Sprintf("%s, field %d of 5, must be %s, %s (got %s in %s)", f.name, i+1, f.values, syntax,
				quote(fields[i]), quote(expr))
		}
	}
	return fmt.Sprintf("must be a cron expression such as \"0 2 * * *\" or \"@every 1h\" (got %s)", quote(expr))
}

// durationText is the form of a Go duration, whatever its size.
var durationText = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

func parses(p cron.Parser, spec string) bool {
	_, err := p.Parse(spec)
	return err == nil
}

// maxEvery is the longest "@every" interval: a schedule must tick within
// five years, as for the other expressions.
const maxEvery = 5 * 365 * 24 * time.Hour

// validateSchedule checks s, fills in its defaults, and returns its parsed
// expression.
func (c *Client) validateSchedule(s *Schedule, now time.Time) (cron.Schedule, error) {
	if s.Kind == "" {
		s.Kind = "default"
	}
	if s.Missed == "" {
		s.Missed = MissedOne
	}
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	if !queueName.MatchString(s.Name) {
		return nil, &SettingError{Field: "name", Rule: "must name a schedule: 1-128 characters of A-Z a-z 0-9 _ . : - (got " + quote(s.Name) + ")"}
	}
	// The jobs' rules, as an enqueue checks them.
	j := NewJob{Queue: s.Queue, Tenant: s.Tenant, Kind: s.Kind, Cost: s.Cost, TTL: s.TTL, MaxAttempts: s.MaxAttempts,
		Payload: s.Payload}
	if err := c.validate(&j, now, false); err != nil {
		return nil, err
	}
	if err := wholeMicroseconds("ttl", s.TTL); err != nil {
		return nil, err
	}
	s.Payload = j.Payload
	if s.Missed != MissedOne && s.Missed != MissedSkip {
		return nil, &SettingError{Field: "missed", Rule: fmt.Sprintf("must be %q or %q (got %s)", MissedOne, MissedSkip, quote(s.Missed))}
	}
	sched, perr := parseCron(s.Cron, s.Timezone)
	if perr != nil {
		return nil, perr
	}
	if sched.Next(now).IsZero() {
		return nil, &SettingError{Field: "cron", Rule: fmt.Sprintf("must tick within five years (%s never does)", quote(s.Cron))}
	}
	return sched, nil
}

// plannedTick is one tick a maintainer handles: its job enqueued, or (a
// missed tick, under MissedSkip) passed over.
type plannedTick struct {
	at      time.Time
	enqueue bool
}

// maxOnTimeTicks bounds the on-time ticks one pass fires for a schedule.
// An "@every" schedule ticks at most once a second, so ScheduleGrace holds
// at most 61 of them, and a pool's grace (its MaintainInterval more) up to
// a quarter of an hour's.
const maxOnTimeTicks = 1000

// planTicks decides what a maintainer that finds a schedule due at `at`
// does, tick by tick, in order. A tick found within grace of its time
// (ScheduleGrace; a pool's MaintainInterval more) is on time, and each such
// tick enqueues its job: a pass that comes later than a schedule's interval
// (a long maintenance interval, a busy database) loses none of them. Ticks
// found later than that were missed: the latest of them enqueues one job
// under MissedOne and none under MissedSkip, and the others are passed over. next is the first tick after
// at. Each tick follows the one before it, not the time it was found: an
// "@every" schedule keeps to its grid however late maintenance finds it
// (Next of a constant delay counts from the time it is given).
func planTicks(c cron.Schedule, due, at time.Time, missed string, grace time.Duration) (ticks []plannedTick, next time.Time) {
	onTime := at.Add(-grace)
	next = due
	if due.Before(onTime) {
		last := latestTick(c, due, onTime.Add(-time.Nanosecond))
		ticks = append(ticks, plannedTick{at: last, enqueue: missed != MissedSkip})
		if next = c.Next(last); !next.IsZero() && next.Before(onTime) {
			// The walk to the latest missed tick stopped short of it.
			next = c.Next(onTime.Add(-time.Nanosecond))
		}
	}
	for range maxOnTimeTicks {
		if next.IsZero() || next.After(at) {
			break
		}
		ticks = append(ticks, plannedTick{at: next, enqueue: true})
		next = c.Next(next)
	}
	if !next.IsZero() && !next.After(at) {
		next = c.Next(at)
	}
	if next.IsZero() {
		// No tick within five years of at (the expression was stored by
		// hand): look again then.
		next = at.AddDate(5, 0, 0)
	}
	return ticks, next
}

// latestTick is the latest tick of c at or before at, from due, a tick at
// or before at. A schedule stopped for months has too many passed ticks to
// walk one by one ("* * * * *" has half a million a year), so it starts the
// walk close to at: "@every" ticks are due plus whole intervals, and the
// other expressions tick on the calendar, whatever due was, so the first
// tick after at minus a window that holds one is among the last few.
func latestTick(c cron.Schedule, due, at time.Time) time.Time {
	tick := due
	if d, ok := c.(cron.ConstantDelaySchedule); ok {
		if k := at.Sub(due) / d.Delay; k > 1 {
			tick = due.Add((k - 1) * d.Delay)
		}
	} else {
		span := at.Sub(due)
		for w := time.Hour; w < span; w *= 2 {
			if n := c.Next(at.Add(-w)); !n.IsZero() && !n.After(at) {
				tick = n
				break
			}
			if w > span/2 {
				break
			}
		}
	}
	for range maxCatchUpSteps {
		n := c.Next(tick)
		if n.IsZero() || n.After(at) {
			break
		}
		tick = n
	}
	return tick
}

// fireSchedules handles the due schedules of a queue, in one transaction:
// each enqueues its tick's job (or skips a missed tick) and moves on to its
// next tick. Returns how many jobs it enqueued.
func (c *Client) fireSchedules(ctx context.Context, queue string, grace time.Duration) (int, error) {
	fired := 0
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		due, err := c.q.DueSchedules(ctx, tx, dbsqlc.DueSchedulesParams{Queue: queue, At: c.maintenanceAt(),
			MaxSchedules: maintainBatch})
		if err != nil {
			return err
		}
		c.pause("schedules taken")
		for _, d := range due {
			sched, perr := parseCron(d.Cron, d.Timezone)
			if perr != nil {
				// Written by hand, by a newer batchq, or in a zone this one
				// refuses: leave it due, and say why where the schedule is
				// listed.
				c.log.Warn("batchq: schedule does not parse; its ticks wait", "schedule", d.Name, "err", perr)
				c.recordScheduleError(ctx, tx, d.Name, d.NextRunAt, perr)
				continue
			}
			ticks, next := planTicks(sched, d.NextRunAt, d.At, d.Missed, grace)
			due := d.NextRunAt
			for i, tick := range ticks {
				// Each call moves the schedule on to the tick after its own,
				// which the next call names as due.
				after := next
				if i+1 < len(ticks) {
					after = ticks[i+1].at
				}
				id, err := c.q.FireSchedule(ctx, tx, dbsqlc.FireScheduleParams{Name: d.Name, Due: due, Tick: tick.at,
					Enqueue: tick.enqueue, Next: after})
				if err != nil {
					return fmt.Errorf("schedule %s: %w", quote(d.Name), err)
				}
				c.pause("schedule fired")
				if id != 0 {
					fired++
				}
				due = after
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return fired, nil
}

// recordScheduleError writes why a due schedule's tick waits into its
// last_error, in a savepoint: a role granted before batchq.schedule_error
// existed is refused the call, and the rest of the pass still fires its
// schedules (the log has said why this one waits).
func (c *Client) recordScheduleError(ctx context.Context, tx pgx.Tx, name string, due time.Time, perr *SettingError) {
	msg := fmt.Sprintf("tick %s waits: %s: %s; fix it with batchq schedules set", due.UTC().Format(time.RFC3339),
		perr.Field, perr.Rule)
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		_, err := c.q.ScheduleError(ctx, sp, dbsqlc.ScheduleErrorParams{Name: name, Due: due, Error: msg})
		return err
	})
	if err != nil {
		c.log.Warn("batchq: could not record why a schedule waits", "schedule", name, "err", err)
	}
}

// maintenanceAt is the time maintenance promotes jobs and fires schedules
// as of: nil, the database's now, unless a test set a clock.
func (c *Client) maintenanceAt() *time.Time {
	if c.testNow == nil {
		return nil
	}
	t := c.testNow()
	return &t
}

// dbNow is the database's time, or the test's clock.
func (c *Client) dbNow(ctx context.Context, db dbsqlc.DBTX) (time.Time, error) {
	if c.testNow != nil {
		return c.testNow(), nil
	}
	return c.q.DatabaseClock(ctx, db)
}

// CreateSchedule stores a new schedule; its first tick is the first after
// now. It returns ErrScheduleExists if the name is taken, *SettingError or
// *InvalidJobError for a setting that breaks its rule, and ErrUnknownQueue
// for a queue that does not exist.
func (c *Client) CreateSchedule(ctx context.Context, s Schedule) error {
	now, err := c.dbNow(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("batchq: create schedule: %w", err)
	}
	sched, err := c.validateSchedule(&s, now)
	if err != nil {
		return err
	}
	var paused *time.Time
	if s.Paused {
		paused = &now
	}
	err = c.q.CreateSchedule(ctx, c.pool, dbsqlc.CreateScheduleParams{
		Name: s.Name, Queue: s.Queue, Tenant: s.Tenant, Kind: s.Kind, Cron: s.Cron, Timezone: s.Timezone, Cost: s.Cost,
		Ttl: ttlOrNil(s.TTL), MaxAttempts: int32(s.MaxAttempts), Payload: s.Payload, Missed: s.Missed,
		NextRunAt: sched.Next(now), PausedAt: paused,
	})
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("%w: %s", ErrScheduleExists, quote(s.Name))
	case isForeignKeyViolation(err):
		return unknownQueue(s.Queue)
	case err != nil:
		return fmt.Errorf("batchq: create schedule %s: %w", quote(s.Name), err)
	}
	return nil
}

func ttlOrNil(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// ScheduleUpdate changes some settings of a schedule; nil fields stay as
// they are.
type ScheduleUpdate struct {
	Queue       *string
	Tenant      *string
	Kind        *string
	Cost        *int64
	MaxAttempts *int
	Payload     json.RawMessage // nil: unchanged
	TTL         *time.Duration  // 0: the queue's default
	Cron        *string
	Timezone    *string
	Missed      *string
}

// SetSchedule changes a schedule's settings. A new expression or time zone
// moves its next tick to the first after now; otherwise the next tick stays.
// A stored expression or time zone that u keeps and that does not parse
// here is refused with *StoredScheduleError.
func (c *Client) SetSchedule(ctx context.Context, name string, u ScheduleUpdate) error {
	return c.changeSchedule(ctx, name, "set", func(_ pgx.Tx, _ *time.Time, s *Schedule, now time.Time) error {
		set(&s.Queue, u.Queue)
		set(&s.Tenant, u.Tenant)
		set(&s.Kind, u.Kind)
		set(&s.Cost, u.Cost)
		set(&s.MaxAttempts, u.MaxAttempts)
		set(&s.TTL, u.TTL)
		set(&s.Missed, u.Missed)
		if u.Payload != nil {
			s.Payload = u.Payload
		}
		moved := (u.Cron != nil && *u.Cron != s.Cron) || (u.Timezone != nil && *u.Timezone != s.Timezone)
		set(&s.Cron, u.Cron)
		set(&s.Timezone, u.Timezone)
		sched, err := c.validateSchedule(s, now)
		if err != nil {
			return storedRefusal(err, s, u.Cron == nil, u.Timezone == nil)
		}
		if moved {
			s.NextRunAt = sched.Next(now)
		}
		return nil
	})
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// PauseSchedule stops a schedule's ticks until ResumeSchedule. A tick that
// is due and not fired yet (maintenance had not come to it) stays owed: see
// ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	return c.changeSchedule(ctx, name, "pause", func(_ pgx.Tx, _ *time.Time, s *Schedule, _ time.Time) error {
		s.Paused = true
		return nil
	})
}

// ResumeSchedule starts a paused schedule's ticks again, from the first
// after now: the ticks that fell while it was paused are not owed. Ticks
// that were due before the pause and had not fired are owed, and are
// handled as missed ticks (Schedule.Missed), in the same transaction:
// MissedOne enqueues one job, for the latest of them, and MissedSkip none.
// A running schedule is left as it is. A paused one whose stored expression
// or time zone does not parse here is refused with *StoredScheduleError.
func (c *Client) ResumeSchedule(ctx context.Context, name string) error {
	return c.changeSchedule(ctx, name, "resume", func(tx pgx.Tx, pausedAt *time.Time, s *Schedule, now time.Time) error {
		if pausedAt == nil {
			return nil
		}
		sched, perr := parseCron(s.Cron, s.Timezone)
		if perr != nil {
			return storedRefusal(perr, s, true, true)
		}
		next := sched.Next(now)
		if next.IsZero() {
			// No tick within five years (stored by hand, or by an older
			// release): refused as set refuses it, naming it as stored.
			return storedRefusal(&SettingError{Field: "cron",
				Rule: fmt.Sprintf("must tick within five years (%s never does)", quote(s.Cron))}, s, true, true)
		}
		if !s.NextRunAt.After(*pausedAt) {
			if err := c.fireOwedTick(ctx, tx, s, latestTick(sched, s.NextRunAt, *pausedAt), next); err != nil {
				return err
			}
		}
		s.Paused = false
		s.NextRunAt = next
		return nil
	})
}

// fireOwedTick handles tick, the latest tick a schedule owed when it was
// paused, as a missed one, and moves the schedule on to next.
func (c *Client) fireOwedTick(ctx context.Context, tx pgx.Tx, s *Schedule, tick, next time.Time) error {
	enqueue := s.Missed != MissedSkip
	id, err := c.q.FireSchedule(ctx, tx, dbsqlc.FireScheduleParams{Name: s.Name, Due: s.NextRunAt, Tick: tick,
		Enqueue: enqueue, Next: next})
	if err == nil && enqueue && id == 0 {
		// No job: the tenant had no room (recorded in last_error, and the
		// schedule moved on), or another transaction held the tenant's ring
		// row or the queue's row past fire_schedule's lock timeout (nothing
		// changed): an application's open enqueue, a maintenance pass
		// firing the queue's schedules, a queue being deleted.
		var row dbsqlc.BatchqSchedule
		if row, err = c.q.GetSchedule(ctx, tx, s.Name); err == nil && row.NextRunAt.Equal(s.NextRunAt) {
			return fmt.Errorf("batchq: resume schedule %s: the tick it owes from before its pause, %s, cannot be "+
				"enqueued now: another transaction holds tenant %s's place in queue %s (an open enqueue, a "+
				"maintenance pass, or the queue being deleted); it is still paused: resume it again",
				quote(s.Name), tick.UTC().Format(time.RFC3339), quote(s.Tenant), quote(s.Queue))
		}
	}
	if err != nil {
		return fmt.Errorf("batchq: resume schedule %s: %w", quote(s.Name), err)
	}
	return nil
}

// changeSchedule reads a schedule under a row lock, lets change edit it, and
// writes it back, in one transaction. change gets the transaction, when the
// schedule was paused (nil: it runs), and the schedule with its stored next
// tick.
func (c *Client) changeSchedule(ctx context.Context, name, what string,
	change func(tx pgx.Tx, pausedAt *time.Time, s *Schedule, now time.Time) error) error {
	var inner error
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		row, err := c.q.GetScheduleForUpdate(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			inner = fmt.Errorf("%w: %s", ErrScheduleNotFound, quote(name))
			return inner
		}
		if err != nil {
			return err
		}
		now, err := c.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		s := scheduleFromRow(row)
		// Kept while paused: a resume reads it for the tick the schedule owes.
		s.NextRunAt = row.NextRunAt
		if inner = change(tx, row.PausedAt, &s, now); inner != nil {
			return inner
		}
		var paused *time.Time
		if s.Paused {
			paused = row.PausedAt
			if paused == nil {
				paused = &now
			}
		}
		_, err = c.q.UpdateSchedule(ctx, tx, dbsqlc.UpdateScheduleParams{
			Name: name, Queue: s.Queue, Tenant: s.Tenant, Kind: s.Kind, Cron: s.Cron, Timezone: s.Timezone,
			Cost: s.Cost, Ttl: ttlOrNil(s.TTL), MaxAttempts: int32(s.MaxAttempts), Payload: s.Payload,
			Missed: s.Missed, NextRunAt: s.NextRunAt, PausedAt: paused,
		})
		if isForeignKeyViolation(err) {
			inner = unknownQueue(s.Queue)
			return inner
		}
		return err
	})
	if inner != nil {
		return inner
	}
	if err != nil {
		return fmt.Errorf("batchq: %s schedule %s: %w", what, quote(name), err)
	}
	return nil
}

// DeleteSchedule removes a schedule; the jobs it enqueued stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	n, err := c.q.DeleteSchedule(ctx, c.pool, name)
	if err != nil {
		return fmt.Errorf("batchq: delete schedule %s: %w", quote(name), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrScheduleNotFound, quote(name))
	}
	return nil
}

// GetSchedule returns a schedule, or ErrScheduleNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	row, err := c.q.GetSchedule(ctx, c.pool, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, fmt.Errorf("%w: %s", ErrScheduleNotFound, quote(name))
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("batchq: get schedule %s: %w", quote(name), err)
	}
	return scheduleFromRow(row), nil
}

// ListSchedules returns the schedules of a queue ("" for every queue), by
// name.
func (c *Client) ListSchedules(ctx context.Context, queue string) ([]Schedule, error) {
	var q *string
	if queue != "" {
		q = &queue
	}
	rows, err := c.q.ListSchedules(ctx, c.pool, q)
	if err != nil {
		return nil, fmt.Errorf("batchq: list schedules: %w", err)
	}
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		out[i] = scheduleFromRow(r)
	}
	return out, nil
}

func scheduleFromRow(r dbsqlc.BatchqSchedule) Schedule {
	s := Schedule{
		Name: r.Name, Queue: r.Queue, Tenant: r.Tenant, Kind: r.Kind, Cost: r.Cost, MaxAttempts: int(r.MaxAttempts),
		Payload: json.RawMessage(r.Payload), Cron: r.Cron, Timezone: r.Timezone, Missed: r.Missed,
		Paused: r.PausedAt != nil, LastRunAt: r.LastRunAt, LastJobID: r.LastJobID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.PausedAt == nil {
		// A paused schedule's stored next tick does not fire: the resume
		// chooses the next.
		s.NextRunAt = r.NextRunAt
	}
	if r.Ttl != nil {
		s.TTL = *r.Ttl
	}
	if r.LastError != nil {
		s.LastError = *r.LastError
	}
	return s
}
