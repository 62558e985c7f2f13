package queue

import (
	"slices"
	"testing"
	"time"
)

// FuzzParseCron: an expression and a time zone either parse, and then every
// plan made from any due time and any later time keeps planTicks' promises
// (each on-time tick in order, the latest missed one under MissedOne, the
// first tick after), or are refused naming the cron or the timezone field.
func FuzzParseCron(f *testing.F) {
	for _, seed := range []struct{ expr, tz string }{
		{"0 2 * * *", "Europe/Paris"}, {"30 2 * * *", "Europe/Paris"}, {"@every 2s", ""}, {"@daily", "UTC"},
		{"*/15 9-17 * * 1-5", "America/New_York"}, {"0 0 29 2 *", ""}, {"0 0 30 2 *", ""}, {"0 25 * * *", ""},
		{"CRON_TZ=Asia/Tokyo 0 9 * * *", ""}, {"@every 1s", "Mars/Base"}, {"", ""}, {"@every 0s", ""},
		{"0 2 * * 7", ""}, {"0 2 * * MON-SUN", ""}, {"@every day", ""}, {"@fortnightly", ""}, {"0 0 2 * * *", ""},
		{"0 TZ=UTC * * *", ""}, {"0 2 * * CRON_TZ=x", ""},
	} {
		f.Add(seed.expr, seed.tz, int64(0), int64(3600))
	}
	// Weeks without a worker: more ticks than a walk one by one takes.
	f.Add("@every 1s", "", int64(0), int64(29*24*3600))
	f.Add("* * * * *", "Europe/Paris", int64(0), int64(29*24*3600))
	// A pass a little late for a schedule of seconds: every tick is on time.
	f.Add("@every 1s", "", int64(0), int64(45))
	base := time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr, tz string, dueOffset, lateness int64) {
		s, err := parseCron(expr, tz)
		if err != nil {
			if err.Field != "cron" && err.Field != "timezone" {
				t.Fatalf("refused naming %q: %v", err.Field, err)
			}
			return
		}
		due := base.Add(time.Duration(dueOffset%(366*24*3600)) * time.Second)
		at := due.Add(time.Duration(lateness%(30*24*3600)+30*24*3600) % (30 * 24 * 3600) * time.Second)
		for _, missed := range []string{MissedSkip, MissedOne} {
			ticks, next := planTicks(s, due, at, missed, ScheduleGrace)
			if len(ticks) == 0 {
				t.Fatalf("%s: nothing planned for a tick due %s at %s", missed, due, at)
			}
			for i, tick := range ticks {
				if tick.at.Before(due) || tick.at.After(at) {
					t.Fatalf("%s: tick %s outside [due %s, at %s]", missed, tick.at, due, at)
				}
				onTime := at.Sub(tick.at) <= ScheduleGrace
				if !onTime && i > 0 {
					t.Fatalf("%s: missed tick %s after tick %s", missed, tick.at, ticks[i-1].at)
				}
				if tick.enqueue != (onTime || missed == MissedOne) {
					t.Fatalf("%s: enqueue %v for a tick found %s late", missed, tick.enqueue, at.Sub(tick.at))
				}
				if i > 0 && onTime && at.Sub(ticks[i-1].at) <= ScheduleGrace && !s.Next(ticks[i-1].at).Equal(tick.at) {
					t.Fatalf("%s: on-time tick %s does not follow %s", missed, tick.at, ticks[i-1].at)
				}
			}
			last := ticks[len(ticks)-1].at
			if n := s.Next(last); !n.IsZero() && !n.After(at) && len(ticks) < maxOnTimeTicks {
				t.Fatalf("%s: tick %s is not the latest at %s: %s is later", missed, last, at, n)
			}
			if !ticks[0].enqueue || at.Sub(ticks[0].at) <= ScheduleGrace || len(ticks) == 1 {
				// The first tick is the latest missed one only when the one
				// after it is on time.
			} else if n := s.Next(ticks[0].at); at.Sub(n) > ScheduleGrace {
				t.Fatalf("%s: missed tick %s is not the latest missed: %s is", missed, ticks[0].at, n)
			}
			if !next.After(at) {
				t.Fatalf("%s: next tick %s not after %s", missed, next, at)
			}
		}
	})
}

// A refused expression says which rule it breaks: the field by name and
// number, with the values it takes, rather than robfig/cron's words.
func TestParseCronSaysTheFieldAndItsValues(t *testing.T) {
	t.Parallel()
	const syntax = "as *, a value, a range low-high (1-5), a list (1,3) or a step (*/2)"
	for expr, want := range map[string]string{
		"0 2 * * 7":        `day-of-week, field 5 of 5, must be 0-6 or SUN-SAT, Sunday being 0, ` + syntax + ` (got "7" in "0 2 * * 7")`,
		"0 2 * * 5-7":      `day-of-week, field 5 of 5, must be 0-6 or SUN-SAT, Sunday being 0, ` + syntax + ` (got "5-7" in "0 2 * * 5-7")`,
		"0 2 * * MON-SUN":  `day-of-week, field 5 of 5, must be 0-6 or SUN-SAT, Sunday being 0, ` + syntax + ` (got "MON-SUN" in "0 2 * * MON-SUN")`,
		"61 * * * *":       `minute, field 1 of 5, must be 0-59, ` + syntax + ` (got "61" in "61 * * * *")`,
		"0 24 * * *":       `hour, field 2 of 5, must be 0-23, ` + syntax + ` (got "24" in "0 24 * * *")`,
		"0 2 0 * *":        `day-of-month, field 3 of 5, must be 1-31, ` + syntax + ` (got "0" in "0 2 0 * *")`,
		"0 2 * 13 *":       `month, field 4 of 5, must be 1-12 or JAN-DEC, ` + syntax + ` (got "13" in "0 2 * 13 *")`,
		"*/0 * * * *":      `minute, field 1 of 5, must be 0-59, ` + syntax + ` (got "*/0" in "*/0 * * * *")`,
		"x 2 * * *":        `minute, field 1 of 5, must be 0-59, ` + syntax + ` (got "x" in "x 2 * * *")`,
		"0 2 * *":          `must be five fields, minute hour day-of-month month day-of-week (no seconds), or a descriptor such as @daily (got 4 fields in "0 2 * *")`,
		"0 0 2 * * *":      `must be five fields, minute hour day-of-month month day-of-week (no seconds), or a descriptor such as @daily (got 6 fields in "0 0 2 * * *")`,
		"@fortnightly":     `must be five fields or a descriptor: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every DURATION (got "@fortnightly")`,
		"@every day":       `@every must be followed by a duration such as 90s or 2h (got "@every day")`,
		"@every 10000000h": `must tick within five years ("@every 10000000h" does not)`,
		"@every .h":        `@every must be followed by a duration such as 90s or 2h (got "@every .h")`,
		" ":                `must not be empty: give five fields, minute hour day-of-month month day-of-week, such as "0 2 * * *", or a descriptor such as @daily or @every 1h`,
		"0 2 * * SUN,7":    `day-of-week, field 5 of 5, must be 0-6 or SUN-SAT, Sunday being 0, ` + syntax + ` (got "SUN,7" in "0 2 * * SUN,7")`,
	} {
		_, err := parseCron(expr, "")
		if err == nil {
			t.Fatalf("%q: parsed", expr)
		}
		if err.Field != "cron" || err.Rule != want {
			t.Errorf("%q:\n got %s: %s\nwant cron: %s", expr, err.Field, err.Rule, want)
		}
	}
	for _, expr := range []string{"0 2 * * 0", "0 2 * * 6", "0 2 * * SUN", "0 2 * * MON-FRI", "0 2 * JAN-DEC *"} {
		if _, err := parseCron(expr, ""); err != nil {
			t.Errorf("%q: %v", expr, err)
		}
	}
}

// An "@every" schedule keeps to its grid: a tick found late does not move
// the ticks after it (found 1.5 s late every time, "@every 5s" would tick
// every 6.5 s and enqueue a sixth fewer jobs).
func TestPlanTicksKeepsAnEveryScheduleOnItsGrid(t *testing.T) {
	t.Parallel()
	s, err := parseCron("@every 5s", "")
	if err != nil {
		t.Fatal(err)
	}
	due := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	for range 10 {
		at := due.Add(1500 * time.Millisecond)
		ticks, next := planTicks(s, due, at, MissedSkip, ScheduleGrace)
		if len(ticks) != 1 || !ticks[0].at.Equal(due) || !ticks[0].enqueue || !next.Equal(due.Add(5*time.Second)) {
			t.Fatalf("found at %s: ticks %v, next %s; want tick %s, next %s", at, ticks, next, due, due.Add(5*time.Second))
		}
		due = next
	}
	// Found three intervals late, within the grace: each of the four ticks
	// is on time and enqueues, and the next is on the grid.
	due = time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	ticks, next := planTicks(s, due, due.Add(16*time.Second), MissedSkip, ScheduleGrace)
	var got []time.Time
	for _, tick := range ticks {
		if !tick.enqueue {
			t.Fatalf("on-time tick %s skipped", tick.at)
		}
		got = append(got, tick.at)
	}
	want := []time.Time{due, due.Add(5 * time.Second), due.Add(10 * time.Second), due.Add(15 * time.Second)}
	if !slices.EqualFunc(got, want, time.Time.Equal) || !next.Equal(due.Add(20*time.Second)) {
		t.Fatalf("three intervals late: ticks %v, next %s; want %v, %s", got, next, want, due.Add(20*time.Second))
	}
	// Found two minutes late: the latest missed tick (skipped, as asked),
	// then the minute of on-time ticks.
	ticks, next = planTicks(s, due, due.Add(2*time.Minute), MissedSkip, ScheduleGrace)
	if first := ticks[0]; first.enqueue || !first.at.Equal(due.Add(55*time.Second)) {
		t.Fatalf("two minutes late: first tick %s (enqueue %v); want %s skipped", first.at, first.enqueue, due.Add(55*time.Second))
	}
	if len(ticks) != 1+13 || !ticks[1].at.Equal(due.Add(time.Minute)) || !next.Equal(due.Add(125*time.Second)) {
		t.Fatalf("two minutes late: %d ticks from %s, next %s; want 14 from %s, next %s", len(ticks), ticks[1].at, next,
			due.Add(time.Minute), due.Add(125*time.Second))
	}
}

// A pool's passes come about its MaintainInterval apart, and its grace
// counts that interval: with passes 75 s apart, an "@every 5s" schedule's
// ticks since the last pass are all on time, none missed.
func TestPlanTicksWithAPoolsGraceLosesNoTickBetweenPasses(t *testing.T) {
	t.Parallel()
	s, err := parseCron("@every 5s", "")
	if err != nil {
		t.Fatal(err)
	}
	due := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	at := due.Add(80 * time.Second)
	ticks, next := planTicks(s, due, at, MissedSkip, ScheduleGrace+75*time.Second)
	if len(ticks) != 17 || !next.Equal(due.Add(85*time.Second)) {
		t.Fatalf("got %d ticks, next %s; want 17, %s", len(ticks), next, due.Add(85*time.Second))
	}
	for i, tick := range ticks {
		if want := due.Add(time.Duration(i) * 5 * time.Second); !tick.at.Equal(want) || !tick.enqueue {
			t.Fatalf("tick %d: %s (enqueue %v); want %s enqueued", i, tick.at, tick.enqueue, want)
		}
	}
	// With the grace of a call of Maintain, the first four were missed and
	// skipped as one.
	ticks, _ = planTicks(s, due, at, MissedSkip, ScheduleGrace)
	if len(ticks) != 14 || ticks[0].enqueue || !ticks[0].at.Equal(due.Add(15*time.Second)) {
		t.Fatalf("Maintain's grace: %d ticks, first %s (enqueue %v); want 14, %s skipped", len(ticks), ticks[0].at, ticks[0].enqueue,
			due.Add(15*time.Second))
	}
}

// Spaces around an expression, or more than one after @every, are spaces:
// robfig/cron alone would refuse them for a rule they do not break.
func TestParseCronTakesSpacesAsSpaces(t *testing.T) {
	t.Parallel()
	if _, err := parseCron("@every1h", ""); err == nil {
		t.Error("@every1h: taken; robfig/cron, and so batchq before, refuse it")
	}
	for expr, want := range map[string]string{"@every 1h ": "@every 1h", "@every  1h": "@every 1h", " @daily": "@daily",
		"0 2 * * * ": "0 2 * * *", "@every\t90s": "@every 90s"} {
		got, err := parseCron(expr, "")
		if err != nil {
			t.Errorf("%q: %v", expr, err)
			continue
		}
		w, _ := parseCron(want, "")
		from := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
		if !got.Next(from).Equal(w.Next(from)) {
			t.Errorf("%q ticks at %s, %q at %s", expr, got.Next(from), want, w.Next(from))
		}
	}
}
